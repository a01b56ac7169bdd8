"""Defining behaviour and reductions of Flux's baselines: IFCA, FeSEM, FedEM, FedRC, FedDrift, pFedMe, APFL, ATP."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from flplat.algorithms.apfl import PersonalMixture
from flplat.algorithms.atp import adapt, alpha_grad, entropy
from flplat.algorithms.ifca import cluster_losses
from flplat.algorithms.pfedme import MoreauEnvelope
from flplat.api import ClientPlan, ClientView, HookContext, ParamLayout
from flplat.engine.executor import LocalExecutor
from flplat.experiment import prepare, run


def _run(cfg):
    summary, _ = run(cfg, progress=False)
    return summary


def _setup(tiny_cfg, **over):
    p = prepare(tiny_cfg(**over))
    return p, LocalExecutor(p.trainer, p.data, 0)


def _trained_on(ex, client, w, epochs=10):
    return ex.train([(client, ClientPlan(weights=w, epochs=epochs))], 1)[0].weights


# ---- IFCA ------------------------------------------------------------------------------------------------------
def test_ifca_client_picks_the_cluster_model_that_fits_its_data(tiny_cfg):
    p, ex = _setup(tiny_cfg, **{"algorithm.name": "ifca", "algorithm.num_clusters": 3})
    s = p.strategy
    state = s.init_state(p.init_weights, np.random.default_rng(0), ex)
    state.clusters[1] = _trained_on(ex, 0, state.clusters[1])  # model 1 learned client 0's data
    losses = cluster_losses(state, ex, [0])
    ref = [r.loss for r in ex.evaluate([(0, m) for m in state.clusters], "train")]
    np.testing.assert_allclose(losses[0], ref, rtol=1e-5)  # the batched pass = k separate evaluations
    assert losses[0].argmin() == 1
    p.strategy.info.client_fraction = 1.0
    s.select(state, np.random.default_rng(0), ex)
    assert state.assignment[0] == 1


def test_ifca_with_one_cluster_is_fedavg_and_counts_k_downloads(tiny_cfg):
    avg = _run(tiny_cfg(**{"algorithm.name": "fedavg", "federation.rounds": 2}))
    one = _run(tiny_cfg(**{"algorithm.name": "ifca", "algorithm.num_clusters": 1, "federation.rounds": 2}))
    assert torch.equal(avg.state.weights, one.state.clusters[0])
    three = _run(tiny_cfg(**{"algorithm.name": "ifca", "algorithm.num_clusters": 3, "federation.rounds": 1}))
    assert three.history[0]["bytes_down"] == 3 * avg.history[0]["bytes_down"]
    assert three.history[0]["bytes_up"] == avg.history[0]["bytes_up"] and three.metrics["tau"] == 3


# ---- FeSEM -----------------------------------------------------------------------------------------------------
def test_fesem_assigns_each_participant_to_its_nearest_center(tiny_cfg):
    s = _run(tiny_cfg(**{"algorithm.name": "fesem", "algorithm.num_clusters": 2, "federation.client_fraction": 1.0,
                         "federation.rounds": 2}))
    assert s.metrics["tau"] == 2 and set(np.unique(s.state.assignment)) <= {0, 1}
    p, ex = _setup(tiny_cfg, **{"algorithm.name": "fesem", "algorithm.num_clusters": 2,
                                "federation.client_fraction": 1.0})
    st = p.strategy.init_state(p.init_weights, np.random.default_rng(0), ex)
    st.clusters = torch.stack([p.init_weights, p.init_weights + 1.0])
    near = _trained_on(ex, 0, p.init_weights + 1.0, epochs=1)
    far = _trained_on(ex, 1, p.init_weights, epochs=1)
    res = ex.train([(0, ClientPlan(weights=near, epochs=0)), (1, ClientPlan(weights=far, epochs=0))], 1)
    st = p.strategy.aggregate(st, res, ex)
    assert st.assignment[0] == 1 and st.assignment[1] == 0


# ---- FedEM / FedRC ---------------------------------------------------------------------------------------------
def test_fedem_with_one_component_is_fedavg(tiny_cfg):
    avg = _run(tiny_cfg(**{"algorithm.name": "fedavg", "federation.rounds": 3}))
    em = _run(tiny_cfg(**{"algorithm.name": "fedem", "algorithm.num_components": 1, "federation.rounds": 3}))
    assert torch.equal(avg.state.weights, em.state.clusters[0])
    assert [h["global_accuracy"] for h in avg.history if "global_accuracy" in h] == \
        [h["mixture_accuracy"] for h in em.history]


def test_fedem_e_step_puts_weight_on_the_component_that_fits(tiny_cfg):
    p, ex = _setup(tiny_cfg, **{"algorithm.name": "fedem", "algorithm.num_components": 2})
    s = p.strategy
    state = s.init_state(p.init_weights, np.random.default_rng(0), ex)
    state.clusters[0] = _trained_on(ex, 2, state.clusters[0], epochs=40)
    (q, y), = s.e_step(state, [2], ex)
    assert q.shape == (2, p.data.num_samples("train")[2])
    torch.testing.assert_close(q.sum(0), torch.ones(q.shape[1], dtype=q.dtype))
    assert state.method.pi[2, 0] > 0.6 and state.method.pi[2].sum() == pytest.approx(1.0)
    assert state.method.pi[0].tolist() == [0.5, 0.5]  # clients not in the E-step keep their π


def test_fedem_trains_every_component_on_its_drawn_samples(tiny_cfg):
    s = _run(tiny_cfg(**{"algorithm.name": "fedem", "algorithm.num_components": 3, "federation.rounds": 2}))
    pi = s.state.method.pi
    np.testing.assert_allclose(pi.sum(axis=1), 1.0)
    assert s.history[0]["num_participants"] == 3 and 0 <= s.metrics["mixture_accuracy"] <= 1
    np.testing.assert_array_equal(s.state.assignment, pi.argmax(axis=1))


def test_fedrc_keeps_soft_label_counts_consistent(tiny_cfg):
    s = _run(tiny_cfg(**{"algorithm.name": "fedrc", "algorithm.num_clusters": 2, "federation.rounds": 2}))
    mass = s.state.method.label_mass  # (K, M, C): Σ over clusters = each client's label counts
    p = prepare(tiny_cfg(**{"algorithm.name": "fedrc"}))
    np.testing.assert_allclose(mass.sum(axis=1), p.data.label_counts("train"), rtol=1e-9)
    assert s.metrics["tau"] == 2


# ---- FedDrift --------------------------------------------------------------------------------------------------
def test_feddrift_merges_close_clusters_and_creates_new_ones(tiny_cfg):
    over = {"algorithm.name": "feddrift", "federation.client_fraction": 1.0}
    p, ex = _setup(tiny_cfg, **over)
    good = _trained_on(ex, 0, p.init_weights, epochs=5)
    n = p.data.num_samples("train").astype(float)

    def one_round(threshold):
        p.strategy.cfg = type(p.strategy.cfg)(merge_threshold=threshold)
        state = p.strategy.init_state(p.init_weights, np.random.default_rng(0), ex)
        state.clusters = torch.stack([good, p.init_weights])
        state.method.trained = np.ones(2, dtype=bool)
        state.assignment = np.array([0, 1, 0, 1, 0, 1])
        state.round = 1
        best = cluster_losses(state, ex, range(6)).argmin(axis=1)
        p.strategy.select(state, np.random.default_rng(0), ex)
        return state, best

    state, best = one_round(0.0)  # no merging: every client joins its lowest-loss model
    assert len(np.unique(best)) == 2  # (this data: some clients prefer each model)
    np.testing.assert_array_equal(state.assignment, best)
    state, best = one_round(10.0)  # D(0, 1) < 10: the two clusters merge, size-weighted
    assert state.clusters.shape[0] == 1 and (state.assignment == 0).all()
    w0, w1 = n[best == 0].sum(), n[best == 1].sum()
    torch.testing.assert_close(state.clusters[0], (w0 * good + w1 * p.init_weights) / (w0 + w1))
    # absolute drift rule with δ = 0: every client's best loss exceeds it, so each gets a new cluster
    p2, ex2 = _setup(tiny_cfg, **over, **{"algorithm.init": "single", "algorithm.drift_rule": "absolute",
                                          "algorithm.drift_threshold": 0.0, "algorithm.merge_threshold": 0.0})
    st = p2.strategy.init_state(p2.init_weights, np.random.default_rng(0), ex2)
    st.method.trained[:] = True
    st.round = 1
    p2.strategy.select(st, np.random.default_rng(0), ex2)
    assert st.clusters.shape[0] == 6 and len(np.unique(st.assignment)) == 6


# ---- pFedMe ----------------------------------------------------------------------------------------------------
def _ctx(net):
    return HookContext(net, ParamLayout(net), list(net.parameters()))


def test_moreau_hook_moves_the_local_model_every_k_steps():
    net = nn.Linear(2, 1)
    ctx = _ctx(net)
    hook = MoreauEnvelope(lam=2.0, lr=0.1, inner_steps=2)
    hook.setup(ctx)
    w0 = [p.detach().clone() for p in ctx.params]
    with torch.no_grad():
        for p in ctx.params:
            p.add_(1.0)
    # proximal term: λ/2 Σ‖θ − w‖² = 2/2 · 3 entries · 1² = 3
    assert hook.loss(ctx).item() == pytest.approx(3.0)
    hook.after_step(ctx)
    assert all(torch.equal(w, v) for w, v in zip(hook._w, w0))  # step 1 of K = 2: w unchanged
    hook.after_step(ctx)
    for w, v in zip(hook._w, w0):  # w ← w − ηλ(w − θ) = w + 0.2 · 1
        torch.testing.assert_close(w, v + 0.2)
    local = hook.finalize(ctx)["local"]
    torch.testing.assert_close(local, torch.cat([v.reshape(-1) + 0.2 for v in w0]))


def test_pfedme_reduces_to_fedavg(tiny_cfg):
    avg = _run(tiny_cfg(**{"algorithm.name": "fedavg", "federation.rounds": 2}))
    me = _run(tiny_cfg(**{"algorithm.name": "pfedme", "federation.rounds": 2, "algorithm.inner_steps": 1,
                          "algorithm.lam": 1.0, "algorithm.lr": 1.0, "algorithm.beta": 1.0,
                          "algorithm.weighting": "samples", "algorithm.personal_lr": 1e-3,
                          "algorithm.inner_optimizer": "federation"}))
    torch.testing.assert_close(me.state.weights, avg.state.weights, rtol=1e-5, atol=1e-6)
    trained = [k for k in range(6) if me.state.personal.has(k)]
    assert trained and not torch.equal(me.state.personal.get(trained[0]), me.state.weights)


# ---- APFL ------------------------------------------------------------------------------------------------------
def test_apfl_with_alpha_zero_is_fedavg(tiny_cfg):
    avg = _run(tiny_cfg(**{"algorithm.name": "fedavg", "federation.rounds": 2}))
    ap = _run(tiny_cfg(**{"algorithm.name": "apfl", "federation.rounds": 2, "algorithm.alpha": 0.0,
                          "algorithm.adaptive_alpha": "false"}))
    assert torch.equal(avg.state.weights, ap.state.weights)
    assert avg.metrics["global_accuracy"] == ap.metrics["global_accuracy"]


def test_apfl_alpha_step_is_the_gradient_of_the_mixed_loss():
    torch.manual_seed(0)
    net = nn.Linear(3, 2)
    ctx = _ctx(net)
    lay = ctx.layout
    v = lay.flatten() + 0.3 * torch.randn(lay.size)
    x, y = torch.randn(8, 3), torch.randint(0, 2, (8,))
    ctx.batch = (x, y)
    a, lr_a = 0.4, 0.1
    hook = PersonalMixture(v, a, v_lr=0.0, alpha_lr=lr_a, adaptive=True)
    hook.setup(ctx)
    w = lay.flatten()

    def mixed_loss(alpha):
        lay.load(alpha * v + (1 - alpha) * w)
        with torch.no_grad():
            out = F.cross_entropy(net(x), y).item()
        lay.load(w)
        return out

    eps = 1e-3
    fd = (mixed_loss(a + eps) - mixed_loss(a - eps)) / (2 * eps)
    hook.after_step(ctx)
    assert hook.alpha == pytest.approx(a - lr_a * fd, abs=1e-5)
    out = hook.finalize(ctx)
    torch.testing.assert_close(out["v"], v)  # v_lr = 0: v unchanged
    assert out["alpha"] == hook.alpha


# ---- ATP -------------------------------------------------------------------------------------------------------
def test_atp_alpha_gradient_matches_finite_differences():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 3)).double()
    x, y = torch.randn(10, 3, dtype=torch.float64), torch.randint(0, 3, (10,))
    alpha = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    g = alpha_grad(net, alpha, x, y)

    def loss_at(a):
        params = adapt(net, a, x, steps=1)
        names = [n for n, _ in net.named_parameters()]
        return F.cross_entropy(torch.func.functional_call(net, dict(zip(names, params)), (x,)), y).item()

    for i in range(4):
        e = torch.zeros(4, dtype=torch.float64)
        e[i] = 1e-3
        assert g[i].item() == pytest.approx((loss_at(alpha + e) - loss_at(alpha - e)) / 2e-3, rel=1e-4, abs=1e-7)
    same = adapt(net, torch.zeros(4), x)
    assert all(torch.equal(a, b) for a, b in zip(same, net.parameters()))


class _NoLabels:
    """FederationOps.compute on a trainer's data with the labels withheld (y = None)."""

    def __init__(self, p):
        self.p = p

    def compute(self, requests, fn, split="train", seed=0):
        tr, out = self.p.trainer, []
        for k, w in requests:
            tr.layout.load(w)
            tr.net.eval()
            idx = torch.as_tensor(self.p.data.indices(k, split))
            out.append(fn(ClientView(k, tr.net, tr.layout, tr.x[idx], None, seed, tr.fabric.device,
                                     tr.fabric.autocast)).detach().clone())
        return out


