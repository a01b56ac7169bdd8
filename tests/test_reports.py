from flplat.data.datasets import load_dataset
from flplat.data.registry import data_config
from flplat.tracking.reports import noniid_curves, runs_table


def _row(algo, part, val, acc, ad=0.1, sdad=0.05):
    key = "partition.alpha" if part == "dirichlet" else "partition.similarity"
    return {"params": {"algorithm.name": algo, "partition.name": part, key: str(val)},
            "metrics": {"global_accuracy": acc, "ad": ad, "sdad": sdad}}


def test_runs_table_means_and_stds_by_algorithm_and_setting():
    rows = [_row("fedavg", "dirichlet", 0.3, 0.5), _row("fedavg", "dirichlet", 0.3, 0.7),
            _row("fedavg", "similarity", 0.0, 0.2, ad=0.8, sdad=0.1), _row("cfl", "dirichlet", 50, 0.9)]
    t = runs_table(rows).splitlines()
    assert t[0] == "| algorithm | dirichlet α=50 | dirichlet α=0.3 | similarity S=0 |"
    assert t[2] == "| cfl | 0.90 ± 0.00 (n=1) | — | — |"
    assert t[3] == "| fedavg | — | 0.60 ± 0.10 (n=2) | 0.20 ± 0.00 (n=1) |"  # mean 0.6, population std 0.1
    f = runs_table(rows, "fairness").splitlines()
    assert f[3] == "| fedavg | — | 0.10 ± 0.05 | 0.80 ± 0.10 |"


def test_noniid_curves_wpsi_decreases_towards_iid():
    ds = load_dataset(data_config(name="digits"), 0)
    c = noniid_curves(ds, 10, [50.0, 0.3], [1.0, 0.0], [0, 1])
    d, s = c["dirichlet"], c["similarity"]
    assert d[0]["wpsi"] < d[1]["wpsi"] and s[0]["wpsi"] < s[1]["wpsi"]
    assert all(p["seeds"] == 2 for p in d + s)


def test_silhouette_curves_from_tracked_clust_psi_pfl_run(tmp_path):
    from conftest import tiny_overrides

    from flplat.experiment import load_config, run
    from flplat.tracking.reports import collect_runs, plot_silhouette_curves, silhouette_curves
    from flplat.tracking.store import store_uris

    over = tiny_overrides(**{"algorithm.name": "clust_psi_pfl", "partition.name": "similarity",
                             "partition.similarity": 0.0, "tracking.enabled": "true", "tracking.experiment": "fig5",
                             "tracking.store_dir": str(tmp_path / "mlruns"), "federation.rounds": 1})
    run(load_config(None, over), progress=False)
    uri, _ = store_uris(None, str(tmp_path / "mlruns"))
    assert len(collect_runs("fig5", uri)) == 1
    curves = silhouette_curves("fig5", uri)
    (label, pts), = curves.items()
    assert label.startswith("similarity S=0 K=6") and [k for k, _ in pts] == [2, 3, 4, 5]
    plot_silhouette_curves(curves, str(tmp_path / "fig5.png"))
    assert (tmp_path / "fig5.png").stat().st_size > 1000


def test_runs_table_best_and_window_accuracy():
    rows = [{"params": {"algorithm.name": "cafa", "partition.name": "cafa", "partition.iid_fraction": "0.5"},
             "metrics": {"global_accuracy": 0.5, "best_global_test_accuracy": b, "window_mean_global_test_accuracy": w}}
            for b, w in ((0.8, 0.7), (0.6, 0.5))]
    rows.append({"params": {"algorithm.name": "fedpfa", "partition.name": "cafa", "partition.iid_fraction": "0.5"},
                 "metrics": {"global_accuracy": 0.4, "best_global_accuracy": 0.45}})
    t = runs_table(rows, "best").splitlines()
    assert t[0] == "| algorithm | cafa iid=0.5 |"
    assert t[2] == "| cafa | 0.7000 ± 0.1000 (n=2) |" and t[3] == "| fedpfa | 0.4500 ± 0.0000 (n=1) |"
    assert runs_table(rows, "window").splitlines()[2] == "| cafa | 0.6000 ± 0.1000 (n=2) |"
