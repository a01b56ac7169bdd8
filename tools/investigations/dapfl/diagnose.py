"""How much DA-PFL's weights differ from its ablations' in a real run (docs/dapfl_investigation.md, H2/H3).

Every --every rounds, for that round's participants and their current personalised models: the squared model
distances d_ij, the dynamic factor 1 − exp(−(d_ij + ε)/σ), and the row-wise L1 distance between DA-PFL's α (Eqs.
7–8), V2's α (affinity only) and V1's uniform α; also ‖w_i − w_i^g‖ against ‖w_i‖. One JSON line per round.

  python tools/investigations/dapfl/diagnose.py configs/dapfl/digits_k20_a1.0.yaml --out diag.jsonl \
      --set fabric.num_threads=1 algorithm.name=dapfl algorithm.lam=1.0
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from flplat.engine.events import Callback
from flplat.experiment import load_config, prepare, run
from flplat.maths.dapfl_affinity import dynamic_weights, pairwise_distances


class Probe(Callback):
    """``algo``: the run's DA-PFL config (its distance power, σ, ε); ``mask``: the model's parameters in the flat
    layout (the distances leave normalisation buffers out, as DA-PFL does)."""

    def __init__(self, every: int, out, algo, mask: torch.Tensor):
        self.every, self.out, self.cfg, self.mask = every, out, algo, mask

    def on_round_end(self, end):
        round, metrics, st, cfg = end.round, end.metrics, end.state, self.cfg
        if round % self.every:
            return
        part = st.method.participants.numpy()
        w = torch.stack([st.personal.get(int(k)) for k in part]).double()
        d = pairwise_distances(w[:, self.mask], cfg.distance_power)
        c = st.method.affinity[part][:, part]
        full = dynamic_weights(c, d, cfg.sigma, cfg.eps)
        v2 = dynamic_weights(c, None)
        m = len(part)
        v1 = (1 - torch.eye(m, dtype=torch.float64)) / (m - 1)
        off = ~torch.eye(m, dtype=torch.bool)
        fac = 1 - torch.exp(-(d + cfg.eps) / cfg.sigma)
        wg = full @ w
        rec = {"round": round, "acc": metrics.get("mean_local_accuracy"),
               "d_median": float(d[off].median()), "d_min": float(d[off].min()), "d_max": float(d[off].max()),
               "factor_min": float(fac[off].min()), "factor_median": float(fac[off].median()),
               "l1_full_v2": float((full - v2).abs().sum(1).mean()), "l1_v2_v1": float((v2 - v1).abs().sum(1).mean()),
               "alpha_max_full": float(full.max(1).values.mean()), "alpha_max_v2": float(v2.max(1).values.mean()),
               "dist_to_center_rel": float(((w - wg).norm(dim=1) / w.norm(dim=1)).mean())}
        self.out.write(json.dumps(rec) + "\n")
        self.out.flush()
        print(" ".join(f"{k}={v:.4g}" for k, v in rec.items()), file=sys.stderr, flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("--set", nargs="*", default=[])
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    cfg = load_config(a.config, [*a.set, "tracking.enabled=false"])
    strategy = prepare(cfg).strategy  # its config (defaults filled in) and the model's flat layout
    with open(a.out, "w") as f:
        run(cfg, callbacks=[Probe(a.every, f, strategy.cfg, strategy.info.layout.mask("", params_only=True))],
            progress=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
