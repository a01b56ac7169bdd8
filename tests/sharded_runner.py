"""Runs tiny experiments for several algorithms inside ONE multi-process Fabric launch (used by
tests/test_sharding.py; not collected by pytest). Usage: python tests/sharded_runner.py OUT.json DEVICES ALGO...
(ALGO:vec runs ALGO with ``federation.vectorize=true``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import ALGORITHM_OVERRIDES, tiny_overrides  # noqa: E402

from flplat.engine.sharding import is_main_process  # noqa: E402
from flplat.experiment import (
    load_config,  # noqa: E402
    run,  # noqa: E402
)


def main() -> None:
    out, devices, algos = sys.argv[1], sys.argv[2], sys.argv[3:]
    results = {}
    for item in algos:
        name, _, vec = item.partition(":")
        cfg = load_config(None, tiny_overrides(**{"algorithm.name": name, "fabric.devices": devices,
                                                  "fabric.num_threads": 1, "federation.rounds": 3,
                                                  "federation.vectorize": str(vec == "vec").lower(),
                                                  **ALGORITHM_OVERRIDES.get(name, {})}))
        summary, _ = run(cfg, progress=False)
        results[item] = [{k: v for k, v in h.items() if k != "round_time_s"} for h in summary.history]
    if is_main_process():
        Path(out).write_text(json.dumps(results))


if __name__ == "__main__":
    main()
