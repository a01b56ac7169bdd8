"""`flplat reproduce` over the papers' other datasets: ``--list`` names every dataset of every paper, a cell whose
data files are absent is skipped with "data not found: <where>" instead of failing the grid, and one smoke cell per
new dataset runs end to end on tiny files written in the dataset's public format (the real loaders, no mock)."""

from __future__ import annotations

import pickle
import random
from pathlib import Path

import numpy as np
import pytest
from test_paper_datasets import (
    ACS_HEADER,
    CHEX_HEADER,
    SERENGETI_HEADER,
    _grey,
    write_csv,
    write_leaf,
)

from flplat.cli import main
from flplat.data.tabular import SERENGETI_WHERE
from flplat.models.base import MODELS
from flplat.studies import reproduce as rp

# every dataset each paper reports (Clust-PSI-PFL Table I, Flux §4 / App. B.1, DA-PFL §IV-A, PQFed §V-A, CAFA §IV)
PAPER_DATASETS = {
    "clust-psi-pfl": {"acs_income", "serengeti", "fmnist", "cifar10", "sent140", "amazon_reviews"},
    "flux": {"mnist", "fmnist", "cifar10", "cifar100", "chexpert", "office_home"},
    "dapfl": {"cifar10", "cifar100", "femnist"},
    "pqfed": {"mnist", "cifar10"},
    "cafa": {"cifar10"},
}


def _listed() -> dict[str, dict[str, dict[str, list[str]]]]:
    """``--list`` parsed: paper -> table -> {datasets: [...], reasons: [...]}."""
    out: dict = {}
    paper = table = None
    for line in rp.listing().splitlines():
        if line == "numbered items:":  # the papers' checklist follows the tables (tests/test_paper_items.py)
            break
        if not line.strip():
            continue
        if not line.startswith(" "):
            paper = line.rstrip(":")
            out[paper] = {}
        elif line.startswith("  ") and not line.startswith("    "):
            table = line.split()[0]
            out[paper][table] = {"datasets": [], "reasons": []}
        elif line.startswith("    datasets: "):
            out[paper][table]["datasets"] = [d.split(" ")[0] for d in line[14:].split(", ") if d]
        elif line.startswith("    no run for "):
            out[paper][table]["reasons"].append(line)
    return out


def test_list_names_every_dataset_of_every_paper_or_why_not() -> None:
    listed = _listed()
    assert set(listed) == set(rp.PAPERS)
    for paper, expected in PAPER_DATASETS.items():
        tables = listed[paper]
        assert set(tables) == {t.id for t in rp.paper_tables(paper)}
        for tid, entry in tables.items():
            assert entry["datasets"], f"{paper}/{tid} names no dataset"
        names = {d for entry in tables.values() for d in entry["datasets"]}
        assert expected <= names, f"{paper}: {sorted(expected - names)} not in any table"
    # Flux's real-world tables run their ready configs (no cell waits with a reason any more)
    flux = listed["flux"]
    for tid, name in (("chexpert_known_association", "chexpert"), ("chexpert_test_phase", "chexpert"),
                      ("officehome_known_association", "office_home"), ("officehome_test_phase", "office_home")):
        assert flux[tid]["datasets"] == [name] and not flux[tid]["reasons"], tid
    from flplat.cli import main as cli

    assert cli(["reproduce", "--list"]) == 0


def _row(out: str, method: str) -> str:
    return next(line for line in out.splitlines() if f"| {method} |" in line)


