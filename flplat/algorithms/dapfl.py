"""DA-PFL — Yang et al., "Dynamic Affinity-based Personalized Federated Learning" (Algorithm 1, §III).

Once, from the clients' train label counts: the affinity c_ij of every pair (Eqs. 3–6,
:mod:`flplat.maths.dapfl_affinity`).
Each round the server samples m clients; for each participant i, from the participants' current personalised
models w_j (their last local models; the initial model before their first round):

* θ_ij = c_ij / Σ_j c_ij · (1 − exp(−(‖w_i − w_j‖² + ε) / σ)), j ≠ i                              (Eq. 7)
* α_ij = θ_ij / Σ_j θ_ij                                                                              (Eq. 8)
* w_i^g = Σ_{j≠i} α_ij w_j                                                                           (Eq. 9)

computed for all participants at once (one (m, m) distance matrix and one (m, m) @ (m, P) product). Client i
then minimises L(w; D_i) + λ/2 ‖w − w_i^g‖² (Eqs. 2, 10) starting from its own model w_i^{t−1}, and keeps the
result as its personalised model, with which it is evaluated. Personalised models are rows of one client store.

Ablations (Table V) as switches: ``affinity=false, dynamic=false`` is DA-PFL-V1 (uniform weights over the other
participants), ``dynamic=false`` is DA-PFL-V2 (α = normalised affinity).

Choices (config keys; the paper's reading is the default, the authors' code in brackets):
``min_shared`` classes for an overlap (1 [2]), ``fill_factor`` for pairs without overlap (1.0 [0.9]),
``distance_power`` (2 [1]: the code uses the unsquared norm), ``sigma`` (1; the code has none, i.e. 1),
``eps``; ``local_start``: ``personal`` (Eq. 10 updates w_i^{t−1}) or ``aggregated`` (start from w_i^g). The
distance is taken over the model's parameters (not normalisation buffers). ``pull``: ``loss`` (default, the
paper's Eq. 10: λ/2‖w − w_i^g‖² is a term of the local loss, so with momentum it also enters the momentum buffer
and weight decay applies to the sum) or ``step`` (the authors' code: after each optimizer step
θ ← θ − lr·λ·(θ − w_i^g), outside the optimizer; :class:`ProximalStep`). The two agree for plain SGD up to
where the pull is evaluated (before or after the step); with momentum β the loss term's steady-state pull is
1/(1 − β) times stronger (2× at the authors' β = 0.5). With ``federation.vectorize`` ``pull=step`` pulls the group's
clients at once (:class:`StackedPull`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from flplat.api import (
    CentredHook,
    ClientPlan,
    ConfigError,
    PersonalizedStrategy,
    ProximalTerm,
    StackedHook,
    param_choice,
    register_algorithm,
    sample_uniform,
)
from flplat.maths.dapfl_affinity import affinity_matrix, dynamic_weights, pairwise_distances


class ProximalStep(CentredHook):
    """The authors' form of Eq. 10's pull: after every optimizer step θ ← θ − lr·λ·(θ − c) for each parameter,
    ``c`` the centre (w_i^g) given as a flat vector and lr the phase's learning rate (``HookContext.lr``)."""

    def __init__(self, center: torch.Tensor, lam: float):
        super().__init__(center)
        self.lam = lam

    def after_step(self, ctx):
        rate = ctx.lr * self.lam
        with torch.no_grad():
            for p, c in zip(ctx.params, self._centers):
                p.sub_(rate * (p - c))


class StackedPull(StackedHook):
    """:class:`ProximalStep` for a group of vectorised clients: each live client's parameters pulled towards its own
    centre after every step."""

    def __init__(self, hooks, ctx):
        super().__init__(hooks, ctx)
        if len({h.lam for h in hooks}) != 1:
            raise ValueError("StackedPull: the clients of a group must share DA-PFL's λ")
        self.lam = hooks[0].lam
        self.centers = ctx.stack([h.center for h in hooks])

    def after_step(self, step):
        rate = step.lr * self.lam
        with torch.no_grad():
            for p, c in zip(step.params, self.centers):
                p.sub_(rate * (p - c[:step.live]))


ProximalStep.Stacked = StackedPull


@dataclass
class DAPFLState:
    """``affinity``: the (K, K) class affinities c_ij (fixed); this round's ``participants``, their aggregated models
    w_i^g (``aggregated``, (m, P) in participant order) and weights α (``alpha``, (m, m)); None before round 1."""

    affinity: torch.Tensor
    participants: torch.Tensor | None = None
    aggregated: torch.Tensor | None = None
    alpha: torch.Tensor | None = None


