"""What a strategy declares is what the engine does, and `flplat check` verifies each declaration: the model each
client is scored with (``eval_models``: seen global | cluster | personal; unseen global | cluster_ensemble |
client_ensemble | test_time | not_applicable), ``reduces_across_shards`` and a hook's ``vectorizes``. Deliberately
wrong plugins fail the ``declarations``, ``evaluation`` and ``vectorize`` properties."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from flplat.algorithms import ALGORITHMS
from flplat.algorithms.fedavg import FedAvg
from flplat.algorithms.fedprox import ProximalTerm
from flplat.algorithms.fedrep import FedRep
from flplat.api import (
    ClientPlan,
    ClientResult,
    ClusteredStrategy,
    EvalModels,
    LocalHook,
    PersonalizedStrategy,
    ServerState,
    Strategy,
)
from flplat.cli import main
from flplat.engine.evaluation import Evaluator
from flplat.studies import conformance as cf
from flplat.studies import declarations as dc


def _bare(cls, **attrs):
    """An instance of ``cls`` without __init__ (only its declarations and methods matter)."""
    # eval_models restated: a subclass defining eval_weights without declaring would otherwise be inferred "personal"
    sub = type(cls.__name__, (cls,), {"aggregate": lambda self, state, results, ops: state,
                                      "eval_models": cls.eval_models, **attrs})
    return object.__new__(sub)


@pytest.fixture
def register(monkeypatch):
    def add(cls):
        monkeypatch.setitem(ALGORITHMS, cls.name, cls)  # what a plugin's @register does
        return cls.name

    return add


# ---- seen clients: the declared model -------------------------------------------------------------------------

W, CLUSTERS = torch.tensor([9.0]), torch.tensor([[0.0], [1.0]])


def _seen(strategy, state):
    return [float(Evaluator(strategy, None, SimpleNamespace(num_clients=4)).seen_model(state, k)[0])
            for k in range(4)]


def test_seen_global_scores_every_client_with_the_global_model():
    s = _bare(Strategy, global_weights=lambda self, st: st.weights * 2, eval_weights=lambda self, st, k: st.weights)
    assert _seen(s, ServerState(weights=W)) == [18.0] * 4  # global_weights, not eval_weights


def test_seen_cluster_scores_a_client_with_its_cluster_and_the_unassigned_with_their_model():
    state = ServerState(weights=W, clusters=CLUSTERS, assignment=np.array([1, -1, 0, 1]))
    assert _seen(_bare(ClusteredStrategy), state) == [1.0, 9.0, 0.0, 1.0]
    fesem_like = _bare(ClusteredStrategy, unassigned_weights=lambda self, st: st.clusters[1])
    assert _seen(fesem_like, state) == [1.0, 1.0, 0.0, 1.0]


def test_seen_personal_scores_each_client_with_its_own_model():
    s = _bare(PersonalizedStrategy, eval_weights=lambda self, st, k: torch.tensor([float(10 * k)]))
    assert _seen(s, ServerState(weights=W)) == [0.0, 10.0, 20.0, 30.0]


# ---- unseen clients: the declared model -------------------------------------------------------------------------

PROBS = {0.0: torch.tensor([[0.7, 0.3]]), 1.0: torch.tensor([[0.1, 0.9]]), 9.0: torch.tensor([[0.45, 0.55]])}


class Ops:
    """Each model θ = [v] predicts PROBS[v] on the unseen client 4, whose one label is 0."""

    def __init__(self):
        self.evaluated = []

    def compute(self, requests, fn, split="train", seed=0):
        return [(PROBS[float(w[0])], torch.tensor([0])) for _, w in requests]

    def evaluate(self, requests, split="val"):
        from flplat.api import EvalResult

        self.evaluated += [(k, float(w[0])) for k, w in requests]
        return [EvalResult(k, 0.0, int(PROBS[float(w[0])].argmax() == 0), 1) for k, w in requests]


def _test_phase(strategy, state, trained=None, ops=None):
    data = SimpleNamespace(num_clients=4, meta={}, unseen_ids=[4], multilabel=False)
    ev = Evaluator(strategy, ops or Ops(), data)
    return ev, ev.test_phase(state, trained)


def test_unseen_global_is_the_global_model():
    s = _bare(Strategy, global_weights=lambda self, st: st.clusters[0])  # not state.weights
    ev, out = _test_phase(s, ServerState(weights=W, clusters=CLUSTERS))
    assert ev.ensemble(ServerState(weights=W, clusters=CLUSTERS)) == [(CLUSTERS[0], 1.0)]
    assert out["test_phase_accuracy"] == 1.0  # θ = 0 predicts class 0; state.weights (9) would predict 1


def test_unseen_client_ensemble_is_the_trained_clients_models_equally_weighted():
    models = {0: 0.0, 1: 1.0, 2: 1.0, 3: 9.0}
    s = _bare(PersonalizedStrategy, eval_weights=lambda self, st, k: torch.tensor([models[k]]))
    state = ServerState(weights=W)
    # all four: (0.7 + 0.1 + 0.1 + 0.45) / 4 = 0.3375 for class 0: wrong
    assert _test_phase(s, state)[1]["test_phase_accuracy"] == 0.0
    # clients 0 and 3 trained: (0.7 + 0.45) / 2 = 0.575 for class 0: right
    ev, out = _test_phase(s, state, np.array([True, False, False, True]))
    assert out["test_phase_accuracy"] == 1.0
    assert [float(w[0]) for w, c in ev.ensemble(state, np.array([True, False, False, True]))] == [0.0, 9.0]


def test_unseen_test_time_uses_the_strategy_inference_and_refuses_none():
    s = _bare(Strategy, eval_models=EvalModels("global", "test_time", "inferred"),
              test_time_weights=lambda self, st, ops, ids: [st.clusters[1] for _ in ids])
    ops = Ops()
    _, out = _test_phase(s, ServerState(weights=W, clusters=CLUSTERS), ops=ops)
    assert ops.evaluated == [(4, 1.0)] and out["test_phase_accuracy"] == 0.0
    none = _bare(Strategy, eval_models=EvalModels("global", "test_time", "inferred"))
    with pytest.raises(RuntimeError, match="declares eval_models.unseen='test_time' but test_time_weights gave None"):
        _test_phase(none, ServerState(weights=W))


def test_unseen_not_applicable_reports_no_test_phase_and_needs_a_reason():
    s = _bare(Strategy, eval_models=EvalModels("personal", "not_applicable", "no model without labels"))
    ev, out = _test_phase(s, ServerState(weights=W))
    assert "test_phase_accuracy" not in out
    assert ev.tags()["flplat.eval.unseen_model"] == "not_applicable: no model without labels"
    with pytest.raises(ValueError, match="needs a note saying why"):
        EvalModels("personal", "not_applicable")
    with pytest.raises(ValueError, match="EvalModels.unseen='cluster'; allowed: global, cluster_ensemble"):
        EvalModels("global", "cluster")


def test_fedrep_unseen_clients_are_scored_with_the_trained_clients_ensemble():
    """Hand-set FedRep state on a label-shift federation with unseen clients: 6 training clients, the first three
    trained with heads that always predict class 0, 0 and 1 (bias 20), the other three untrained with the initial
    head, which here always predicts class 2 (as does the head slice of the global vector). The documented model,
    the equal ensemble of the trained clients' models, predicts class 0 everywhere: the test-phase accuracy is the
    unseen clients' mean share of class-0 labels. (The untrained initial head gave their share of class 2.)"""
    from flplat.configure import load_config
    from flplat.engine.executor import LocalExecutor
    from flplat.experiment import prepare

    over = cf.tiny_overrides(**{"algorithm.name": "fedrep", "partition.name": "shift", "partition.type": "label",
                                "partition.level": 1, "partition.num_unseen_clients": 4,
                                "partition.samples_per_client": 60})
    p = prepare(load_config(None, [o for o in over if not o.startswith(("partition.alpha", "partition.min_samples"))]))
    ex = LocalExecutor(p.trainer, p.data, 0)
    s = p.strategy
    state = s.init_state(p.init_weights, np.random.default_rng(0), ex)
    mask = state.method.head_mask
    c = p.data.num_classes
    d = int(mask.sum()) // c - 1  # head: weight (C, D) then bias (C)

    def head(cls):
        return torch.cat([torch.zeros(c * d), 20.0 * torch.nn.functional.one_hot(torch.tensor(cls), c).float()])

    state.weights[mask] = head(2)  # the head slice of the global vector: the "initial head"
    state.personal.default = head(2)
    for k, cls in enumerate((0, 0, 1)):
        state.personal.set(k, head(cls))
    trained = np.array([True, True, True, False, False, False])
    out = Evaluator(s, ex, p.data).test_phase(state, trained)
    shares = [np.mean(p.data.y[p.data.indices(q, "test")].numpy() == cls) for cls in (0, 2) for q in p.data.unseen_ids]
    want, old = np.mean(shares[:4]), np.mean(shares[4:])
    assert want != old
    assert out["test_phase_accuracy"] == pytest.approx(want)
    assert s.eval_models == EvalModels("personal", "client_ensemble", FedRep.eval_models.note)