def test_atp_test_time_weights_adapt_without_labels(tiny_cfg):
    cfg = tiny_cfg(**{"algorithm.name": "atp", "federation.rounds": 4, "algorithm.alpha_lr": 0.1})
    s = _run(cfg)
    p = prepare(cfg)
    alpha = s.state.method.alpha
    assert alpha.shape == (int(sum(p.trainer.layout.is_param)),) and alpha.abs().max() > 0
    s.state.method.alpha = torch.full_like(alpha, 0.5)  # a clear adaptation step for the check below
    ws = p.strategy.test_time_weights(s.state, _NoLabels(p), range(6))
    assert len(ws) == 6
    for k, w in enumerate(ws):
        x = p.trainer.x[torch.as_tensor(p.data.indices(k, "test"))]
        ent = []
        for v in (s.state.weights, w):
            p.trainer.layout.load(v)
            with torch.no_grad():
                ent.append(float(entropy(p.trainer.net(x))))
        assert ent[1] < ent[0]  # one entropy-minimisation step on the client's unlabeled test data


@pytest.mark.parametrize("algo,key,value", [
    ("ifca", "num_clusters", -1), ("ifca", "refresh", "some"), ("fesem", "init", "kmeans"), ("fesem", "em_iters", 0),
    ("fedem", "num_components", -1), ("fedrc", "num_clusters", -1), ("fedem", "aggregation", "mean"),
    ("fedrc", "prior_floor", 0),
    ("feddrift", "drift_rule", "relative"), ("feddrift", "merge_threshold", -1), ("pfedme", "lam", 0),
    ("pfedme", "weighting", "median"), ("pfedme", "inner_batch", "each"),
    ("pfedme", "inner_optimizer", "adam"), ("pfedme", "inner_weight_decay", -0.1), ("apfl", "alpha", 1.5),
    ("apfl", "mix_with", "during"), ("atp", "grad_norm", "l2"), ("atp", "adapt_steps", 0),
])
def test_bad_values_name_the_key(tiny_cfg, algo, key, value):
    from flplat.errors import ConfigError

    with pytest.raises(ConfigError, match=f"algorithm.{key}="):
        tiny_cfg(**{"algorithm.name": algo, f"algorithm.{key}": value})


