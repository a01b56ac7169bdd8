"""Simulated client failures (``federation.failures``) and the rejection of non-finite client updates.

Per round t, each sampled client independently (a generator seeded from the root seed, t and the client, so
failures do not shift any other random stream and are identical on resume and across executors):

* drops out with probability ``dropout``: it never reports (its jobs are not trained);
* is a straggler with probability ``straggler``: it completes only part of its local work, FedProx's
  "systems heterogeneity" (Li et al., MLSys 2020, §5.2: a straggler runs x local epochs, x uniform in
  {1, ..., E}); its result is aggregated (``straggler_policy=partial``, FedProx's inexact update) or discarded
  (``straggler_policy=drop``, how that paper's FedAvg baseline treats stragglers). Every local phase of the
  plan (Ditto, FedRep) is scaled by the same share x / E (at least one epoch each);
* sends a corrupted update with probability ``corrupt``: its weights become NaN (every second one +Inf).

Whatever the cause (simulated or a real divergence), a result whose weights are not all finite is rejected:
not aggregated, counted in ``rejected_clients`` (and ``failed_clients``). A client training several models in a
round (FedEM) fails or is rejected as a whole. The orchestrator skips ``aggregate`` when no result is left
(the server state is kept) and stops with "diverged at round t" when every trained client's update was
non-finite without simulated corruption.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import torch

from flplat.errors import RunFailed
from flplat.protocol.seeding import derive_seed
from flplat.protocol.strategy import ClientPlan, ClientResult


class Diverged(RunFailed):
    """Every client update of a round was NaN/Inf: training diverged (e.g. a learning rate too large)."""


def _scale_epochs(plan: ClientPlan, share: float, default_epochs: int) -> ClientPlan:
    epochs = plan.epochs if plan.epochs is not None else default_epochs
    phases = tuple(_scale_epochs(p, share, default_epochs) for p in plan.phases)
    return dataclasses.replace(plan, epochs=max(1, int(round(epochs * share))), phases=phases)


class FailureModel:
    """Applies ``federation.failures`` to a round's plans and results."""

    def __init__(self, cfg, seed: int, local_epochs: int):
        self.dropout = float(cfg.dropout)
        self.straggler = float(cfg.straggler)
        self.corrupt = float(cfg.corrupt)
        self.policy = str(cfg.straggler_policy)
        self.seed = int(seed)
        self.local_epochs = int(local_epochs)

    @property
    def active(self) -> bool:
        return self.dropout > 0 or self.straggler > 0 or self.corrupt > 0

    def plan(self, plans: Sequence[tuple[int, ClientPlan]], round: int
             ) -> tuple[list[tuple[int, ClientPlan]], dict[str, float], set[int]]:
        """The plans that run (drop-outs removed, stragglers' work cut), the round's failure counts, and the
        clients whose update will be corrupted."""
        clients = sorted({c for c, _ in plans})
        # per client and round: drop-out, straggler, straggler's epochs, corruption (independent of who else runs)
        u = [np.random.default_rng(derive_seed(self.seed, "failures", round, c)).random(4) for c in clients]
        dropped = {c for c, r in zip(clients, u) if r[0] < self.dropout}
        stragglers = {c: r[2] for c, r in zip(clients, u) if c not in dropped and r[1] < self.straggler}
        corrupt = {c for c, r in zip(clients, u) if c not in dropped and r[3] < self.corrupt}
        if self.policy == "drop":
            dropped |= set(stragglers)
        out = []
        for c, p in plans:
            if c in dropped:
                continue
            if c in stragglers:
                e = self.local_epochs
                x = 1 + int(stragglers[c] * e)  # uniform in {1, ..., E}
                p = _scale_epochs(p, x / e, e)
            out.append((c, p))
        counts = {"dropped_clients": float(len(dropped)), "straggler_clients": float(len(stragglers))}
        return out, counts, corrupt

    @staticmethod
    def corrupt_results(results: list[ClientResult], corrupt: set[int]) -> list[ClientResult]:
        out = []
        for r in results:
            if r.client in corrupt:
                bad = torch.full_like(r.weights, float("inf") if r.client % 2 else float("nan"))
                r = dataclasses.replace(r, weights=bad)
            out.append(r)
        return out


def all_finite(w: torch.Tensor) -> bool:
    """Whether every entry of ``w`` is finite. A finite sum proves it (a NaN or an infinity makes the sum NaN or
    infinite), at a tenth of the cost of the element-wise test, which decides only where the sum is not finite
    (a NaN, an infinity, or finite values whose sum overflows)."""
    return bool(torch.isfinite(w.sum())) or bool(torch.isfinite(w).all())


def reject_nonfinite(results: list[ClientResult]) -> tuple[list[ClientResult], int]:
    """Drop every result of a client with any non-finite weights; returns the kept results and how many clients
    were rejected."""
    bad = {r.client for r in results if not all_finite(r.weights)}
    return [r for r in results if r.client not in bad], len(bad)
