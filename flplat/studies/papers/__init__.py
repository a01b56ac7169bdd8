"""One module per paper: its tables and figures as :class:`flplat.studies.reproduce.Table` definitions (cells =
ready configs under ``configs/``, methods = overrides, the smoke / reduced reductions). The numbers the papers report
are data in ``configs/papers/<paper>.yaml``. A paper with many items may spread them over further modules
(:data:`MORE_MODULES`), which import the paper's module, never the other way round."""

#: further modules whose ``TABLES`` belong to a paper, after its own module's (``flplat reproduce`` lists them too)
MORE_MODULES: dict[str, tuple[str, ...]] = {"flux": ("flux_mixed", "flux_sweeps")}

#: seconds per cell: a small training pool, 2 rounds of 1 epoch, the MLP, few clients
SMOKE = ["data.max_train_samples=600", "data.max_test_samples=300", "federation.rounds=2",
         "federation.local_epochs=1", "federation.eval_every=1", "model.name=mlp", "fabric.num_threads=1"]
