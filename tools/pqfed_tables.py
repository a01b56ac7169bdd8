"""PQFed Tables II, IV/V, VI and VII/VIII (MNIST) with the ``pqfed`` algorithm and partition.

Every experiment is one ``flplat.experiment.run`` of ``configs/pqfed/mnist_lenient.yaml`` plus overrides; the
reported number is the target client's test accuracy after the last round (``target_accuracy``).

* ``table2``  -- federation T + 4 similar (r = 0) + 15 dissimilar (r = 1) clients; Exps. 1-5 = selection none /
  given {4 similar} / given {4 dissimilar} / given {4 similar + 5 dissimilar} / all.
* ``table5``  -- federation T + clients at r = 0, 0.1, ..., 1.0 (Exp. 16's); Exp. 6 + j = T with the clients
  r ≤ j·10% (selection given), for each inner algorithm.
* ``table6``  -- the same federation, PQFed's own strict and lenient selection (LDP ε), and all / none.
* ``table8``  -- Algorithm 2 on the same federation (selection all, mode incremental, no early stop so that every
  stage is reported; the stage where Algorithm 2 stops is marked).

Results are appended as JSON lines to ``--out``/runs.jsonl (one per run), so partial results survive.

    python tools/pqfed_tables.py table6 table5 --samples-per-source 100 --rounds 10
    python tools/pqfed_tables.py render docs/results/pqfed   # markdown tables from docs/results/pqfed/runs.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flplat.experiment import (
    load_config,  # noqa: E402
    run,  # noqa: E402
)

REPO = Path(__file__).resolve().parents[1]
RATES = [round(0.1 * i, 1) for i in range(11)]
INNER_PARAMS = {"fedavg": "{}", "fedprox": "{mu: 0.01}", "feddyn": "{}"}


def experiment(a, rates, **over):
    base = {"partition.num_clients": 1 + len(rates), "partition.pqfed_rates": str(list(rates)),
            "partition.pqfed_samples_per_source": a.samples_per_source,
            "partition.pqfed_target_test_per_source": a.test_per_source, "federation.rounds": a.rounds,
            "federation.eval_every": a.rounds, "seed": a.seed, "tracking.enabled": "false",
            "fabric.num_threads": 1}
    base.update(over)
    cfg = load_config(REPO / "configs/pqfed/mnist_lenient.yaml", [f"{k}={v}" for k, v in base.items()])
    t0 = time.time()
    s, _ = run(cfg, progress=False)
    x = s.state.extra["pqfed"]
    return {"target_accuracy": s.metrics["target_accuracy"], "collaborators": x["order"].tolist(),
            "emd": [round(float(v), 4) for v in x["emd"]], "history": [h.get("target_accuracy") for h in s.history],
            "stage_client": [h.get("stage_client") for h in s.history], "seconds": round(time.time() - t0, 1)}


def record(a, table, row, **over):
    res = experiment(a, **over)
    res.update({"table": table, "row": row, "seed": a.seed, "rounds": a.rounds,
                "samples_per_source": a.samples_per_source,
                "overrides": {k: v for k, v in over.items() if k != "rates"}})
    with open(Path(a.out) / "runs.jsonl", "a") as f:
        f.write(json.dumps(res) + "\n")
    print(table, row, res["target_accuracy"], res["collaborators"], f"{res['seconds']}s", flush=True)


def render(path: Path) -> str:
    """Markdown tables from the JSON lines written by the runs (the last run of each table/row wins)."""
    runs = {}
    for line in path.read_text().splitlines():
        r = json.loads(line)
        runs[(r["table"], str(r["row"]))] = r
    out = []
    t2 = {row: r for (t, row), r in runs.items() if t == "table2"}
    if t2:
        names = {"1": "T local training only", "2": "FL: T + 4 similar", "3": "FL: T + 4 dissimilar",
                 "4": "FL: T + 4 similar + 5 dissimilar", "5": "FL: T + 4 similar + 15 dissimilar"}
        out += ["Table II (MNIST, FedAvg)", "", "| Exp. | setup | target accuracy (%) |", "|---|---|---|"]
        out += [f"| {k} | {names[k]} | {100 * t2[k]['target_accuracy']:.2f} |" for k in sorted(t2)]
        out.append("")
    t5 = {row: r for (t, row), r in runs.items() if t == "table5"}
    if t5:
        inners = sorted({k.split(":")[0] for k in t5})
        out += ["Table V (MNIST): T + the clients with r ≤ the bound (selection given)", "",
                "| Exp. | r (%) | " + " | ".join(f"{i} (%)" for i in inners) + " |", "|---" * (2 + len(inners)) + "|"]
        for e in range(6, 17):
            cells = [f"{100 * t5[f'{i}:{e}']['target_accuracy']:.2f}" if f"{i}:{e}" in t5 else "–" for i in inners]
            out.append(f"| {e} | {'0' if e == 6 else f'0–{(e - 6) * 10}'} | " + " | ".join(cells) + " |")
        out.append("")
    t6 = {row: r for (t, row), r in runs.items() if t == "table6"}
    if t6:
        out += ["Table VI-style (MNIST): PQFed's own selection", "",
                "| inner | selection | collaborators (client id = 10·r + 1) | target accuracy (%) |",
                "|---|---|---|---|"]
        order = ["none", "strict", "lenient", "all"]
        for k in sorted(t6, key=lambda k: (k.split(":")[0], order.index(k.split(":")[1]))):
            i, sel = k.split(":")
            out.append(f"| {i} | {sel} | {sorted(t6[k]['collaborators'])} | {100 * t6[k]['target_accuracy']:.2f} |")
        out.append("")
    t8 = {row: r for (t, row), r in runs.items() if t == "table8"}
    if t8:
        out += ["Table VIII (MNIST): Algorithm 2, target accuracy after each stage", ""]
        for i, r in sorted(t8.items()):
            per = len(r["history"]) // max(len(r["collaborators"]), 1)
            accs = r["history"][per - 1::per]
            stop = next((s for s in range(1, len(accs)) if accs[s] < max(accs[:s])), None)
            where = stop + 1 if stop is not None else "–"
            out += [f"{i} (stage = {per} rounds; Algorithm 2 stops at stage {where})",
                    "", "| stage | client | r of client (%) | EMD | target accuracy |", "|---|---|---|---|---|"]
            for s, (c, acc) in enumerate(zip(r["collaborators"], accs)):
                out.append(f"| {s + 1} | {c} | {10 * (c - 1)} | {r['emd'][c]:.3f} | {acc:.4f} |")
            out.append("")
    return "\n".join(out)


def main(argv=None) -> None:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "render":
        print(render(Path(sys.argv[2] if len(sys.argv) > 2 else "docs/results/pqfed") / "runs.jsonl"))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tables", nargs="+", choices=["table2", "table5", "table6", "table8"])
    ap.add_argument("--inner", nargs="+", default=["fedavg", "fedprox"])
    ap.add_argument("--samples-per-source", type=int, default=400)
    ap.add_argument("--test-per-source", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--rounds-per-stage", type=int, default=20)
    ap.add_argument("--epsilon", default="10.0")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="docs/results/pqfed")
    a = ap.parse_args(argv)
    Path(a.out).mkdir(parents=True, exist_ok=True)
    eps = {"algorithm.epsilon": a.epsilon}
    for t in a.tables:
        if t == "table2":
            rates = [0.0] * 4 + [1.0] * 15
            groups = {1: None, 2: [1, 2, 3, 4], 3: [5, 6, 7, 8], 4: list(range(1, 10)), 5: "all"}
            for exp, g in groups.items():
                sel = ({"algorithm.selection": "none"} if g is None else {"algorithm.selection": "all"} if g == "all"
                       else {"algorithm.selection": "given", "algorithm.collaborators": str(g)})
                record(a, t, exp, rates=rates, **sel, **eps)
        for inner in a.inner:
            alg = {"algorithm.inner": inner, "algorithm.inner_params": INNER_PARAMS[inner], **eps}
            if t == "table5":
                for j in range(1, 12):
                    record(a, t, f"{inner}:{5 + j}", rates=RATES, **alg, **{
                        "algorithm.selection": "given", "algorithm.collaborators": str(list(range(1, j + 1)))})
            elif t == "table6":
                for sel in ("none", "strict", "lenient", "all"):
                    record(a, t, f"{inner}:{sel}", rates=RATES, **alg, **{"algorithm.selection": sel})
            elif t == "table8":
                stages = len(RATES)  # the 11 clients other than T
                record(a, t, inner, rates=RATES, **alg, **{
                    "algorithm.selection": "all", "algorithm.mode": "incremental",
                    "algorithm.rounds_per_stage": a.rounds_per_stage, "algorithm.incremental_stop": "false"},
                    **{"federation.rounds": stages * a.rounds_per_stage,
                       "federation.eval_every": stages * a.rounds_per_stage})


if __name__ == "__main__":
    main()