def test_train_indices_are_each_clients_train_split_in_order(tiny_cfg):
    p = prepare(tiny_cfg())
    for k in range(p.data.num_clients):
        np.testing.assert_array_equal(p.strategy.info.train_indices(k), p.data.indices(k, "train"))


def test_feddrift_default_rule_detects_a_loss_increase_not_an_absolute_loss():
    """FedDrift's drift test (Algorithm 1): a client whose loss under its cluster's model rose by more than δ since it
    was last scored gets a new cluster, even when another model fits it below δ (the `absolute` rule would not)."""
    from types import SimpleNamespace

    from flplat.algorithms.feddrift import FedDrift, FedDriftState
    from flplat.api import ServerState

    def after_select(cfg):
        info = SimpleNamespace(num_clients=2, client_fraction=1.0, num_samples=np.array([10, 10]))
        strat = FedDrift(cfg, info)
        state = ServerState(clusters=torch.tensor([[0.0], [1.0]]), assignment=np.array([0, 1]))
        state.method = FedDriftState(trained=np.array([True, True]), last_loss=np.array([0.1, 0.05]))
        loss = np.array([[0.9, 0.4],  # client 0: +0.8 > δ = 0.5 under its model 0; model 1 fits it at 0.4 < δ
                         [0.9, 0.05]])  # client 1: unchanged
        strat._scores = lambda state, ops, clients: loss
        strat.select(state, np.random.default_rng(0), None)
        return state

    assert FedDrift.Config().drift_rule == "increase"
    state = after_select(FedDrift.Config())
    assert state.assignment[0] != state.assignment[1] and state.clusters.shape[0] == 2  # a new cluster for client 0
    assert state.clusters[state.assignment[0]].tolist() == [1.0]  # started from its best model (model 1)
    assert not state.method.trained[state.assignment[0]]
    absolute = after_select(FedDrift.Config(drift_rule="absolute"))
    assert absolute.assignment.tolist() == [0, 0] and absolute.clusters.shape[0] == 1  # joins model 1, no drift