@register_algorithm
class DAPFL(PersonalizedStrategy):
    name = "dapfl"

    @dataclass(frozen=True)
    class Config:
        lam: float = 1.0  # λ of Eq. 10 (the authors' code: 1)
        sigma: float = 1.0  # σ of Eq. 7
        eps: float = 1e-8  # ε of Eq. 7
        distance_power: float = 2.0  # ‖w_i − w_j‖^p in Eq. 7 (paper 2; authors' code 1)
        min_shared: int = 1  # shared classes needed for an overlap (authors' code: 2)
        fill_factor: float = 1.0  # no-overlap pairs get fill_factor × min affinity (authors' code: 0.9)
        affinity: bool = True  # False: equal affinities (DA-PFL-V1 together with dynamic=false)
        dynamic: bool = True  # False: no model-distance term in Eq. 7 (DA-PFL-V2)
        local_start: str = "personal"  # personal | aggregated
        pull: str = "loss"  # loss (Eq. 10's loss term) | step (the authors' post-step θ ← θ − lr·λ(θ − w_i^g))

    @staticmethod
    def validate_config(cfg, section: str) -> None:
        for key in ("lam", "eps"):
            if not getattr(cfg, key) >= 0:
                raise ConfigError(f"{section}.{key}={getattr(cfg, key)!r} is out of range; allowed: a number >= 0")
        for key in ("sigma", "distance_power", "fill_factor"):
            if not getattr(cfg, key) > 0:
                raise ConfigError(f"{section}.{key}={getattr(cfg, key)!r} is out of range; allowed: a number > 0")
        if cfg.min_shared < 1:
            raise ConfigError(f"{section}.min_shared={cfg.min_shared!r} is out of range; allowed: an integer >= 1")
        param_choice(section, cfg, "local_start", ("aggregated", "personal"))
        param_choice(section, cfg, "pull", ("loss", "step"))

    def init_state(self, init_weights, rng, ops):
        state = super().init_state(init_weights, rng, ops)
        state.personal = self.info.client_store(default=state.weights)
        k = self.info.num_clients
        if self.cfg.affinity:
            c = affinity_matrix(self.info.label_counts, self.cfg.min_shared, self.cfg.fill_factor)
        else:
            c = (1.0 - np.eye(k)) / max(k - 1, 1)
        state.method = DAPFLState(affinity=torch.as_tensor(c, dtype=torch.float64))
        return state

    def select(self, state, rng, ops):
        chosen = sample_uniform(self.info.num_clients, self.info.client_fraction, rng)
        state.method.participants = torch.as_tensor(chosen)
        state.method.aggregated = self.aggregated_models(state, chosen)
        return chosen

    def aggregated_models(self, state, clients: np.ndarray) -> torch.Tensor:
        """w_i^g (Eq. 9) for every participant at once: an (m, P) stack in the order of ``clients``."""
        w = torch.stack([state.personal.get(int(k)) for k in clients])
        idx = torch.as_tensor(clients, dtype=torch.long)
        c = state.method.affinity[idx][:, idx]
        dist = None
        if self.cfg.dynamic:
            mask = self.info.layout.mask("", params_only=True).to(w.device)
            dist = pairwise_distances(w[:, mask], self.cfg.distance_power).cpu()
        alpha = dynamic_weights(c, dist, self.cfg.sigma, self.cfg.eps)
        if len(clients) == 1:  # no other participant: the client's own model
            alpha = torch.ones(1, 1, dtype=alpha.dtype)
        state.method.alpha = alpha
        return alpha.to(w.device, w.dtype) @ w

    def plan(self, state, client):
        part = state.method.participants
        hit = torch.nonzero(part == client) if part is not None else torch.zeros(0, 1)
        # a client planned outside `select` (not a participant) aggregates as a lone participant: its own model
        wg = state.method.aggregated[int(hit[0, 0])] if len(hit) else state.personal.get(client)
        start = state.personal.get(client) if self.cfg.local_start == "personal" else wg
        pull = ProximalTerm if self.cfg.pull == "loss" else ProximalStep
        hooks = (pull(wg, self.cfg.lam),) if self.cfg.lam > 0 else ()
        return ClientPlan(weights=start, hooks=hooks)

    def round_metrics(self, state):
        alpha = state.method.alpha
        if alpha is None or alpha.shape[0] < 2:
            return {}
        # how concentrated the personalised aggregation is: mean over participants of the largest α_ij
        return {"dapfl_alpha_max": float(alpha.max(dim=1).values.mean())}

    def artifacts(self, state):
        c = state.method.affinity.numpy()
        rows = "\n".join(",".join(f"{v:.6g}" for v in row) for row in c)
        return {"dapfl/affinity.csv": ",".join(f"c{j}" for j in range(c.shape[1])) + "\n" + rows + "\n"}