def test_absent_data_files_skip_the_cell_with_where_to_get_them(isolated: Path, capsys) -> None:
    """A train table: the cell's runs are skipped, the grid completes and the row's note says "data not found:
    <where to get the files>" (every run of its rows refused: exit 1); an analysis table (PQFed Fig. 3a on
    CIFAR-10) the same instead of an error."""
    store = str(isolated / "store")
    assert main(["reproduce", "clust-psi-pfl", "table3_serengeti", "--scale", "smoke", "--cells", "dirichlet_50",
                 "--methods", "FedAvg,Clust-PSI-PFL", "--store-dir", store]) == 1
    out = capsys.readouterr().out
    assert "not run: skipped, see note 1" in _row(out, "FedAvg") and "see note 1" in _row(out, "Clust-PSI-PFL")
    assert f"data not found: {SERENGETI_WHERE} (then data.root=DIR or $FLPLAT_DATA)" in out
    assert main(["reproduce", "pqfed", "fig3_cifar10", "--scale", "smoke", "--cells", "eps10_euclidean",
                 "--store-dir", store]) == 0
    out = capsys.readouterr().out
    assert "data not found: the cifar10 files" in out and "data.download=true" in out
    # Flux's CheXpert cells (a metadata partition on real files) skip the same way
    from flplat.data.medical import CHEXPERT_WHERE

    assert main(["reproduce", "flux", "chexpert_test_phase", "--scale", "smoke", "--cells", "low", "--methods",
                 "FedAvg", "--store-dir", store]) == 1
    assert f"data not found: {CHEXPERT_WHERE} (then data.root=DIR or $FLPLAT_DATA)" in capsys.readouterr().out


# ------------------------------------------------------------------------ one smoke cell per new dataset, end to end


def _acs(root: Path) -> list[str]:
    rng = random.Random(0)
    rows = [["P", f"2018GQ{i:05d}", "6", *(str(rng.randint(a, b)) for a, b in ((1, 20), (18, 80), (1, 8), (1, 24),
                                                                              (1, 5))),
             str(rng.choice([10, 1010, 4720])), *(str(rng.randint(a, b)) for a, b in ((1, 56), (0, 17), (5, 60), (1, 2),
                                                                                    (1, 9))),
             str(rng.choice([20000, 45000, 60000, 90000]))] for i in range(300)]
    write_csv(root / "acs_income" / "2018" / "1-Year" / "psam_p06.csv", rows, header=ACS_HEADER)
    return [f"data.root={root}", "data.states=[CA]"]


SPECIES = ["buffalo", "elephant", "gazelleGrants", "gazelleThomsons", "giraffe", "guineaFowl", "hartebeest", "impala",
           "lionFemale", "otherBird", "warthog", "wildebeest", "zebra"]


def _serengeti(root: Path) -> list[str]:
    rng = random.Random(0)
    rows = [[f"ASG{i}", str(rng.randint(1, 3)), f"2011-0{rng.randint(1, 9)}-0{rng.randint(1, 9)} 1{rng.randint(0, 9)}:"
             "00:00", f"B0{rng.randint(1, 9)}", "1", SPECIES[i % 13], str(rng.randint(1, 10)), "0.5", "0", "0.5", "0",
             "0", "0"] for i in range(260)]
    write_csv(root / "consensus_data.csv", rows, header=SERENGETI_HEADER)
    return [f"data.root={root}"]


def _sent140(root: Path) -> list[str]:
    rng = random.Random(0)
    words = ["happy", "sad", "day", "good", "bad", "fun", "cry", "love", "hate", "ok"]
    train = [[str(rng.choice([0, 4])), str(i), "Mon Apr 06 22:19:45 PDT 2009", "NO_QUERY", f"user{i % 25}",
              " ".join(rng.choices(words, k=5))] for i in range(300)]
    test = [[str(rng.choice([0, 2, 4])), str(i), "Mon May 11 03:17:40 UTC 2009", "kindle2", f"user{i}",
             " ".join(rng.choices(words, k=4))] for i in range(60)]
    write_csv(root / "training.1600000.processed.noemoticon.csv", train, encoding="latin-1")
    write_csv(root / "testdata.manual.2009.06.14.csv", test, encoding="latin-1")
    return [f"data.root={root}"]


def _amazon(root: Path) -> list[str]:
    from flplat.data.text import AMAZON_CATEGORIES

    rng = random.Random(0)
    header = ["productId", "Title", "userId", "Helpfulness", "Score", "Time", "Text", "Cat1", "Cat2", "Cat3"]
    words = ["great", "toy", "dog", "food", "hair", "baby", "snack", "vitamin", "kids", "soft"]

    def rows(n: int) -> list[list]:
        return [[f"B{i}", "title", f"A{i}", "0/0", "4.0", str(i), " ".join(rng.choices(words, k=6)),
                 AMAZON_CATEGORIES[i % 6], "x", "y"] for i in range(n)]

    write_csv(root / "train_40k.csv", rows(300), header=header)
    write_csv(root / "val_10k.csv", rows(60), header=header)
    return [f"data.root={root}"]


