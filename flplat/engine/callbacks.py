"""The experiment's own callbacks on the round loop's records (:mod:`flplat.engine.events`): the progress display
and the removal of a run's client-state directory. (Tracking: :mod:`flplat.tracking.runs`; checkpoints:
:mod:`flplat.engine.checkpoint`.)"""

from __future__ import annotations

import sys
import time

from flplat.engine.events import Callback, RoundEnd, RunEnd


class ClientStateCleanup(Callback):
    """Removes the run's client-state directory when the run ends (its content is in the checkpoint when the
    run can be resumed), unless ``federation.keep_client_state``."""

    def __init__(self, directory: str, keep: bool):
        self.directory, self.keep = directory, keep

    def on_end(self, end: RunEnd) -> None:
        if not self.keep:
            import shutil

            shutil.rmtree(str(end.meta.get("client_state_dir", self.directory)), ignore_errors=True)


def eta(seconds: float) -> str:
    """A time left for progress lines: ``42s``, ``3m05s``, ``2h07m``."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class ProgressCallback(Callback):
    """A tqdm bar over rounds on stderr with the latest accuracy and loss."""

    def __init__(self, total: int, desc: str):
        from tqdm.auto import tqdm

        self.bar = tqdm(total=total, desc=desc, unit="round", file=sys.stderr, dynamic_ncols=True,
                        disable=None)  # None: disabled when stderr is not a terminal
        self.plain = self.bar.disable
        self.t0, self.done = time.perf_counter(), 0

    def on_round_end(self, end: RoundEnd) -> None:
        round, metrics = end.round, end.metrics
        self.done += 1
        post = {"loss": f"{metrics['train_loss']:.4f}"}
        if "global_accuracy" in metrics:
            post["acc"] = f"{metrics['global_accuracy']:.4f}"
        self.bar.set_postfix(post)
        self.bar.update(1)
        if self.plain:  # not a terminal (CI, logs): one line per round instead of a bar
            text = " ".join(f"{k}={v}" for k, v in post.items())
            left = (end.rounds - round) * (time.perf_counter() - self.t0) / self.done
            print(f"[round {round}/{end.rounds}] {text} time={metrics['round_time_s']:.2f}s left={eta(left)}",
                  file=sys.stderr, flush=True)

    def on_end(self, end: RunEnd) -> None:
        self.bar.close()
