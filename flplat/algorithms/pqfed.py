"""PQFed — Yue et al., "PQFed: A Privacy-Preserving Quality-Controlled Federated Learning Framework" (§IV,
Algorithms 1 and 2).

Before round 1 (``init_state``, Algorithm 1): the server fits the public feature extractor M_p, a PCA with
``pca_components`` components on ``public_size`` rows of its public inputs (``FederationInfo.public_x``: the
partition's public sample, else the global test inputs); every client projects its training data with M_p and
releases it with Laplace noise (Eqs. 6-8, ``epsilon``; ``inf``: no noise) through ``ops.compute`` — ε-LDP per
coordinate, so a released d-dimensional row is d·ε-LDP by composition (see :mod:`flplat.maths.pqfed`); the server
runs K-means (``num_clusters``) on the pooled noisy features, forms each client's histogram over the clusters and
the EMD (Eq. 4, POT) between the ``target`` client's histogram and every other one, with the centroid distances
as ground cost. The maths is in :mod:`flplat.maths.pqfed`.

Collaborators (``selection``): ``strict`` = clients with EMD ≤ ``strict_ratio`` (0.3) × the largest EMD,
``lenient`` = ≤ ``lenient_ratio`` (0.6) × it, ``all``, ``none`` (the target alone, i.e. local training) or
``given`` (the ids in ``collaborators``: fixed groups such as the paper's Exps. 1-16).

Training: the ``inner`` algorithm from the registry (``fedavg``, ``fedprox`` or ``feddyn``; its keys in
``inner_params``) runs on the target and its collaborators only, all of them every round (the paper's FL among
the selected clients; for the inner algorithm that group is the federation, ``Strategy.population``: FedDyn's h
divides by its size, not by K). ``mode=incremental`` is Algorithm 2: the collaborators are ordered by EMD,
closest first; stage i (``rounds_per_stage`` rounds) trains the target with the i-th client
(``incremental_group=pair``, the paper's reading; ``cumulative``: with the i closest), starting from the
previous stage's model; after each stage the target's accuracy on ``stop_split`` is compared with the best so
far and, with ``incremental_stop``, training stops at the first decrease (the model is then the last one, as
Algorithm 2 returns it, or the best one with ``incremental_return=best``); later rounds leave the model
unchanged. ``stop_split=val`` needs a validation split on the target and a target without a test split has no
accuracy: both are ConfigErrors when the strategy is built.

Logged every round: ``target_accuracy`` (the target's test accuracy with the model it uses), the number of
collaborators, the EMD threshold; in incremental mode the stage, its client and that client's EMD, and, from the
stage where Algorithm 2 breaks (its first decrease on ``stop_split``; the last stage when there is none) on,
``algorithm2_stage`` and ``algorithm2_accuracy`` (the target's test accuracy of the model Algorithm 2 returns,
per ``incremental_return``). These two are also logged with ``incremental_stop=false``, where training goes on
through every stage: one run then gives both Table VIII's accuracy after every stage and Algorithm 2's outcome
(the rounds up to the break are the same with and without stopping). The EMD of every client is a series
(``emd_by_client``), in incremental mode also the target's test accuracy after each stage
(``target_accuracy_by_stage``, step = stage), and ``pqfed/selection.csv`` an artifact.

Choices where the paper is open: the LDP sensitivity range (``ldp_range``, see :mod:`flplat.maths.pqfed`) is fixed
from the public sample with clipping by default (``local``: each client's own range, the paper's formula); the
server K-means has ``num_clusters`` = 15 (the paper's elbow choice for MNIST/CIFAR-10); the clients project their
train split; the EMD ground cost is the raw centroid distance (``ground_cost=normalized``: over its maximum,
which reproduces Fig. 3's flattening under strong noise; the selection rules are scale free, so unaffected).

State: PQFed's own (the EMDs, the collaborators' order, Algorithm 2's bookkeeping) is :class:`PQFedState` in
``state.method``; the inner algorithm's own state is its field ``inner``, put in ``state.method`` around every
call into the inner strategy (:meth:`PQFed.call_inner`), so the inner algorithm reads and writes it as it would
alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from flplat.api import (
    ALGORITHMS,
    ClientPlan,
    ConfigError,
    EvalModels,
    Strategy,
    build_inner,
    check_choice,
    check_inner,
    check_range,
    register_algorithm,
)
from flplat.maths import pqfed as pm

INNER = ("fedavg", "fedprox", "feddyn")


class ProjectAndPerturb:
    """Client side of Algorithm 1: ``Z̃_i = LDP_ε(M_p(D_i))`` on the client's rows, seeded with ``view.seed``."""

    def __init__(self, mean, components, epsilon: float, lo, hi):
        self.mean, self.components, self.epsilon, self.lo, self.hi = mean, components, epsilon, lo, hi

    def __call__(self, view) -> np.ndarray:
        z = pm.project(view.x.float().cpu().numpy(), self.mean, self.components)
        return pm.laplace_ldp(z, self.epsilon, np.random.default_rng(view.seed), self.lo, self.hi).astype(np.float32)