def _femnist(root: Path) -> list[str]:
    rng = np.random.default_rng(0)
    users = {f"f{w:04d}_00": {"x": rng.random((12, 784)).round(3).tolist(), "y": [36 + (w + j) % 10 for j in range(12)]}
             for w in range(25)}
    write_leaf(root / "femnist" / "data" / "all_data" / "all_data_0.json", users)
    return [f"data.root={root}"]


def _cifar100(root: Path) -> list[str]:
    d = root / "cifar-100-python"
    d.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name, n in (("train", 400), ("test", 100)):
        labels = [int(v) for v in rng.integers(0, 30, n)]  # 20 kept (DA-PFL: the first 20 classes)
        with open(d / name, "wb") as fh:
            pickle.dump({"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), "fine_labels": labels}, fh,
                        protocol=2)
    with open(d / "meta", "wb") as fh:
        pickle.dump({"fine_label_names": [f"f{i}" for i in range(100)]}, fh, protocol=2)
    return [f"data.root={root}"]


def _chexpert(root: Path) -> list[str]:
    """train.csv / valid.csv (the public columns, CheXpert-v1.0-small paths) and the grey JPEGs they name."""
    rng = random.Random(0)
    d = root / "CheXpert-v1.0-small"

    def rows(split: str, n: int) -> list[list[str]]:
        out = []
        for i in range(n):
            view = ("Frontal", "Lateral")[i % 2]
            rel = f"{split}/patient{i:05d}/study1/view1_{view.lower()}.jpg"
            _grey(d / rel, rng.randint(0, 255), size=12)
            labels = [rng.choice(["1.0", "0.0", "", "-1.0"]) for _ in range(14)]
            out.append([f"CheXpert-v1.0-small/{rel}", ("Female", "Male")[(i // 2) % 2], str(rng.randint(20, 90)), view,
                        "AP" if view == "Frontal" else "", *labels])
        return out

    write_csv(d / "train.csv", rows("train", 80), header=CHEX_HEADER)
    write_csv(d / "valid.csv", rows("valid", 24), header=CHEX_HEADER)
    return [f"data.root={d}"]


def _office_home(root: Path) -> list[str]:
    """The archive's <Domain>/<Class>/*.jpg layout ("Real World" with a space, as the zip spells it)."""
    rng = random.Random(0)
    for dom in ("Art", "Clipart", "Product", "Real World"):
        for cls in ("Alarm_Clock", "Backpack", "Batteries"):
            for j in range(5):
                _grey(root / "OfficeHomeDataset_10072016" / dom / cls / f"{j:05d}.jpg", rng.randint(0, 255), size=12,
                      mode="RGB")
    return [f"data.root={root}", "data.num_classes=3"]


# dataset -> (paper, table, cell, the files' writer, the model its smoke scale runs)
SMOKE_CELLS = {
    "acs_income": ("clust-psi-pfl", "table3_acs_income", "dirichlet_50", _acs, "mlp"),
    "serengeti": ("clust-psi-pfl", "table3_serengeti", "dirichlet_50", _serengeti, "mlp"),
    "sent140": ("clust-psi-pfl", "table3_sent140", "similarity_1", _sent140, "sent140_lstm"),
    "amazon_reviews": ("clust-psi-pfl", "table3_amazon_reviews", "similarity_1", _amazon, "amazon_dnn"),
    "femnist": ("dapfl", "table3_femnist", "femnist_k20_low", _femnist, "mlp"),
    "cifar100": ("dapfl", "table2", "cifar100_k20_low", _cifar100, "mlp"),
    "chexpert": ("flux", "chexpert_test_phase", "high", _chexpert, "mlp"),
    "office_home": ("flux", "officehome_known_association", "domains", _office_home, "mlp"),
}


@pytest.mark.parametrize("dataset", list(SMOKE_CELLS))
def test_one_smoke_cell_per_new_dataset_runs_on_generated_files(dataset: str, isolated: Path,
                                                                capsys) -> None:
    paper, table, cell, write, model = SMOKE_CELLS[dataset]
    if model not in MODELS:  # the text models come with branch models23 (issue 23 item 2)
        pytest.skip(f"model {model} (the smoke scale's on {dataset}) is not registered yet")
    t = next(x for x in rp.paper_tables(paper) if x.id == table)
    assert f"model.name={model}" in [o for o in t.scales["smoke"] if o.startswith("model.name=")][-1:]
    root = isolated / dataset
    over = write(root)
    assert main(["reproduce", paper, table, "--scale", "smoke", "--cells", cell, "--methods", "FedAvg",
                 "--store-dir", str(isolated / "store"), "--set", *over]) == 0
    out, err = capsys.readouterr()
    assert f"[1/1] {table} {cell} FedAvg s0" in err
    row = _row(out, "FedAvg")
    assert "not run" not in row and "skipped" not in row


@pytest.mark.parametrize("dataset, other, metric", [
    ("chexpert", "chexpert_known_association", "test_phase_auroc"),
    ("office_home", "officehome_test_phase", "known_association_accuracy"),
])
def test_flux_real_world_cells_run_and_render_a_number(dataset: str, other: str, metric: str, isolated: Path,
                                                       capsys) -> None:
    """Flux's CheXpert / Office-Home tables run their metadata-partition configs end to end on generated files: the
    FedAvg row has a number (CheXpert: macro ROC AUC in %, scale factor 100), and the table sharing the runs
    (known association / test phase) trains nothing new and has a number too."""
    from mlflow.tracking import MlflowClient

    paper, table, cell, write, _ = SMOKE_CELLS[dataset]
    over = write(isolated / dataset)
    store = str(isolated / "store")
    args = ["--scale", "smoke", "--cells", cell, "--methods", "FedAvg", "--store-dir", store, "--set", *over]
    assert main(["reproduce", paper, table, *args]) == 0
    out, _ = capsys.readouterr()
    value = _row(out, "FedAvg").split("|")[3].strip()
    assert float(value.split()[0]) > 0, value
    client = MlflowClient(tracking_uri=f"sqlite:///{Path(store).resolve() / 'mlflow.db'}")
    (run,) = [r for r in client.search_runs([e.experiment_id for e in client.search_experiments()])
              if r.info.run_name == f"{table}/{cell}/FedAvg/s0"]
    # the tables read the metrics the run logs (CheXpert: known_association_auroc / test_phase_auroc)
    tables = {t.id: t for t in rp.paper_tables(paper)}
    assert tables[table].metric in run.data.metrics and tables[other].metric in run.data.metrics
    assert run.data.params["partition.name"] == "metadata" and metric in run.data.metrics
    assert main(["reproduce", paper, other, *args]) == 0
    out, err = capsys.readouterr()
    assert "1 of 1 runs already finished, skipped" in err
    assert float(_row(out, "FedAvg").split("|")[3].strip().split()[0]) > 0


def test_clust_psi_pfl_figures_5_to_8_draw_from_acsincome_runs(isolated: Path, capsys) -> None:
    """Figs. 5-8 on generated ACSIncome files (one cell, FedAvg and Clust-PSI-PFL): the silhouette curves, τ, the
    accuracies and the local-accuracy ECDF (read from the runs' client tables) are written as PNG files; the four
    tables share two runs."""
    over = _acs(isolated / "acs")
    out = isolated / "out"
    assert main(["reproduce", "clust-psi-pfl", "fig5", "fig6", "fig7", "fig8", "--scale", "smoke", "--cells",
                 "k100_similarity_0", "--methods", "Clust-PSI-PFL", "--store-dir", str(isolated / "store"),
                 "--out", str(out), "--set", *over]) == 0
    assert "fig6: 1 of 1 runs already finished, skipped" in capsys.readouterr().err
    assert main(["reproduce", "clust-psi-pfl", "fig7", "fig8", "--scale", "smoke", "--cells", "k100_similarity_0",
                 "--methods", "FedAvg,Clust-PSI-PFL", "--store-dir", str(isolated / "store"), "--out", str(out),
                 "--set", *over]) == 0
    err = capsys.readouterr().err
    assert "fig7: 1 of 2 runs already finished, skipped" in err and "fig8: 2 of 2 runs already finished" in err
    for t in ("fig5", "fig6", "fig7", "fig8"):
        assert (out / f"clust-psi-pfl_{t}_smoke.png").stat().st_size > 5000, t
