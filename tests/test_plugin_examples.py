"""The personalised and the clustered method of the example plugin (docs/extending.md §5 and §6): each passes
``flplat check``, runs a 2-round federation on ``digits`` with the metrics its section promises, and joins a
reproduced table beside a paper's methods; their server steps are checked by hand on tiny tensors.

As in tests/test_plugins.py, the plugin is imported in subprocesses only (registering in this process would add
entries to the registries that the registry-wide tests iterate over)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from conftest import REPO
from test_plugins import EXAMPLE, _env, _flplat, _runs

FAST_PROPS = "registry,smoke,determinism,checkpoint,vectorize,failures,invalid_config,declarations,evaluation"
# digits under Flux's label shift: 8 training clients from 4 planted distributions, 2 unseen test-only clients
DIGITS = ["data.name=digits", "partition.name=shift", "partition.type=label", "partition.level=2",
          "partition.num_clients=8", "partition.num_unseen_clients=2", "model.name=mlp", "model.hidden=[16]",
          "federation.rounds=2", "federation.client_fraction=0.5", "federation.local_epochs=1",
          "fabric.num_threads=1", "seed=0"]


def _python(code: str, timeout=300) -> str:
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, env=_env(EXAMPLE),
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    return p.stdout


RUNS = {"localhead": ["algorithm.name=localhead"],
        "localhead_na": ["algorithm.name=localhead", "algorithm.unseen=not_applicable"],
        "oneshot_kmeans": ["algorithm.name=oneshot_kmeans", "algorithm.num_clusters=2"]}


@pytest.fixture(scope="module")
def federations(tmp_path_factory) -> dict[str, tuple[list[dict], dict, object]]:
    """Tracked 2-round runs on digits, all in one subprocess: per run its per-round metrics, fields of its final
    state, and its MLflow run."""
    root = tmp_path_factory.mktemp("federations")
    args = {key: [*DIGITS, *over, f"tracking.store_dir={root / key}"] for key, over in RUNS.items()}
    out = _python(f"""
        import json
        import flplat_example_plugin.clustered, flplat_example_plugin.personal
        from flplat.experiment import load_config, run
        out = {{}}
        for key, args in {args!r}.items():
            st = (s := run(load_config(None, args), progress=False)[0]).state
            out[key] = [s.history, {{"assignment": None if st.assignment is None else st.assignment.tolist(),
                                     "joined": getattr(st.method, "joined", None) is not None
                                               and st.method.joined.tolist() or None,
                                     "method": type(st.method).__name__}}]
        print(json.dumps(out))
    """, timeout=600)
    got = json.loads(out.strip().splitlines()[-1])
    result = {}
    for key, (history, extra) in got.items():
        (r,) = _runs(root / key)
        assert r.info.status == "FINISHED"
        extra["artifacts"] = _artifacts(root / key, r.info.run_id)
        result[key] = (history, extra, r)
    return result


def _artifacts(store, run_id: str) -> set[str]:
    from mlflow.tracking import MlflowClient

    from flplat.tracking.store import store_uris

    client = MlflowClient(tracking_uri=store_uris(None, str(store))[0])
    out, todo = set(), [None]
    while todo:
        for f in client.list_artifacts(run_id, todo.pop()):
            (todo.append(f.path) if f.is_dir else out.add(f.path))
    return out


def test_both_examples_pass_the_conformance_properties():
    """``flplat check``'s in-process properties, those the registry-wide conformance test holds every built-in to
    (tests/test_algorithms.py), on both examples in one process; the 2-process and kill + resume ones passed by hand
    (docs/extending.md) and run for the built-ins in the slow suite."""
    out = _python(f"""
        import flplat_example_plugin.clustered, flplat_example_plugin.personal
        from flplat.studies.conformance import check
        for name in ("localhead", "oneshot_kmeans"):
            for r in check(name, ["fabric.num_threads=1"], only={FAST_PROPS.split(",")!r}):
                print(name, r.line())
    """, timeout=600)
    lines = [line for line in out.splitlines() if line.startswith(("localhead ", "oneshot_kmeans "))]
    assert len(lines) == 18 and all(line.split(maxsplit=1)[1].startswith("PASS") for line in lines), out
    evaluation = {line.split()[0]: line for line in lines if line.split()[2] == "evaluation"}
    assert "trained personal models; unseen clients: client_ensemble" in evaluation["localhead"]
    assert ("trained cluster models, 2 cluster model(s); unseen clients: cluster_ensemble"
            in evaluation["oneshot_kmeans"])


def test_flplat_check_fails_the_personalised_example_without_its_eval_weights(tmp_path):
    """The hook section 5 says a personalised method needs: without ``eval_weights`` the training clients are scored
    with the body and the initial head, and ``flplat check`` says so."""
    text = (EXAMPLE / "flplat_example_plugin" / "personal.py").read_text()
    a, b = text.index("    def eval_weights(self, state, client):"), text.index("    def global_weights(self, state):")
    (tmp_path / "broken_localhead.py").write_text(text[:a] + text[b:])
    out = _flplat(["check", "localhead", "--plugin", "broken_localhead", "--only", "evaluation",
                   "fabric.num_threads=1"], tmp_path, timeout=600)
    assert out.returncode == 1, out.stdout + out.stderr[-3000:]
    assert out.stdout.startswith("FAIL  evaluation      client 0 trained but is scored with a model no client "
                                 "trained (its head.weight is the initial one)"), out.stdout


def test_localhead_keeps_each_head_and_averages_the_bodies_by_hand():
    """aggregate: each client's head is stored as it came back; the body is the sample-weighted mean of the bodies
    and the head slice of the global vector is untouched; a client is scored with the body and its own head."""
    out = _python("""
        import numpy as np, torch
        from torch import nn
        from flplat.api import ClientResult, FederationInfo, ParamLayout, SplitModel
        from flplat_example_plugin.personal import LocalHead

        net = SplitModel(nn.Flatten(1), nn.Linear(1, 1), (1,), 2)  # features 1x1 + 1, head 2x1 + 2: P = 6
        layout = ParamLayout(net)
        info = FederationInfo(3, 2, np.array([1, 3, 2]), np.ones((3, 2)), 1.0, 1, layout, np.arange(6))
        s = LocalHead(LocalHead.Config(), info)
        state = s.init_state(torch.zeros(6), np.random.default_rng(0), None)
        head = layout.mask("head.")
        print(head.int().tolist())
        a = torch.tensor([1., 2., 10., 11., 12., 13.])
        b = torch.tensor([5., 6., 20., 21., 22., 23.])
        state = s.aggregate(state, [ClientResult(0, a, 1, 0.0), ClientResult(1, b, 3, 0.0)], None)
        print(state.weights.tolist(), state.personal.get(1).tolist(), state.personal.get(2).tolist())
        print(s.eval_weights(state, 0).tolist(), s.global_weights(state), s.sent_mask("up").int().tolist())
    """).splitlines()
    assert out[0] == "[0, 0, 1, 1, 1, 1]"
    # body (1·[1, 2] + 3·[5, 6]) / 4 = [4, 5]; the head slice stays the initial zeros; client 2 never trained
    assert out[1] == "[4.0, 5.0, 0.0, 0.0, 0.0, 0.0] [20.0, 21.0, 22.0, 23.0] [0.0, 0.0, 0.0, 0.0]"
    assert out[2] == "[4.0, 5.0, 10.0, 11.0, 12.0, 13.0] None [1, 1, 0, 0, 0, 0]"


def test_oneshot_kmeans_clusters_the_updates_of_round_w_by_hand():
    """Round W: two groups of updates (+1 and -1 on every entry) become two clusters whose models are the FedAvg of
    their members; a later round averages per cluster and keeps a cluster without a result; before round W the
    global model is FedAvg and nobody is in a cluster."""
    out = _python("""
        import numpy as np, torch
        from torch import nn
        from flplat.api import ClientResult, FederationInfo, ParamLayout, SplitModel
        from flplat_example_plugin.clustered import OneShotKMeans

        net = SplitModel(nn.Flatten(1), nn.Linear(1, 1), (1,), 2)
        info = FederationInfo(5, 2, np.ones(5, int), np.ones((5, 2)), 1.0, 1, ParamLayout(net), np.arange(5))
        s = OneShotKMeans(OneShotKMeans.Config(num_clusters=2, warmup_rounds=2), info)
        state = s.init_state(torch.zeros(6), np.random.default_rng(0), None)
        r = lambda k, v, n: ClientResult(k, torch.full((6,), float(v)), n, 0.0)
        state.round = 1
        state = s.aggregate(state, [r(0, 2, 1), r(1, 4, 1)], None)
        print(state.weights[0].item(), state.clusters, state.assignment.tolist(), s.round_metrics(state))
        state.round = 2  # updates: clients 0, 1 at +1, +2 (n 1, 3); clients 2, 3 at -8, -9 (n 1, 1)
        state = s.aggregate(state, [r(0, 4, 1), r(1, 5, 3), r(2, -5, 1), r(3, -6, 1)], None)
        print(state.clusters[:, 0].tolist(), state.assignment.tolist(), state.method.joined.tolist(),
              s.round_metrics(state))
        state.round = 3
        state = s.aggregate(state, [r(2, 1, 1), r(3, 3, 1)], None)
        print(state.clusters[:, 0].tolist(), round(s.eval_weights(state, 4)[0].item(), 5))
    """).splitlines()
    assert out[0] == "3.0 None [-1, -1, -1, -1, -1] {}"
    # FedAvg of round 2 = (4 + 15 - 5 - 6) / 6 = 4/3; cluster 0 = (4 + 15) / 4 = 4.75, cluster 1 = -5.5
    assert out[1] == ("[4.75, -5.5] [0, 0, 1, 1, -1] [2, 2, 2, 2, 0] {'tau': 2.0, 'late_joiners': 0.0}")
    # round 3: cluster 1 = (1 + 3) / 2, cluster 0 kept; client 4 (not in a cluster) scored with the global model
    assert out[2] == "[4.75, 2.0] 1.33333"


def test_localhead_on_digits_scores_unseen_clients_with_the_stated_model(federations):
    """2 rounds on digits with 2 unseen clients: personal models for the training clients, no pooled global accuracy
    (no global model), the unseen clients scored with the declared model, which the run records; with
    ``algorithm.unseen=not_applicable`` no test-phase number and the reason recorded instead."""
    history, extra, run = federations["localhead"]
    last = history[-1]
    assert len(history) == 2 and extra["method"] == "LocalHeadState"
    assert "test_phase_accuracy" in last and 0 <= last["test_phase_accuracy"] <= 1
    assert "global_test_accuracy" not in last and "tau" not in last
    assert "models/global.pt" not in extra["artifacts"] and "models/model.yaml" in extra["artifacts"]  # no global model
    assert last["bytes_up"] == history[0]["bytes_up"] > 0
    assert run.data.tags["flplat.eval.seen_model"] == "personal"
    assert run.data.tags["flplat.eval.unseen_model"].startswith("client_ensemble: the equally weighted prediction")
    history, _, run = federations["localhead_na"]
    assert "test_phase_accuracy" not in history[-1] and "known_association_accuracy" in history[-1]
    assert run.data.tags["flplat.eval.unseen_model"].startswith("not_applicable: a client without a head")


def test_oneshot_kmeans_on_digits_logs_tau_ari_cluster_accuracies_and_late_joiners(federations):
    """2 rounds on digits (4 planted distributions), W = 1: round 1 clusters its 4 participants (tau, ARI over them,
    per-cluster accuracy), round 2's new clients join late by lowest loss; unseen clients get the ensemble."""
    history, extra, run = federations["oneshot_kmeans"]
    first, last = history
    for m in (first, last):
        assert m["tau"] == 2.0 and "ari" in m and "cluster_accuracy_0" in m and "cluster_accuracy_1" in m
    assert first["assigned_clients"] == 4.0 and first["late_joiners"] == 0.0
    joined = extra["joined"]
    late = sum(j == 2 for j in joined)
    assert sorted(set(joined)) == ([0, 1, 2] if late else [0, 1]) and joined.count(1) == 4
    assert last["late_joiners"] == late and last["assigned_clients"] == 4 + late
    assert all((a >= 0) == (j > 0) for a, j in zip(extra["assignment"], joined))
    assert "test_phase_accuracy" in last and "global_test_accuracy" not in last
    assert run.data.tags["flplat.eval.unseen_model"].startswith("cluster_ensemble: ")
    assert {"clustering/assignment.csv", "models/clusters.pt"} <= extra["artifacts"]
    assert "models/global.pt" not in extra["artifacts"]
    metrics = run.data.metrics
    assert metrics["tau"] == 2.0 and "ari" in metrics and "late_joiners" in metrics


