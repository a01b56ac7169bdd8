"""Server optimizers for the FedOpt family, as pure functions on flat tensors with explicit state.

The server treats the round's change of the global model as a gradient. With ``w`` the current global model and
``avg`` the sample-weighted mean of the client models (FedAvg's result), Reddi et al. (ICLR 2021, Algorithm 2)
write Δ = avg − w, the *negative* pseudo-gradient, and Hsu et al. (2019) use g = w − avg = −Δ. Per kind:

- ``sgd``:      w ← w + η Δ  (η = 1 gives w ← avg: FedAvg is FedOpt with server SGD at η = 1)
- ``momentum``: v ← β v + g,  w ← w − η v  (FedAvgM, Hsu et al. 2019, Sec. 3; v starts at 0 so v_1 = g)
- ``adagrad``:  m ← β1 m + (1−β1) Δ,  v ← v + Δ²                          (Reddi, Alg. 2)
- ``yogi``:     m as above,  v ← v − (1−β2) Δ² sign(v − Δ²)                (Reddi, Alg. 2)
- ``adam``:     m as above,  v ← β2 v + (1−β2) Δ²                           (Reddi, Alg. 2)
  and for the three adaptive kinds  w ← w + η m / (√v + τ).

Reddi et al. initialise m = 0 and v_{-1} ≥ τ²; ``v_init`` (None: τ²) sets v's start.

Bias correction (``bias_correction``, ``adam`` kind only): Reddi's Algorithm 2 has none (``none``). Flower's
``FedAdam`` strategy (flwr.server.strategy.FedAdam, which Clust-PSI-PFL's authors ran) scales the step size as in
Kingma & Ba's Adam, η_t = η·√(1 − β2^t) / (1 − β1^t), with t = server_round + 1 (its rounds count from 1, so the
first step uses t = 2: ``flower``); ``adam`` uses t = the number of steps taken, Kingma & Ba's count (the first
step uses t = 1). Flower's FedAdagrad and FedYogi apply no correction. ``init`` returns the state, ``step`` a
new model and a new state; inputs are never modified.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

KINDS = ("sgd", "momentum", "adagrad", "yogi", "adam")
ADAPTIVE = ("adagrad", "yogi", "adam")
BIAS_CORRECTIONS = ("none", "flower", "adam")


@dataclass(frozen=True)
class ServerOpt:
    """Hyperparameters of one server optimizer; fields a kind does not use are ignored."""

    kind: str = "sgd"  # one of KINDS
    lr: float = 1.0  # η, the server learning rate
    momentum: float = 0.0  # β of ``momentum`` (FedAvgM)
    beta1: float = 0.9  # first-moment decay of the adaptive kinds
    beta2: float = 0.99  # second-moment decay of yogi and adam
    tau: float = 1e-3  # τ, the adaptivity constant of the adaptive kinds
    v_init: float | None = None  # initial second moment of the adaptive kinds; None: τ²
    bias_correction: str = "none"  # adam kind: none (Reddi) | flower (t = round + 1) | adam (t = round)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"server optimizer {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.bias_correction not in BIAS_CORRECTIONS:
            raise ValueError(f"bias_correction {self.bias_correction!r} is not one of {', '.join(BIAS_CORRECTIONS)}")


def step_size(hp: ServerOpt, steps: int) -> float:
    """η_t for the ``steps``-th step (1 for the first): η, or for ``adam`` with a bias correction
    η·√(1 − β2^t) / (1 − β1^t), t = ``steps`` (``adam``) or ``steps + 1`` (``flower``)."""
    if hp.kind != "adam" or hp.bias_correction == "none":
        return hp.lr
    t = steps + (1 if hp.bias_correction == "flower" else 0)
    return hp.lr * (1 - hp.beta2**t) ** 0.5 / (1 - hp.beta1**t)


def init(hp: ServerOpt, w: torch.Tensor) -> dict[str, torch.Tensor]:
    """The optimizer state for a model shaped like ``w``: ``step`` (rounds taken) plus ``v`` / ``m``."""
    state = {"step": torch.zeros((), dtype=torch.long)}
    if hp.kind == "momentum":
        state["v"] = torch.zeros_like(w)
    elif hp.kind in ADAPTIVE:
        v0 = hp.tau**2 if hp.v_init is None else hp.v_init
        state["m"] = torch.zeros_like(w)
        state["v"] = torch.full_like(w, v0)
    return state


def step(hp: ServerOpt, state: dict[str, torch.Tensor], w: torch.Tensor,
         avg: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """One server step from the global model ``w`` given the clients' average ``avg``: ``(new_w, new_state)``."""
    out = {"step": state["step"] + 1}
    g = w - avg  # pseudo-gradient (Hsu); Reddi's Δ is −g
    if hp.kind in ("sgd", "momentum"):
        u = g if hp.kind == "sgd" else hp.momentum * state["v"] + g
        if hp.kind == "momentum":
            out["v"] = u
        # w − η u, written from avg (w − g) so that η = 1 with u = g gives avg bit-exactly (FedAvg)
        return avg + (g - hp.lr * u), out
    d = -g
    m = hp.beta1 * state["m"] + (1 - hp.beta1) * d
    v, d2 = state["v"], d * d
    if hp.kind == "adagrad":
        v = v + d2
    elif hp.kind == "yogi":
        v = v - (1 - hp.beta2) * d2 * torch.sign(v - d2)
    else:  # adam
        v = hp.beta2 * v + (1 - hp.beta2) * d2
    out["m"], out["v"] = m, v
    return w + step_size(hp, int(out["step"])) * m / (v.sqrt() + hp.tau), out
