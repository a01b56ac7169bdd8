"""``flplat check``'s verification of what a strategy declares, and of the models it is scored with.

A strategy declares what the engine relies on (:mod:`flplat.protocol.strategy`): ``reduces_across_shards``,
``eval_models`` and, on its hooks, ``vectorizes``. Each declaration is checked on the tiny federation of
:mod:`flplat.studies.conformance` (the ``vectorize`` property compares a declared hook's vectorised clients with the
loop's):

* :func:`check_declarations` -- ``reduces_across_shards``: the first round's results aggregated as they are and,
  separately, with every result replaced by its group's sample-weighted mean (what a sharded round's all-reduce hands
  ``aggregate``) must give the same server state (rel 1e-5); a strategy that does not declare it must not return
  groups from ``mean_groups``;
* :func:`check_evaluation` -- after a run of the tiny federation: every training client is scored with the model
  ``eval_models.seen`` names (``eval_weights`` agrees with it); ``test_time_weights`` gives models exactly when
  ``eval_models.unseen`` is ``test_time``; no client that trained, and no unseen client, is scored with a model no
  client trained -- a model holding the initial values of a parameter tensor that training changes (the initial head
  of a personalised method, a plugin scoring every client with the initial model); and a clustered strategy
  (:class:`~flplat.protocol.strategy.ClusteredStrategy`) has formed clusters by the last round, so the check
  exercised its clustered state (a method whose clustering starts later needs overrides that start it earlier:
  :data:`flplat.studies.conformance.CHECK_OVERRIDES`). Unseen clients are the partition's; on a partition without
  any, the training clients stand in for them (a test-time model is inferred from their unlabeled test split).

Each returns ``(ok, detail)``; :mod:`flplat.studies.conformance` turns them into its ``declarations`` and
``evaluation`` properties.
"""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import torch


def _prepared(cfg):
    """The assembled experiment, keeping this process's torch thread count."""
    from flplat.experiment import prepare

    threads = torch.get_num_threads()
    try:
        return prepare(cfg)
    finally:
        torch.set_num_threads(threads)


def reduced(results, groups) -> list:
    """``results`` with every model replaced by its group's sample-weighted mean (what
    :class:`~flplat.engine.sharding.ShardedExecutor` hands ``aggregate`` after its all-reduce)."""
    g = torch.as_tensor(groups, dtype=torch.long)
    n = torch.tensor([float(r.num_samples) for r in results])
    w = torch.stack([r.weights.float() for r in results])
    sums = torch.zeros(int(g.max()) + 1, w.shape[1]).index_add_(0, g, w * n[:, None])
    means = sums / torch.zeros(len(sums)).index_add_(0, g, n).clamp_min(1e-12)[:, None]
    return [dataclasses.replace(r, weights=means[int(k)].clone()) for r, k in zip(results, groups)]


def _state_diff(a, b) -> str | None:
    for key in ("weights", "clusters"):
        x, y = getattr(a, key), getattr(b, key)
        if (x is None) != (y is None):
            return f"state.{key} is None on one side"
        if x is not None and not torch.allclose(x.float(), y.float(), rtol=1e-5, atol=1e-6):
            return f"state.{key} differs by up to {float((x.float() - y.float()).abs().max()):.3g}"
    if a.personal is not None and b.personal is not None:
        for k in range(a.personal.num_clients):
            if a.personal.has(k) and not torch.allclose(a.personal.get(k).float(), b.personal.get(k).float(),
                                                        rtol=1e-5, atol=1e-6):
                return f"client {k}'s stored model differs"
    return None


def check_declarations(cfg) -> tuple[bool, str]:
    """``reduces_across_shards`` against the first round's aggregate (module docstring)."""
    from flplat.engine.executor import LocalExecutor

    p = _prepared(cfg)
    s, seed = p.strategy, int(cfg.seed)
    ex = LocalExecutor(p.trainer, p.data, seed)
    rng = np.random.default_rng(seed)
    state = s.init_state(p.init_weights, rng, ex)
    state.round = 1
    plans = s.plan_round(state, s.select(state, rng, ex))
    groups = s.mean_groups(state, plans)
    name = type(s).__name__
    if not s.reduces_across_shards:
        if groups is not None:
            return False, f"{name}.mean_groups returns groups but it does not declare reduces_across_shards"
        return True, "reduces_across_shards=False: a sharded round gathers every client's model"
    if groups is None or len(groups) != len(plans):
        return False, f"{name} declares reduces_across_shards but mean_groups gives {groups!r} for {len(plans)} plans"
    results = ex.train(plans, 1)
    snap, before = copy.deepcopy(s.state_dict()), copy.deepcopy(state)
    gathered = s.aggregate(copy.deepcopy(before), results, ex)
    s.load_state_dict(copy.deepcopy(snap))
    means = s.aggregate(copy.deepcopy(before), reduced(results, groups), ex)
    diff = _state_diff(means, gathered)
    if diff is not None:
        return False, (f"declares reduces_across_shards, but aggregating the group means instead of the "
                       f"{len(results)} models gives another state: {diff}")
    return True, (f"reduces_across_shards: the aggregate of {len(set(groups))} group mean(s) equals the aggregate "
                  f"of the {len(results)} models")


