"""One module per paper: its tables and figures as :class:`flplat.studies.reproduce.Table` definitions (cells =
ready configs under ``configs/``, methods = overrides, the smoke / reduced reductions). The numbers the papers report
are data in ``configs/papers/<paper>.yaml``."""

#: seconds per cell: a small training pool, 2 rounds of 1 epoch, the MLP, few clients
SMOKE = ["data.max_train_samples=600", "data.max_test_samples=300", "federation.rounds=2",
         "federation.local_epochs=1", "federation.eval_every=1", "model.name=mlp", "fabric.num_threads=1"]