# ---- flplat check: evaluation -------------------------------------------------------------------------------------

class UntrainedEval(FedAvg):
    """The probe: FedAvg that scores every client with the initial model (deliberately wrong)."""

    name = "test_untrained_eval"
    eval_models = EvalModels("personal", "global", "the global model")

    def init_state(self, init_weights, rng, ops):
        self.initial = init_weights.clone()
        return super().init_state(init_weights, rng, ops)

    def eval_weights(self, state, client):
        return self.initial


class InitialHeadForUnseen(FedRep):
    """FedRep whose unseen clients get the body and the initial head (the global vector): deliberately wrong."""

    name = "test_initial_head_for_unseen"
    eval_models = EvalModels("personal", "global", "φ with the initial head")

    def global_weights(self, state):
        return state.weights


class MislabelledGlobal(FedAvg):
    """Declares that clients are scored with the global model while eval_weights says otherwise."""

    name = "test_mislabelled_global"
    eval_models = EvalModels("global", "global", "the global model")

    def eval_weights(self, state, client):
        return state.weights * 0.5


class NeverClusters(ClusteredStrategy):
    """A clustered method whose clustering never starts within the check's rounds: FedAvg on state.weights."""

    name = "test_never_clusters"

    def aggregate(self, state, results, ops):
        return FedAvg.aggregate(self, state, results, ops)


