"""The FedOpt family: FedAvg whose server applies an optimizer to the round's averaged update.

- FedOpt / FedAdagrad / FedYogi / FedAdam — Reddi et al., "Adaptive Federated Optimization", ICLR 2021,
  Algorithm 1 (FedOpt) and Algorithm 2 (the adaptive server updates).
- FedAvgM — Hsu, Qi & Brown, "Measuring the Effects of Non-Identical Data Distribution for Federated Visual
  Classification", 2019, Sec. 3 (server momentum v ← βv + Δw, w ← w − v; here with a server lr η, w ← w − ηv).

Each round runs FedAvg on the clients (sample-weighted mean ``avg`` of their models) and then one step of the
server optimizer :mod:`flplat.maths.fedopt` from the global model towards it; its state (moments, step count)
lives in ``state.opt``. FedAvg is FedOpt with server SGD at η = 1 (``fedopt``'s default). The named variants
differ only in their Config defaults: the best values of Clust-PSI-PFL's Table II grid search
(configs/search_spaces/table2.yaml holds the grids).

Choices where the sources leave room (all Config keys):

- ``client_lr`` is Table II's η_l, the clients' learning rate; the default None uses ``federation.optimizer.lr``
  rather than Table II's "best" η_l = 1. Reddi's clients run SGD; Clust-PSI-PFL's run Adam at lr 0.001 (Table
  II, "All" rows), which cannot also be η_l = 1: they used Flower, whose FedOpt strategies store ``eta_l``
  without ever sending it to clients, so η_l most likely had no effect there. With flplat's Adam clients,
  lr = 1 diverges (tiny federation: train loss 3.3 → 12 → 4.0, chance is 1.4). Set ``client_lr=1`` to try it
  (the search space keeps Table II's η_l grid).
- ``v_init``: Reddi require v_{-1} ≥ τ², our default is τ² (None); Flower starts from 0 (``v_init=0``).
- FedAdagrad's ``beta1`` defaults to 0 (no server momentum, as Flower's FedAdagrad, which Clust-PSI-PFL used;
  Table II does not tune it); Reddi's Algorithm 2 allows any β1.
- ``bias_correction`` (adam kind; :mod:`flplat.maths.fedopt`): Reddi's Algorithm 2 has no bias correction,
  Flower's FedAdam scales η by √(1 − β2^t)/(1 − β1^t) with t = round + 1 (``flower``; ``adam``: t = round, Kingma
  & Ba). ``fedadam`` defaults to ``flower``: it is Clust-PSI-PFL's FedAdam baseline, and the paper's Sec. IV-A
  says the authors "relied on Flower [30] ... for the FL baselines", so Flower's step is what Table II's tuned
  η = 0.001 was tuned for. ``fedopt`` with ``server_optimizer=adam`` keeps Reddi's ``none``. (FedAvgM, FedAdagrad
  and FedYogi match Flower's strategies, which have no correction, given ``v_init=0``.)

Note: an adaptive step moves each weight by η·|m|/(√v + τ), of order η (from v = 0 the first ratio is
(1−β1)/√(1−β2) = 1 with Table II's β's; Flower's bias correction then scales FedAdam's first step by
√(1−0.99²)/(1−0.9²) ≈ 0.74 and step t by √(1−β2^(t+1))/(1−β1^(t+1)): ≈ 0.47 at t = 10, → 1 for large t), so
with Table II's η = 0.001 FedYogi and FedAdam move the global model by ~1e-3 per weight per round and need many
rounds, where FedAvg takes the full average update.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from flplat.api import ClientPlan, ConfigError, FedAvgStrategy, fedavg, register_algorithm
from flplat.maths import fedopt as server_opt


@register_algorithm
class FedOpt(FedAvgStrategy):
    name = "fedopt"
    kinds: ClassVar[tuple[str, ...]] = server_opt.KINDS  # server optimizers this name accepts

    @dataclass(frozen=True)
    class Config:
        server_optimizer: str = "sgd"  # sgd | momentum | adagrad | yogi | adam
        server_lr: float = 1.0  # η
        server_momentum: float = 0.0  # β of FedAvgM (server_optimizer=momentum)
        beta1: float = 0.9  # adaptive kinds: first-moment decay β1
        beta2: float = 0.99  # yogi, adam: second-moment decay β2
        tau: float = 1e-3  # adaptive kinds: adaptivity τ
        v_init: float | None = None  # adaptive kinds: initial second moment v_{-1}; None: τ²
        client_lr: float | None = None  # η_l, the clients' learning rate; None: federation.optimizer.lr
        bias_correction: str = "none"  # adam kind: none (Reddi) | flower (Flower's FedAdam) | adam (Kingma & Ba)

    @classmethod
    def validate_config(cls, cfg, section: str) -> None:
        if cfg.server_optimizer not in cls.kinds:
            raise ConfigError(f"{section}.server_optimizer={cfg.server_optimizer!r} is not valid for {cls.name}; "
                              f"choose one of: {', '.join(cls.kinds)}")
        checks = [("server_lr", cfg.server_lr > 0, "a number > 0"),
                  ("server_momentum", 0 <= cfg.server_momentum < 1, "a number in [0, 1)"),
                  ("beta1", 0 <= cfg.beta1 < 1, "a number in [0, 1)"),
                  ("beta2", 0 <= cfg.beta2 <= 1, "a number in [0, 1]"),
                  ("tau", cfg.tau > 0 and math.isfinite(cfg.tau), "a finite number > 0"),
                  ("v_init", cfg.v_init is None or cfg.v_init >= 0, "null (τ²) or a number >= 0"),
                  ("client_lr", cfg.client_lr is None or cfg.client_lr > 0, "null or a number > 0")]
        if cfg.bias_correction not in server_opt.BIAS_CORRECTIONS:
            raise ConfigError(f"{section}.bias_correction={cfg.bias_correction!r} is not valid; choose one of: "
                              f"{', '.join(server_opt.BIAS_CORRECTIONS)}")
        for key, ok, allowed in checks:
            if not ok:
                raise ConfigError(f"{section}.{key}={getattr(cfg, key)!r} is out of range; allowed: {allowed}")

    def __init__(self, cfg, info):
        super().__init__(cfg, info)
        self.hp = server_opt.ServerOpt(kind=cfg.server_optimizer, lr=cfg.server_lr, momentum=cfg.server_momentum,
                                       beta1=cfg.beta1, beta2=cfg.beta2, tau=cfg.tau, v_init=cfg.v_init,
                                       bias_correction=cfg.bias_correction)

    def init_state(self, init_weights, rng, ops):
        state = super().init_state(init_weights, rng, ops)
        state.opt = server_opt.init(self.hp, state.weights)
        return state

    def plan(self, state, client):
        return ClientPlan(weights=state.weights, lr=self.cfg.client_lr)

    reduces_across_shards = True  # the server step reads the round's sample-weighted mean model only

    def aggregate(self, state, results, ops):
        state.weights, state.opt = server_opt.step(self.hp, state.opt, state.weights, fedavg(results))
        return state


@register_algorithm
class FedAvgM(FedOpt):
    name = "fedavgm"
    kinds = ("momentum",)

    @dataclass(frozen=True)
    class Config(FedOpt.Config):
        server_optimizer: str = "momentum"
        server_momentum: float = 0.7  # Table II best of {0.7, 0.9, 0.99}; η = 1 as Hsu et al.


@register_algorithm
class FedAdagrad(FedOpt):
    name = "fedadagrad"
    kinds = ("adagrad",)

    @dataclass(frozen=True)
    class Config(FedOpt.Config):
        server_optimizer: str = "adagrad"
        server_lr: float = 0.3162  # Table II best η of {0.1, 0.3162}
        beta1: float = 0.0  # as Flower's FedAdagrad; not in Table II
        tau: float = 0.1  # Table II best of {0.01, 0.1}


# FedYogi and FedAdam: Table II's best β1 = 0.9 and β2 = 0.99 are FedOpt's defaults.
@register_algorithm
class FedYogi(FedOpt):
    name = "fedyogi"
    kinds = ("yogi",)

    @dataclass(frozen=True)
    class Config(FedOpt.Config):
        server_optimizer: str = "yogi"
        server_lr: float = 0.001  # Table II best η of {0.001, 0.01}
        tau: float = 0.01  # Table II best of {0.001, 0.01, 0.1}


@register_algorithm
class FedAdam(FedOpt):
    name = "fedadam"
    kinds = ("adam",)

    @dataclass(frozen=True)
    class Config(FedOpt.Config):
        server_optimizer: str = "adam"
        server_lr: float = 0.001  # Table II best η of {0.001, 0.01}
        tau: float = 0.001  # Table II best of {0.001, 0.01, 0.1}
        bias_correction: str = "flower"  # the authors ran Flower's FedAdam (see the module docstring)