@dataclass
class PQFedState:
    """``emd``: (K,) each client's EMD to the target; ``order``: the collaborators, closest first; the target's last
    test accuracy ``target_acc``; Algorithm 2 (incremental): whether training ``stopped``, the best stopping-split
    accuracy so far ``best_acc`` (with its test accuracy ``best_test`` and model ``best_weights``), the test
    accuracy after each stage ``stage_acc``, the stage where Algorithm 2 breaks ``a2_stage`` (0: not yet) and the
    accuracy it returns ``a2_acc``; ``inner``: the inner algorithm's own state."""

    emd: np.ndarray
    order: np.ndarray
    stopped: bool = False
    best_acc: float = -1.0
    target_acc: float = math.nan
    stage_acc: np.ndarray = field(default_factory=lambda: np.zeros(0))
    best_test: float = math.nan
    a2_stage: int = 0
    a2_acc: float = math.nan
    best_weights: torch.Tensor | None = None
    inner: Any = None


@register_algorithm
class PQFed(Strategy):
    name = "pqfed"
    # its inner algorithm (fedavg, fedprox, feddyn) has one global model
    eval_models = EvalModels("global", "global", "the inner federation's global model")

    @dataclass(frozen=True)
    class Config:
        target: int = 0  # id of the target client T
        selection: str = "lenient"  # strict | lenient | all | none | given
        collaborators: list[int] = field(default_factory=list)  # selection=given: these client ids
        strict_ratio: float = 0.3
        lenient_ratio: float = 0.6
        inner: str = "fedavg"  # fedavg | fedprox | feddyn (registry name)
        inner_params: dict[str, Any] = field(default_factory=dict)  # the inner algorithm's keys, e.g. {mu: 0.01}
        epsilon: float = 10.0  # LDP budget per coordinate (a d-dim row: d·ε); inf: no noise
        ldp_range: str = "public"  # public (clipped to the public features' range) | local (the client's range)
        pca_components: int = 50
        public_size: int = 500
        num_clusters: int = 15
        kmeans_n_init: int = 1
        ground_cost: str = "euclidean"  # euclidean (Eq. 4) | normalized (centroid distances / their max)
        mode: str = "fixed"  # fixed | incremental (Algorithm 2)
        rounds_per_stage: int = 20
        incremental_group: str = "pair"  # pair | cumulative
        incremental_stop: bool = True
        incremental_return: str = "last"  # last | best
        stop_split: str = "test"  # test | val

    @staticmethod
    def validate_config(cfg, section: str) -> None:
        check_range(cfg.target >= 0, f"{section}.target", cfg.target, "a client id >= 0")
        check_choice(f"{section}.selection", cfg.selection, pm.SELECTIONS)
        for k in ("strict_ratio", "lenient_ratio"):
            check_range(0.0 <= cfg[k] <= 1.0, f"{section}.{k}", cfg[k], "a number in [0, 1]")
        inner = [n for n in INNER if n in ALGORITHMS]
        check_choice(f"{section}.inner", cfg.inner, inner)
        check_inner(f"{section}.inner_params", cfg.inner, dict(cfg.inner_params))
        check_range(cfg.epsilon > 0, f"{section}.epsilon", cfg.epsilon, "a number > 0 (inf: no noise)")
        check_choice(f"{section}.ldp_range", cfg.ldp_range, pm.LDP_RANGES)
        check_choice(f"{section}.ground_cost", cfg.ground_cost, pm.GROUND_COSTS)
        for k in ("pca_components", "num_clusters", "kmeans_n_init", "rounds_per_stage"):
            check_range(cfg[k] >= 1, f"{section}.{k}", cfg[k], "an integer >= 1")
        check_range(cfg.public_size >= 2, f"{section}.public_size", cfg.public_size, "an integer >= 2")
        check_choice(f"{section}.mode", cfg.mode, ("fixed", "incremental"))
        check_choice(f"{section}.incremental_group", cfg.incremental_group, ("pair", "cumulative"))
        check_choice(f"{section}.incremental_return", cfg.incremental_return, ("last", "best"))
        check_choice(f"{section}.stop_split", cfg.stop_split, ("test", "val"))

    def __init__(self, cfg, info):
        super().__init__(cfg, info)
        if cfg.target >= info.num_clients:
            raise ConfigError(f"algorithm.target={cfg.target} is out of range; allowed: a client id in "
                              f"[0, {info.num_clients - 1}]")
        bad = [k for k in cfg.collaborators if not 0 <= k < info.num_clients]
        if bad:
            raise ConfigError(f"algorithm.collaborators contains {bad[0]}; allowed: client ids in "
                              f"[0, {info.num_clients - 1}]")
        self._check_target_splits(cfg, info)
        if info.public_x is None:
            raise ConfigError("algorithm.name='pqfed' needs public inputs for its PCA: a dataset with a test set "
                              "(mnist, fmnist, cifar10, synthetic) or partition.name=pqfed")
        self.inner = build_inner(cfg.inner, dict(cfg.inner_params), info)

    def call_inner(self, fn, state, *args):
        """``fn(state, *args)``, a method of the inner strategy, with the inner algorithm's own state in
        ``state.method`` (PQFed's is put back after, holding the inner's as it left it)."""
        own = state.method
        state.method = own.inner
        try:
            out = fn(state, *args)
        finally:
            own.inner = state.method
            state.method = own
        return out

    @staticmethod
    def _check_target_splits(cfg, info) -> None:
        """The target's accuracy is measured on its test split, and Algorithm 2's stopping rule on ``stop_split``:
        an empty one would log NaN / never stop, so it is a ConfigError (on the ``pqfed`` partition only client 0,
        the partition's target, has a test split unless ``partition.test_fraction`` > 0, and none has a
        validation split unless ``partition.val_fraction`` > 0)."""
        t = cfg.target
        test, val = info.split_samples.get("test"), info.split_samples.get("val")
        if test is not None and test[t] == 0:
            ok = np.flatnonzero(test > 0)
            raise ConfigError(f"algorithm.target={t}: client {t} has no test split, so its accuracy is undefined; "
                              f"allowed: a client with test data ({', '.join(map(str, ok[:5]))}"
                              f"{', ...' if len(ok) > 5 else ''}) or partition.test_fraction > 0")
        stops = cfg.mode == "incremental" and cfg.incremental_stop
        if stops and cfg.stop_split == "val" and val is not None and val[t] == 0:
            raise ConfigError(f"algorithm.stop_split='val': the target client {t} has no validation split, so "
                              "Algorithm 2 would never stop; allowed: algorithm.stop_split=test, or "
                              "partition.val_fraction > 0 on a partition that gives the target one")

    # ---- Algorithm 1 --------------------------------------------------------------------------------
    def similarity(self, rng: np.random.Generator, ops) -> tuple[np.ndarray, np.ndarray]:
        """EMD of every client to the target and the ordered candidate collaborators."""
        c, pub = self.cfg, self.info.public_x
        if not pub.is_floating_point():  # text: token ids have no PCA geometry (a float cast would hide it)
            raise ConfigError("algorithm.name='pqfed' projects the inputs on a PCA of the public sample; the data "
                              "are token ids (text); allowed: an image or tabular dataset")
        if len(pub) > c.public_size:
            pub = pub[np.sort(rng.choice(len(pub), size=c.public_size, replace=False))]
        mean, comps = pm.fit_public_pca(pub.float().cpu().numpy(), c.pca_components)
        lo, hi = pm.feature_range(pm.project(pub.float().cpu().numpy(), mean, comps))
        if c.ldp_range == "local":
            lo = hi = None
        fn = ProjectAndPerturb(mean, comps, float(c.epsilon), lo, hi)
        feats = ops.compute([(k, None) for k in range(self.info.num_clients)], fn, "train",
                            seed=int(rng.integers(2**31 - 1)))
        centers, hists = pm.kmeans_histograms(feats, c.num_clusters, int(rng.integers(2**31 - 1)), c.kmeans_n_init)
        emd = pm.emd_to_target(hists, c.target, centers, c.ground_cost)
        chosen = pm.select_collaborators(emd, c.target, c.selection, c.strict_ratio, c.lenient_ratio,
                                         c.collaborators)
        return emd, pm.distance_order(emd, chosen)

    def init_state(self, init_weights, rng, ops):
        state = self.inner.init_state(init_weights, rng, ops)
        emd, order = self.similarity(rng, ops)
        state.method = PQFedState(emd=emd, order=order, inner=state.method,
                                  best_weights=None if state.weights is None else state.weights.clone())
        return state

    # ---- rounds ---------------------------------------------------------------------------------------
    def _stage(self, state) -> int:
        return (state.round - 1) // self.cfg.rounds_per_stage

    def _frozen(self, state) -> bool:
        x = state.method
        return self.cfg.mode == "incremental" and (x.stopped or self._stage(state) >= len(x.order))

    def group(self, state) -> np.ndarray:
        """The clients training this round: the target and its collaborators (incremental: this stage's)."""
        order = state.method.order
        if self.cfg.mode == "incremental":
            s = min(self._stage(state), len(order) - 1)
            order = order[s:s + 1] if self.cfg.incremental_group == "pair" else order[:s + 1]
        return np.sort(np.concatenate([[self.cfg.target], order]).astype(np.int64))

    def select(self, state, rng, ops):
        return np.array([self.cfg.target]) if self._frozen(state) else self.group(state)

    def plan(self, state, client):
        if self._frozen(state):
            return ClientPlan(weights=self.call_inner(self.inner.eval_weights, state, client), epochs=0)
        return self.call_inner(self.inner.plan, state, client)

    def aggregate(self, state, results, ops):
        x = state.method
        frozen = self._frozen(state)
        if not frozen:
            self.inner.population = len(self.group(state))  # the inner federation (FedDyn's K)
            state = self.call_inner(self.inner.aggregate, state, results, ops)
        t = self.cfg.target
        x.target_acc = float(ops.evaluate([(t, self.eval_weights(state, t))], "test")[0].accuracy)
        if not frozen and self.cfg.mode == "incremental" and state.round % self.cfg.rounds_per_stage == 0:
            stage, test_acc = state.round // self.cfg.rounds_per_stage, x.target_acc
            x.stage_acc = np.append(x.stage_acc, test_acc)
            acc = x.target_acc if self.cfg.stop_split == "test" else float(
                ops.evaluate([(t, self.eval_weights(state, t))], "val")[0].accuracy)
            decreased = bool(acc < x.best_acc)
            if decreased and not x.a2_stage:  # where Algorithm 2 breaks (also when incremental_stop is off)
                x.a2_stage = int(stage)
                x.a2_acc = float(x.best_test if self.cfg.incremental_return == "best" else test_acc)
            if self.cfg.incremental_stop and decreased:
                x.stopped = True
                if self.cfg.incremental_return == "best" and state.weights is not None:
                    state.weights = x.best_weights.clone()
                    x.target_acc = float(ops.evaluate([(t, state.weights)], "test")[0].accuracy)
            else:
                x.best_acc, x.best_test = float(acc), float(test_acc)
                if state.weights is not None:
                    x.best_weights = state.weights.clone()
            if not x.a2_stage and stage == len(x.order):  # no decrease: Algorithm 2 returns the last model
                x.a2_stage, x.a2_acc = int(stage), float(test_acc)
        return state

    # ---- evaluation and logging ---------------------------------------------------------------------------
    def eval_weights(self, state, client):
        return self.call_inner(self.inner.eval_weights, state, client)

    def global_weights(self, state):
        return self.call_inner(self.inner.global_weights, state)

    def round_metrics(self, state):
        x = state.method
        emd, order = x.emd, x.order
        others = np.delete(emd, self.cfg.target)
        ratio = {"strict": self.cfg.strict_ratio, "lenient": self.cfg.lenient_ratio}.get(self.cfg.selection)
        m = dict(self.call_inner(self.inner.round_metrics, state))
        m.update({"target_accuracy": float(x.target_acc), "num_collaborators": float(len(order)),
                  "emd_max": float(others.max()) if others.size else 0.0,
                  "emd_threshold": float(ratio * others.max()) if ratio is not None and others.size else math.nan})
        if self.cfg.mode == "incremental" and len(order):
            s = min(self._stage(state), len(order) - 1)
            m.update({"stage": float(s + 1), "stage_client": float(order[s]), "stage_client_emd": float(emd[order[s]]),
                      "stopped": float(x.stopped)})
            if x.a2_stage:
                m.update({"algorithm2_stage": float(x.a2_stage), "algorithm2_accuracy": float(x.a2_acc)})
        return m

    def series(self, state):
        x = state.method
        out = {"emd_by_client": [(k, float(d)) for k, d in enumerate(x.emd)]}
        if self.cfg.mode == "incremental":
            out["target_accuracy_by_stage"] = [(i + 1, float(a)) for i, a in enumerate(x.stage_acc)]
        return out

    def artifacts(self, state):
        x = state.method
        rank = {int(k): i + 1 for i, k in enumerate(x.order)}
        rows = [f"{k},{d:.6f},{int(k in rank)},{rank.get(k, '')}" for k, d in enumerate(x.emd)]
        return {"pqfed/selection.csv": "client,emd,collaborator,rank\n" + "\n".join(rows) + "\n"}