class UndeclaredTestTime(FedAvg):
    """Infers unseen clients' models but declares that they are scored with the global model."""

    name = "test_undeclared_test_time"
    eval_models = EvalModels("global", "global", "the global model")

    def test_time_weights(self, state, ops, clients):
        return [state.weights for _ in clients]


def _check(name: str, prop: str) -> cf.Result:
    return cf.run_check(cf.Target(name), prop)


def test_scoring_clients_with_the_initial_model_fails_check(register, capsys):
    name = register(UntrainedEval)
    assert main(["check", name, "--only", "smoke,evaluation"]) == 1  # smoke passes: accuracies are finite
    lines = {line.split()[1]: line for line in capsys.readouterr().out.splitlines() if line[:4] in ("PASS", "FAIL")}
    assert lines["smoke"].startswith("PASS")
    assert lines["evaluation"].startswith("FAIL") and "is scored with a model no client trained" in lines["evaluation"]


def test_unseen_clients_scored_with_an_untrained_head_fail_check(register):
    r = _check(register(InitialHeadForUnseen), "evaluation")
    assert not r.ok and "unseen clients are scored with a model no client trained" in r.detail
    assert "head.weight" in r.detail
    assert _check("fedrep", "evaluation").ok


def test_a_seen_declaration_that_eval_weights_contradicts_fails_check(register):
    r = _check(register(MislabelledGlobal), "evaluation")
    assert not r.ok and "declares eval_models.seen='global', but eval_weights(state, 0) is not that model" in r.detail


def test_a_clustered_method_whose_clustering_never_runs_fails_check(register):
    r = _check(register(NeverClusters), "evaluation")
    assert not r.ok and "no client is in a cluster after 3 rounds" in r.detail
    ok = _check("ifca", "evaluation")
    assert ok.ok and "cluster model(s)" in ok.detail


def test_test_time_inference_declared_otherwise_fails_check(register):
    r = _check(register(UndeclaredTestTime), "evaluation")
    assert not r.ok and r.detail == "test_time_weights gives models but eval_models.unseen is 'global'"


# ---- reduces_across_shards ----------------------------------------------------------------------------------------

def test_reduced_results_hold_their_group_means():
    rs = [ClientResult(k, torch.full((2,), float(v)), n, 0.0) for k, v, n in ((0, 1, 1), (1, 3, 3), (2, 5, 2))]
    out = dc.reduced(rs, [0, 0, 1])
    assert [r.weights.tolist() for r in out] == [[2.5, 2.5], [2.5, 2.5], [5.0, 5.0]]  # (1·1 + 3·3) / 4
    assert [(r.client, r.num_samples) for r in out] == [(0, 1), (1, 3), (2, 2)]


class FirstModel(FedAvg):
    """Declares reduces_across_shards but keeps the first client's model: reads an individual model."""

    name = "test_first_model"
    reduces_across_shards = True

    def aggregate(self, state, results, ops):
        state.weights = results[0].weights.clone()
        return state


class ReadsEachModel(FedAvg):
    name = "test_reads_each_model"

    def aggregate(self, state, results, ops):  # its own aggregate: the declaration is not inherited
        return super().aggregate(state, results, ops)


