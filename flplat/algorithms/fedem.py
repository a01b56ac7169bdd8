"""FedEM — Marfoq, Neglia, Bellet, Kameni, Vidal, "Federated Multi-Task Learning under a Mixture of
Distributions", NeurIPS 2021 (Algorithm 1).

Each client's distribution is a mixture of M shared components: D_t = Σ_m π_tm D̃_m, with component models
θ_1..θ_M (``num_components``) shared by all clients and mixture weights π_t ∈ Δ^M kept per client (a (K, M)
array, ``state.method.pi`` of :class:`~flplat.api.MixtureState`, uniform at start). Per round, each sampled client t

* E-step (Eq. 10): q_t(z_i = m) ∝ π_tm exp(−ℓ(h_θm(x_i), y_i)) for each of its train samples i (per-sample losses
  of all M components in one batched pass, :func:`~flplat.api.losses_fn`);
* π_tm ← (1/n_t) Σ_i q_t(z_i = m)  (Eq. 11);
* M-step: trains every component m from θ_m on the q-weighted loss (1/n_t) Σ_i q_t(z_i = m) ℓ(h_θ(x_i), y_i);

and the server sets θ_m = Σ_t n_t θ_m,t / Σ_t n_t over the sampled clients (Eq. 13).

The weighted local loss, as done here (choice): every sample i is given to one component z_i drawn from
q_t(·| i) with the server rng, and component m trains E epochs on its samples {i: z_i = m} through the ordinary
client loop (``Strategy.plan_round``: one job per (client, component)). In expectation each epoch's summed
gradient is Σ_i q_t(z_i = m) ∇ℓ_i, the paper's; the batch size and optimizer are the federation's. A component
that draws fewer than ``min_component_samples`` samples is not trained on that client (it contributes θ_m
unchanged, weighted as the paper's average prescribes). All M models are downloaded (counted in ``bytes_down``).

Evaluation: the paper's personalised predictor is the mixture Σ_m π_tm p(y | x; θ_m); it is scored each round
on every client's test split and logged as ``mixture_accuracy`` (``mixture_eval``). The platform's per-client
table, ``global_accuracy`` and the cluster metrics use one model per client: the component of largest π_tm
(``assignment``; τ = M). With M = 1 FedEM is FedAvg.

The rounds are :class:`~flplat.api.MixtureStrategy`, which FedRC shares (with its own E-step prior).
"""

from __future__ import annotations

from dataclasses import dataclass

from flplat.api import (
    MIXTURE_AGGREGATIONS,
    TRUE_M,
    MixtureStrategy,
    param_choice,
    param_out_of_range,
    register_algorithm,
)


@register_algorithm
class FedEM(MixtureStrategy):
    name = "fedem"
    m_key = "num_components"  # the config key holding M (FedRC: num_clusters)

    @dataclass(frozen=True)
    class Config:
        num_components: int = 3  # M; 0: the partition's true M (Flux App. E.1)
        min_component_samples: int = 2  # a component with fewer drawn samples is not trained on that client
        aggregation: str = "samples"  # server weights of client t for component m: samples (n_t) | responsibility
        mixture_eval: bool = True  # log the mixture predictor's test accuracy each round (mixture_accuracy)

    @staticmethod
    def validate_config(cfg, section: str) -> None:
        if cfg.num_components < 0:
            param_out_of_range(section, cfg, "num_components", f"an integer >= 1, or {TRUE_M}")
        if cfg.min_component_samples < 1:
            param_out_of_range(section, cfg, "min_component_samples", "an integer >= 1")
        param_choice(section, cfg, "aggregation", MIXTURE_AGGREGATIONS)
