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

Reddi et al. initialise m = 0 and v_{-1} ≥ τ²; ``v_init`` (None: τ²) sets v's start. Neither paper uses Adam's
bias correction, so neither does this module. ``init`` returns the state, ``step`` a new model and a new state;
inputs are never modified.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

KINDS = ("sgd", "momentum", "adagrad", "yogi", "adam")
ADAPTIVE = ("adagrad", "yogi", "adam")


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

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"server optimizer {self.kind!r} is not one of {', '.join(KINDS)}")


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
    return w + hp.lr * m / (v.sqrt() + hp.tau), out