def test_both_examples_join_a_reproduced_table(tmp_path):
    """``--add-method`` puts each beside the paper's FedAvg in DA-PFL's digits table (smoke scale, one cell)."""
    store = tmp_path / "store"
    out = _flplat(["reproduce", "dapfl", "table3_digits", "--scale", "smoke", "--cells", "digits_k20_low",
                   "--methods", "FedAvg", "--seeds", "0", "--store-dir", store,
                   "--plugin", "flplat_example_plugin.personal", "--plugin", "flplat_example_plugin.clustered",
                   "--add-method", "LocalHead=algorithm.name=localhead",
                   "--add-method", "OneShotKMeans=algorithm.name=oneshot_kmeans,algorithm.num_clusters=2",
                   "--set", "fabric.num_threads=1"], EXAMPLE, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    for method in ("LocalHead", "OneShotKMeans"):
        row = next(line for line in out.stdout.splitlines() if f"| {method} |" in line)
        assert "not in the paper (added method)" in row and "no paper value (added method)" in row, row
    kids = [r for r in _runs(store) if r.data.tags.get("mlflow.parentRunId")]
    assert {r.data.params["algorithm.name"] for r in kids} == {"fedavg", "localhead", "oneshot_kmeans"}
    assert {r.info.status for r in kids} == {"FINISHED"}