def test_reduces_across_shards_is_verified_and_not_inherited_by_a_new_aggregate(register):
    r = _check(register(FirstModel), "declarations")
    assert not r.ok and "aggregating the group means instead of the 3 models gives another state" in r.detail
    assert FedAvg.reduces_across_shards and not ReadsEachModel.reduces_across_shards
    r = _check(register(ReadsEachModel), "declarations")
    assert r.ok and r.detail.startswith("reduces_across_shards=False")
    ok = _check("clust_psi_pfl", "declarations")
    assert ok.ok and "group mean(s) equals the aggregate" in ok.detail


# ---- vectorizes ---------------------------------------------------------------------------------------------------

class Halving(LocalHook):
    """Claims to vectorise but halves the parameters after every step (which vectorised clients never do)."""

    vectorizes = True

    def after_step(self, ctx):
        with torch.no_grad():
            for q in ctx.params:
                q.mul_(0.5)


class HalvingAvg(FedAvg):
    name = "test_halving_avg"

    def plan(self, state, client):
        return ClientPlan(weights=state.weights, hooks=(Halving(),))


def test_a_false_vectorizes_declaration_fails_check_and_the_declaration_is_what_counts(register):
    from flplat.engine.vectorized import hook_reason

    r = _check(register(HalvingAvg), "vectorize")
    assert not r.ok and "weights differ from the per-client loop" in r.detail
    assert ProximalTerm.vectorizes and hook_reason(ProximalTerm(torch.zeros(1), 0.1)) is None

    class Stepping(ProximalTerm):  # defines after_step without re-declaring: not inherited
        def after_step(self, ctx):
            return None

    assert not Stepping.vectorizes
    assert hook_reason(Stepping(torch.zeros(1), 0.1)) == "hook Stepping declares neither vectorizes nor a Stacked form"


# ---- what a run and the tables record -----------------------------------------------------------------------------

class NoUnseenModel(FedAvg):
    name = "test_no_unseen_model"
    eval_models = EvalModels("global", "not_applicable", "it needs a client's labels")


def test_flux_test_phase_headers_name_each_rows_declared_model(register):
    from flplat.studies.papers import flux
    from flplat.studies.reproduce import Method

    t = {x.id: x for x in flux.TABLES}
    for tid in ("test_phase", "test_phase_fmnist", "officehome_test_phase"):
        text = t[tid].notes["reduced"]
        assert "Unseen clients are scored with the model each method declares: FedAvg, pFedMe, pFedMe (its paper's " \
               "settings), APFL: the global model; IFCA, FedRC, FedEM, FeSEM, FedDrift, CFL: the ensemble of the " \
               "cluster models" in text, tid
        assert "ATP, Flux, Flux + noise guard, Flux-prior: the model inferred at test time" in text
    assert "Unseen clients" not in t["known_association"].notes["reduced"]
    register(NoUnseenModel)
    assert flux.unseen_models([Method("N", ["algorithm.name=test_no_unseen_model"])]) == (
        "Unseen clients are scored with the model each method declares: N: not applicable (it needs a client's "
        "labels).")


def test_the_run_records_which_models_scored_its_clients(tmp_path):
    from mlflow.tracking import MlflowClient

    from flplat.configure import load_config
    from flplat.experiment import run

    cfg = load_config(None, cf.tiny_overrides(**{"algorithm.name": "fedrep", "federation.rounds": 1,
                                                 "tracking.enabled": "true", "tracking.plots": "false",
                                                 "tracking.store_dir": str(tmp_path), "fabric.num_threads": 1}))
    _, run_id = run(cfg, progress=False)
    tags = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}").get_run(run_id).data.tags
    assert tags["flplat.eval.seen_model"] == "personal"
    assert tags["flplat.eval.unseen_model"] == f"client_ensemble: {FedRep.eval_models.note}"


def test_a_method_defined_without_a_declaration_scores_with_its_own_method():
    """A plugin written before the declarations: a class that defines eval_weights (or test_time_weights) without
    declaring eval_models is scored with its own method, not the inherited declaration's model."""

    class Personal(FedAvg):
        def eval_weights(self, state, client):
            return state.weights

    class Inferring(FedAvg):
        def test_time_weights(self, state, ops, clients):
            return [state.weights for _ in clients]

    class Declared(FedAvg):
        eval_models = EvalModels("global", "global")

        def eval_weights(self, state, client):
            return state.weights

    assert (Personal.eval_models.seen, Personal.eval_models.unseen) == ("personal", "global")
    assert (Inferring.eval_models.seen, Inferring.eval_models.unseen) == ("global", "test_time")
    assert Declared.eval_models == EvalModels("global", "global")
    assert type("Sub", (Declared,), {}).eval_models == EvalModels("global", "global")  # inherited where not redefined
