"""Pure maths the methods are made of: functions of arrays and tensors, no data loading, devices, seeding or logs.

Named after the method or the concept they serve:

* ``aggregation`` -- weighted means and per-group FedAvg on ``(n_clients, P)`` stacks (every method).
* ``server_opt`` -- FedOpt's server optimizers (FedAvgM, FedAdagrad, FedYogi, FedAdam; Reddi et al., 2021).
* ``clustering`` -- silhouette-selected K-means (Clust-PSI-PFL, CAFA, FedPFA), adaptive DBSCAN and the
  dynamic start rule (Flux App. D).
* ``multimodel`` -- losses / logits of a stack of models on one batch (IFCA, FeSEM, FedEM, FedRC, FedDrift).
* ``stacked`` -- the one stacked forward (``vmap`` over ``functional_call``, batch norm per model) and its probe,
  shared by the vectorised engine, batched evaluation and ``multimodel``.
* ``cafa_weights`` -- CAFA's CBCC and ABFA aggregation weights (Eqs. 8-11).
* ``creff_features`` -- CReFF's federated feature matching and head re-training.
* ``dapfl_affinity`` -- DA-PFL's class affinity and dynamic aggregation weights (Eqs. 3-9).
* ``fedpfa_similarity`` -- FedPFA's activation-sparsity representations and distances.
* ``flux_descriptors`` -- Flux's client descriptors (App. C) and their DP noise.
* ``pqfed`` -- PQFed's public PCA, LDP noise, K-means histograms, EMD and collaborator selection.
"""
