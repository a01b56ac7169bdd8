"""The public API: everything a plugin (your own algorithm, dataset, model or partition) imports, in one place.

A plugin is a module of your own package that imports these names and registers entries with the decorators;
flplat imports it in every process it starts (``plugins: [my_pkg.my_algo]`` in a config, ``--plugin MODULE`` on
the command line, or an entry point of group ``flplat.algorithms`` / ``flplat.datasets`` / ``flplat.models`` /
``flplat.partitions``; see :mod:`flplat.plugins` and docs/extending.md). The built-in algorithms import the same
names from here: there is no other way in.

**Algorithms.** Subclass :class:`Strategy` (or :class:`PersonalizedStrategy` / :class:`ClusteredStrategy`), give it
a ``name`` (the ``algorithm.name`` of configs) and a frozen ``Config`` dataclass whose fields are its
hyperparameters (``algorithm.KEY`` in configs, checked against the dataclass; checks on values raise
:class:`ConfigError` with one line naming ``algorithm.KEY`` and the allowed values, e.g. with
:func:`param_choice` / :func:`check_range`), and decorate it with :func:`register_algorithm`. Each round the
engine calls ``select`` (clients), ``plan`` (one :class:`ClientPlan` per client: start weights, epochs, extra local
terms as :class:`LocalHook`), trains the clients and calls ``aggregate`` (the :class:`ClientResult` list ->
the next :class:`ServerState`); ``eval_weights`` says which model a client uses. What the engine relies on is
declared, and ``flplat check`` verifies it: ``eval_models`` (an :class:`EvalModels`: which model a training client
and an unseen client are scored with -- global, cluster, personal; global, an ensemble, inferred at test time, or
not applicable and why), ``reduces_across_shards`` (``aggregate`` reads only the round's sample-weighted mean
model(s)) and, on a :class:`LocalHook`, ``vectorizes`` (its whole effect is ``functional_loss``).
Models travel as flat float vectors (:class:`ParamLayout`); per-client vectors live in a :class:`ClientStore`
(``info.client_store()``).
A round's ``bytes_down`` / ``bytes_up`` count the part of each plan's and result's vector that travels: a method
whose clients keep part of the model (FedPer's or FedRep's head) says so with ``local_prefixes = ("head.",)``
(layout names that never leave the client), or overrides :meth:`Strategy.sent_mask` (one boolean mask over the
flat layout per direction); anything sent besides the model goes in ``extra_bytes_down`` / ``extra_bytes_up``.
Randomness comes from the ``numpy`` generator handed in, or seeds made with :func:`derive_seed`; a strategy never
loads data, picks devices, seeds global RNGs or logs.

**Datasets.** ``@register_dataset("name", Config)`` on ``fn(cfg, seed: int) -> Dataset``: ``Config`` is a dataclass
of the dataset's own keys (``data.KEY`` in configs, flat beside the keys every dataset shares, :class:`DataConfig`:
``root``, ``download``, ``cache``, ``cache_dir``, ``max_train_samples``, ``max_test_samples``; it must not redefine
those), checked as ``model.*`` is; an optional ``check()`` method checks values and raises :class:`ConfigError` naming
``data.KEY``. ``cfg`` has every key as an attribute (the Config's, with the shared ones). The loader returns the whole
dataset in memory (``x_train`` float32 ``(N, *input_shape)``, ``y_train`` int64 ``(N,)``, optional official test
set, optional natural client ids and metadata columns; see :class:`Dataset`); ``seed`` is for any sampling it does.
Missing files raise :class:`ConfigError` naming the file. ``Config`` defaults to :class:`NoConfig` (no keys).

**Models.** ``@register_model("name", Config)`` on ``build(cfg, input_shape, num_classes) -> SplitModel``:
``Config`` is a dataclass of the model's hyperparameters (``model.KEY``; it must not have a ``name`` field), the
model a :class:`SplitModel` (``features`` = body ending in a flat ``(B, D)`` representation, ``head`` = the final
linear layer), so that head/body methods (FedRep, CReFF, Flux descriptors) work with it.

**Partitions.** ``@register_partition("name", Config)`` on ``fn(dataset, cfg, seed: int) -> Partition``: the
partition receives the dataset, its keys (``partition.KEY``, flat beside the shared :class:`PartitionConfig`:
``num_clients`` and the local split fractions) and an integer seed to spawn its random streams from; it returns a
:class:`Partition` (each client's pool indices -- flplat cuts the local train / val / test splits -- or fixed
splits, and optionally a new pool, unseen test-only clients, planted distribution ids, a public sample, a
:class:`Drift`: the training clients' data changing at known rounds, each stage a :class:`ClientSplit` per client).
``plants=True``: it plants distributions (gives ``Partition.distribution``); ``multilabel=True``: it takes
multi-label data. ``takes="labels"``: a protocol of the pool's labels alone, ``fn(labels, cfg, rng) -> list of index
arrays``. The old form, ``@register_partition("name")`` on ``fn(labels, cfg, rng)`` without a Config (it reads the
keys the old shared PartitionConfig held), works for one more minor version with a deprecation warning (see
:mod:`flplat.data.registry`). ``flplat check --dataset NAME`` / ``--partition NAME`` hold an entry to the contract.

**What is stable.** The names in ``__all__`` below, the signatures above, the ``Strategy`` methods and the fields
of ``ClientPlan`` / ``ClientResult`` / ``EvalResult`` / ``ServerState`` / ``FederationInfo`` / ``Dataset`` /
``Partition`` keep working across minor versions: fields and methods may be added (with defaults that keep old
behaviour), none is removed or changes meaning without a major version. Everything else (``flplat.engine``,
``flplat.maths``, the CLI's internals, module paths other than this one) may change; import from here.
"""

from __future__ import annotations

from flplat.config import DataConfig, PartitionConfig
from flplat.data.containers import ClientSplit, Dataset, Drift, Partition
from flplat.data.datasets import register_dataset
from flplat.data.partitions import register_partition
from flplat.errors import ConfigError, check_choice, check_range, param_choice, param_out_of_range
from flplat.models.base import SplitModel, register_model
from flplat.protocol.registry import register_algorithm
from flplat.protocol.seeding import derive_seed
from flplat.protocol.state import ClientStore, ParamLayout, ServerState
from flplat.protocol.strategy import (
    SEEN_MODELS,
    TRUE_M,
    UNSEEN_MODELS,
    ClientPlan,
    ClientResult,
    ClientView,
    ClusteredStrategy,
    EvalModels,
    EvalResult,
    FederationInfo,
    FederationOps,
    HookContext,
    LocalHook,
    NoConfig,
    PersonalizedStrategy,
    Strategy,
    sample_uniform,
    true_m,
)

__all__ = [
    # the strategy protocol
    "Strategy", "PersonalizedStrategy", "ClusteredStrategy", "NoConfig", "LocalHook", "HookContext", "ClientPlan",
    "ClientResult", "EvalResult", "ClientView", "FederationOps", "FederationInfo", "ServerState", "ClientStore",
    "ParamLayout", "derive_seed", "sample_uniform", "true_m", "TRUE_M", "EvalModels", "SEEN_MODELS", "UNSEEN_MODELS",
    # registering
    "register_algorithm", "register_dataset", "register_model", "register_partition",
    # data, models, configs
    "Dataset", "Partition", "ClientSplit", "Drift", "SplitModel", "DataConfig", "PartitionConfig",
    "ConfigError", "check_choice", "check_range", "param_choice", "param_out_of_range",
]
