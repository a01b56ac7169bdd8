"""Checkpoint overhead: the time of each round's checkpoint write against the round's own time, in the same run.

    python tools/benchmarks/bench_checkpoint.py configs/quickstart.yaml federation.rounds=5
    python tools/benchmarks/bench_checkpoint.py configs/quickstart.yaml data.name=fmnist partition.num_clients=100 \
        federation.rounds=3

Runs the config with ``tracking.checkpoint_every=1`` into a temporary store and times every
:meth:`CheckpointCallback._save` call; prints the mean round time (``round_time_s``: selection, training,
aggregation, evaluation), the mean checkpoint time, their ratio and the checkpoint's size. Both are measured
side by side in one process, so the ratio holds under a loaded machine better than absolute times.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time


def main(argv: list[str]) -> None:
    from flplat.engine.checkpoint import CheckpointCallback
    from flplat.experiment import load_config, run

    saves: list[float] = []
    sizes: list[int] = []
    original = CheckpointCallback._save

    def timed(self, make, round):
        t0 = time.perf_counter()
        original(self, make, round)
        saves.append(time.perf_counter() - t0)
        path = self.path()
        if path is not None and path.exists():
            sizes.append(path.stat().st_size)

    CheckpointCallback._save = timed
    with tempfile.TemporaryDirectory() as store:
        cfg = load_config(argv[0], [*argv[1:], f"tracking.store_dir={store}", "tracking.checkpoint_every=1",
                                    "tracking.plots=false"])
        summary, _ = run(cfg, progress=False)
    rounds = [h["round_time_s"] for h in summary.history]
    r, c = statistics.fmean(rounds), statistics.fmean(saves)
    print(f"rounds={len(rounds)} mean_round_s={r:.4f} mean_checkpoint_s={c:.4f} overhead={100 * c / r:.2f}% "
          f"checkpoint_bytes={max(sizes, default=0)}")


if __name__ == "__main__":
    main(sys.argv[1:])