@pytest.mark.parametrize("algo,key", [("ifca", "num_clusters"), ("fesem", "num_clusters"), ("fedem", "num_components"),
                                      ("fedrc", "num_clusters"), ("flux_prior", "num_clusters")])
def test_zero_clusters_means_the_partitions_true_m(tiny_cfg, algo, key):
    """Flux App. E.1 gives IFCA, FeSEM, FedEM and FedRC the true number of distributions M: key = 0 asks for it."""
    from flplat.errors import ConfigError

    shift = {"partition.name": "shift", "partition.type": "label", "partition.level": 6,
             "partition.num_clients": 8, "partition.num_unseen_clients": 0, "partition.samples_per_client": 60}
    p = prepare(tiny_cfg(**{"algorithm.name": algo, f"algorithm.{key}": 0, **shift}))
    m = p.data.meta["num_distributions"]
    assert m > 2 and getattr(p.strategy.cfg, key) == m
    if algo not in ("fesem", "flux_prior"):  # FeSEM draws its centres from the first round's participants
        state = p.strategy.init_state(p.init_weights, np.random.default_rng(0), None)
        assert state.clusters.shape[0] == m
    assert getattr(prepare(tiny_cfg(**{"algorithm.name": algo, f"algorithm.{key}": 5, **shift})).strategy.cfg,
                   key) == 5
    with pytest.raises(ConfigError, match=f"algorithm.{key}=0 asks for the partition's number of distributions"):
        prepare(tiny_cfg(**{"algorithm.name": algo, f"algorithm.{key}": 0}))  # Dirichlet: no planted M


