"""FedCLS — C. Li and H. Wu, "FedCLS: A federated learning client selection algorithm based on cluster label
information", IEEE 96th Vehicular Technology Conference (VTC2022-Fall), 2022, pp. 1-5 — reference [22] of
Clust-PSI-PFL, whose baseline this is (FedAvg aggregation). Clust-PSI-PFL describes it (Sec. II): "FedCLS [22]
guides client sampling using group-level label information and Hamming distances between one-hot label vectors,
preferentially selecting clients with complementary (diverse) label distributions". (Not Bhatti et al.'s
"FedCLS: Class-Aware Federated Learning in a Heterogeneous Environment", IEEE TNSM 2023, a different method.)

FedCLS uses group-level label information: each client reports the one-hot vector of the classes it holds,
z_k ∈ {0, 1}^C with z_kc = 1 iff client k has a training sample of class c, and the server groups clients whose
vectors are within Hamming distance ``tau``·C, then selects clients with complementary label sets — one from
each of the groups that need training most. Exact algorithm here:

1. Grouping, once (greedy leader grouping, as the Clust-PSI-PFL authors ran it): scan clients in index order;
   an ungrouped client i opens a new group and every ungrouped j > i with Hamming(z_i, z_j) ≤ τ·C joins it.
   Membership is decided against the group's first client only, so two members may be up to 2τ·C apart. A
   client nobody joins is a singleton group.
2. Selection, each round, from per-client losses F_k: a group's loss is the mean F_k of its members; groups
   are visited in decreasing loss (ties: lower group id) and each gives its highest-loss not-yet-chosen client;
   while fewer than m = max(1, round(q·K)) clients are chosen the visit repeats (second-highest, ...). With
   ≥ m groups the selected clients come from m different groups, i.e. hold different label sets.

Checked against that description: label information enters through the one-hot vectors, grouping through their
Hamming distance, and "complementary" selection through taking each client from a different group (different
label sets) while there are enough groups. Li & Wu's paper itself is not available to us; where the description
leaves things open: the Hamming distance is on binary presence
vectors (the authors' code compares averaged one-hot vectors entry-wise); losses (``losses``) are ``all``
(default: every client's training loss on the current global model, evaluated before selecting — a forward
pass over all clients' data each round, as the authors ran it) or ``last`` (most recent known: all clients
evaluated once on the initial model, then a participant's training loss after local training); both kept in
the method's state (:class:`~flplat.api.SelectionState`: ``loss``, and the groups in ``group``). The selection
itself is deterministic.
Clust-PSI-PFL (Table II) tuned τ ∈ {0.1, 0.5, 0.95} and used τ = 0.1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flplat.api import (
    LOSS_MODES,
    ConfigError,
    LossAwareSelection,
    num_selected,
    param_choice,
    register_algorithm,
    round_robin,
)


def hamming_groups(presence: np.ndarray, tau: float) -> np.ndarray:
    """Greedy leader grouping of binary ``(K, C)`` label-presence vectors: group ids 0..G-1 in order of their
    first client; j joins the group of leader i (the first ungrouped client) when Hamming(z_i, z_j) ≤ τ·C."""
    z = np.asarray(presence, dtype=bool)
    k, c = z.shape
    dist = (z[:, None, :] != z[None, :, :]).sum(axis=2)
    group = np.full(k, -1, dtype=np.int64)
    g = 0
    for i in range(k):
        if group[i] < 0:
            join = (group < 0) & (dist[i] <= tau * c + 1e-9)
            group[join] = g
            g += 1
    return group


def loss_ranked_selection(group: np.ndarray, loss: np.ndarray, m: int) -> np.ndarray:
    """Groups by decreasing mean loss, the highest-loss client of each, cycling until m (NaN loss = lowest)."""
    loss = np.nan_to_num(np.asarray(loss, dtype=np.float64), nan=-np.inf)
    g = int(group.max()) + 1
    mean = np.array([np.mean(loss[group == j]) for j in range(g)])
    order = np.argsort(-mean, kind="stable")
    ranked = [np.flatnonzero(group == j)[np.argsort(-loss[group == j], kind="stable")] for j in range(g)]
    return round_robin(order, ranked, m)


@register_algorithm
class FedCLS(LossAwareSelection):
    name = "fedcls"

    @dataclass(frozen=True)
    class Config:
        tau: float = 0.1  # Hamming threshold as a fraction of C (Clust-PSI-PFL Table II grid: 0.1, 0.5, 0.95)
        losses: str = "all"  # all: evaluate every client each round | last: most recent known losses

    @staticmethod
    def validate_config(cfg, section: str) -> None:
        if not 0.0 <= cfg.tau <= 1.0:
            raise ConfigError(f"{section}.tau={cfg.tau!r} is out of range; allowed: a number in [0, 1]")
        param_choice(section, cfg, "losses", LOSS_MODES)

    def init_state(self, init_weights, rng, ops):
        state = super().init_state(init_weights, rng, ops)
        state.method.group = hamming_groups(np.asarray(self.info.label_counts) > 0, float(self.cfg.tau))
        return state

    def select(self, state, rng, ops):
        m = num_selected(self.info.num_clients, self.info.client_fraction)
        return loss_ranked_selection(state.method.group, self.current_losses(state, ops), m)
