"""An example flplat plugin (docs/extending.md): each module registers one kind of entry when imported.

* :mod:`flplat_example_plugin.algorithm` -- ``trimprox``: a proximal local hook and a trimmed-mean server rule;
* :mod:`flplat_example_plugin.personal` -- ``localhead``: a personalised method (FedPer: a shared body, a head kept
  on each client, an unseen-client model stated);
* :mod:`flplat_example_plugin.clustered` -- ``oneshot_kmeans``: a clustered method (FedAvg warm-up, one k-means of
  the client updates, a model per cluster, late joiners by lowest loss);
* :mod:`flplat_example_plugin.model` -- ``tiny_mlp``: a one-hidden-layer network split into body and head;
* :mod:`flplat_example_plugin.data` -- ``blobs_csv``: a 3-class table read from a CSV file shipped here;
* :mod:`flplat_example_plugin.partition` -- ``label_shards``: each client gets a few label-sorted shards.

Importing this package alone registers nothing (each entry point names its own module, so ``flplat list`` shows
which module every entry comes from).
"""

MODULES = ("flplat_example_plugin.algorithm", "flplat_example_plugin.personal", "flplat_example_plugin.clustered",
           "flplat_example_plugin.model", "flplat_example_plugin.data", "flplat_example_plugin.partition")