def test_algorithm_defaults_fill_the_chosen_algorithms_keys_under_explicit_ones():
    """A Flux grid config gives IFCA & co. the true M through ``algorithm_defaults`` (configs/flux/)."""
    from flplat.errors import ConfigError
    from flplat.experiment import load_config

    path = "configs/flux/table1/mnist_label_l5.yaml"
    assert load_config(path, ["algorithm.name=ifca"]).algorithm.num_clusters == 0
    assert load_config(path, ["algorithm.name=fedem"]).algorithm.num_components == 0
    assert load_config(path, ["algorithm.name=ifca", "algorithm.num_clusters=4"]).algorithm.num_clusters == 4
    assert load_config(path, ["algorithm.name=fedavg"]).algorithm.name == "fedavg"  # no defaults for it: no error
    fm = "configs/flux/table1/fmnist_label_l5.yaml"
    assert load_config(fm, ["algorithm.name=flux"]).algorithm.dbscan_scaling == 0.95  # App. D.2
    with pytest.raises(ConfigError, match="algorithm_defaults key='ifcx'"):
        load_config(None, ["algorithm_defaults.ifcx.num_clusters=0"])
    with pytest.raises(ConfigError, match="unknown key algorithm.k "):
        load_config(None, ["algorithm.name=ifca", "algorithm_defaults.ifca.k=0"])