class _Recorder:
    """An executor that records which entries of the flat vector training changes (against ``init``)."""

    def __init__(self, ex, init: torch.Tensor):
        self.ex, self.init = ex, init
        self.changed = torch.zeros(init.numel(), dtype=torch.bool)

    def __getattr__(self, name):
        return getattr(self.ex, name)

    def train(self, plans, round, groups=None):
        results = self.ex.train(plans, round, groups)
        for r in results:
            self.changed |= r.weights.detach().cpu().float() != self.init
        return results


def _untrained(model: torch.Tensor | None, init: torch.Tensor, layout, changed: torch.Tensor) -> str | None:
    """The first parameter tensor that training changes but ``model`` holds at its initial values, or None."""
    if model is None:
        return "no model (None)"
    m = model.detach().cpu().float()
    for name, is_p, a, b in zip(layout.names, layout.is_param, layout.offsets[:-1], layout.offsets[1:]):
        if is_p and bool(changed[a:b].any()) and torch.equal(m[a:b], init[a:b]):
            return name
    return None


def _seen_problems(s, ev, state, trained, init, layout, changed) -> str | None:
    """Declared seen models honoured, and trained for every client that trained."""
    seen = s.eval_models.seen
    for k in range(ev.data.num_clients):
        model = ev.seen_model(state, k)
        if seen != "personal":
            own = s.eval_weights(state, k)
            if model is None or own is None or not torch.equal(own, model):
                return (f"declares eval_models.seen={seen!r}, but eval_weights(state, {k}) is not that model "
                        f"(declare the model its clients use)")
        bad = _untrained(model, init, layout, changed) if trained[k] else None
        if bad is not None:
            return (f"client {k} trained but is scored with a model no client trained (its {bad} is the initial "
                    f"one)")
    return None


def _unseen_problems(s, ev, state, trained, init, layout, changed) -> tuple[str | None, str]:
    unseen, data = s.eval_models.unseen, ev.data
    ids = data.unseen_ids or list(range(data.num_clients))
    tt = s.test_time_weights(state, ev.executor, ids)
    if (tt is not None) != (unseen == "test_time"):
        return (f"test_time_weights gives {'models' if tt is not None else 'None'} but eval_models.unseen is "
                f"{unseen!r}"), ""
    if unseen == "not_applicable":
        return None, f"unseen clients: not applicable ({s.eval_models.note})"
    models = list(tt) if tt is not None else [w for w, _ in ev.ensemble(state, trained)]
    if not models or (tt is not None and len(models) != len(ids)):
        return f"eval_models.unseen={unseen!r} gives {len(models)} models for {len(ids)} unseen clients", ""
    for i, w in enumerate(models):
        bad = _untrained(w, init, layout, changed)
        if bad is not None:
            return (f"unseen clients are scored with a model no client trained ({unseen}, model {i}: its {bad} is "
                    f"the initial one)"), ""
    return None, f"unseen clients: {unseen} ({len(models)} trained model(s))"


def check_evaluation(cfg) -> tuple[bool, str]:
    """The declared models after a run of the tiny federation (module docstring)."""
    from flplat.engine.executor import LocalExecutor
    from flplat.engine.orchestrator import Orchestrator
    from flplat.protocol.strategy import ClusteredStrategy

    p = _prepared(cfg)
    s, f, layout = p.strategy, cfg.federation, p.strategy.info.layout
    init = p.init_weights.detach().cpu().float().clone()
    ex = _Recorder(LocalExecutor(p.trainer, p.data, int(cfg.seed)), init)
    orch = Orchestrator(s, ex, p.data, int(f.rounds), int(f.eval_every), int(cfg.seed), metrics_cfg=cfg.metrics)
    state = orch.run(p.init_weights).state
    if not bool(ex.changed.any()):
        return False, "training changed no parameter: nothing to tell trained from untrained models by"
    trained = orch.trained
    problem = _seen_problems(s, orch.evaluator, state, trained, init, layout, ex.changed)
    if problem is None:
        problem, unseen = _unseen_problems(s, orch.evaluator, state, trained, init, layout, ex.changed)
    if problem is None and isinstance(s, ClusteredStrategy):
        a = state.assignment
        if state.clusters is None or a is None or not (np.asarray(a) >= 0).any():
            problem = (f"a clustered strategy, but no client is in a cluster after {orch.rounds} rounds: the check "
                       "never exercised its clustered state (give it overrides that start its clustering earlier)")
    if problem is not None:
        return False, problem
    clusters = "" if state.clusters is None else f", {state.clusters.shape[0]} cluster model(s)"
    return True, (f"{int(trained.sum())} trained clients scored with trained {s.eval_models.seen} models{clusters}; "
                  f"{unseen}")
