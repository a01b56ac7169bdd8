"""The public API: everything a plugin (your own algorithm, dataset, model or partition) imports, in one place.

A plugin is a module of your own package that imports these names and registers entries with the decorators;
flplat imports it in every process it starts (``plugins: [my_pkg.my_algo]`` in a config, ``--plugin MODULE`` on
the command line, or an entry point of group ``flplat.algorithms`` / ``flplat.datasets`` / ``flplat.models`` /
``flplat.partitions``; see :mod:`flplat.plugins` and docs/extending.md). The built-in algorithms import the same
names from here: there is no other way in (a built-in imports this module and at most its own maths module,
``flplat.maths.<its file name>[_*]``; tests/test_layout.py holds it).

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
model(s)) and, on a :class:`LocalHook`, ``vectorizes`` (its whole effect is ``functional_loss``) or ``Stacked`` (a
:class:`StackedHook` doing its whole effect for a group of vectorised clients at once; :mod:`flplat.protocol.stacked`).
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

**Method blocks.** What several methods are made of comes from here too (it lives in :mod:`flplat.blocks` and
:mod:`flplat.maths`): FedAvg's aggregation (:func:`fedavg`, :func:`fedavg_by_group`, :func:`weighted_mean`,
:func:`stack`) and server (:class:`FedAvgStrategy`: subclass it to change only the local objective or the
selection); the proximal pull (:class:`ProximalTerm`, :class:`CentredHook`); the multi-model helpers of the IFCA
family (:func:`random_models`, :func:`model_losses`, :func:`losses_fn`, :func:`plan_with_all_models`, ...); the
mixture rounds of FedEM and FedRC (:class:`MixtureStrategy`); client selection (:func:`sample_proportional`,
:func:`client_losses`, :func:`round_robin`, :class:`LossAwareSelection`); another registered algorithm run inside a
method (:func:`check_inner`, :func:`build_inner`); and the maths methods use: clustering without a given number of
clusters (:func:`silhouette_kmeans`, :func:`silhouette_agglomerative`, :func:`hdbscan`, :func:`adaptive_dbscan`
with its knee rules, Flux's :func:`dynamic_start`) or with one (:func:`kmeans`), :func:`hellinger`,
:func:`client_psi`, :func:`detection_metrics`, :func:`pairwise_distances`, :func:`task_loss`.

**A method's state.** What a strategy carries between rounds goes in ``state.method``: an instance of a dataclass
the strategy defines, set in ``init_state``, checkpointed with the server state. ``state.extra`` (string keys) is
deprecated (it warns; removed in 0.3.0).

**What is stable.** The names in ``__all__`` below, the signatures above, the ``Strategy`` methods and the fields
of ``ClientPlan`` / ``ClientResult`` / ``EvalResult`` / ``ServerState`` / ``FederationInfo`` / ``Dataset`` /
``Partition`` keep working across minor versions: fields, methods and names may be added (with defaults that keep
old behaviour), none is removed or changes meaning without a deprecation: a name, path or call form that is going
away warns (a :class:`~flplat.deprecation.FlplatDeprecationWarning` naming its replacement) for one minor version
first, and CHANGELOG.md lists it. Everything else (``flplat.engine``, ``flplat.blocks``, ``flplat.maths``, the
CLI's internals, module paths other than this one) may change; import from here.
"""

from __future__ import annotations

from flplat.blocks.aggregation import fedavg, fedavg_by_group, stack, weighted_mean
from flplat.blocks.compose import build_inner, check_inner
from flplat.blocks.hooks import CentredHook, ProximalTerm
from flplat.blocks.mixture import AGGREGATIONS as MIXTURE_AGGREGATIONS
from flplat.blocks.mixture import MixtureState, MixtureStrategy, draw_components
from flplat.blocks.multimodel import (
    losses_fn,
    mixture_correct,
    model_losses,
    permuted_init,
    plan_with_all_models,
    random_models,
    responsibilities,
    sample_losses,
    stacked_logits,
)
from flplat.blocks.selection import (
    LOSS_MODES,
    LossAwareSelection,
    SelectionState,
    client_losses,
    num_selected,
    round_robin,
    sample_proportional,
)
from flplat.blocks.strategies import FedAvgStrategy
from flplat.config import DataConfig, PartitionConfig
from flplat.data.containers import ClientSplit, Dataset, Drift, Partition
from flplat.data.datasets import register_dataset
from flplat.data.partitions import register_partition
from flplat.errors import ConfigError, check_choice, check_range, param_choice, param_out_of_range
from flplat.maths.clustering import (
    GUARD_CODES,
    KNEE_GUARDS,
    KNEE_RULES,
    LINKAGES,
    NO_KNEE_RULES,
    NONPOSITIVE_RULES,
    adaptive_dbscan,
    dynamic_start,
    hdbscan,
    kmeans,
    silhouette_agglomerative,
    silhouette_kmeans,
)
from flplat.maths.dapfl_affinity import pairwise_distances
from flplat.maths.losses import task_loss
from flplat.metrics.iid_detection import detection_metrics
from flplat.metrics.noniid import client_psi, hellinger
from flplat.models.base import SplitModel, register_model
from flplat.protocol.registry import ALGORITHMS, register_algorithm
from flplat.protocol.seeding import derive_seed
from flplat.protocol.stacked import StackedHook, StackedHookContext, StackedStep
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
    "StackedHook", "StackedHookContext", "StackedStep",
    "ClientResult", "EvalResult", "ClientView", "FederationOps", "FederationInfo", "ServerState", "ClientStore",
    "ParamLayout", "derive_seed", "sample_uniform", "true_m", "TRUE_M", "EvalModels", "SEEN_MODELS", "UNSEEN_MODELS",
    # registering
    "register_algorithm", "register_dataset", "register_model", "register_partition", "ALGORITHMS",
    # data, models, configs
    "Dataset", "Partition", "ClientSplit", "Drift", "SplitModel", "DataConfig", "PartitionConfig",
    "ConfigError", "check_choice", "check_range", "param_choice", "param_out_of_range",
    # method blocks (flplat.blocks): aggregation, bases, hooks, several models, mixtures, selection, composition
    "fedavg", "fedavg_by_group", "stack", "weighted_mean",
    "FedAvgStrategy",
    "CentredHook", "ProximalTerm",
    "losses_fn", "sample_losses", "stacked_logits", "model_losses", "random_models", "permuted_init",
    "plan_with_all_models", "responsibilities", "mixture_correct",
    "MixtureStrategy", "MixtureState", "MIXTURE_AGGREGATIONS", "draw_components",
    "LossAwareSelection", "SelectionState", "LOSS_MODES", "client_losses", "num_selected", "round_robin",
    "sample_proportional",
    "build_inner", "check_inner",
    # maths and metrics methods use: clustering (flplat.maths.clustering), distances, the task loss, metrics
    "kmeans", "silhouette_kmeans", "NONPOSITIVE_RULES", "adaptive_dbscan", "NO_KNEE_RULES", "KNEE_RULES",
    "KNEE_GUARDS", "GUARD_CODES", "dynamic_start", "silhouette_agglomerative", "LINKAGES", "hdbscan",
    "pairwise_distances", "task_loss", "hellinger", "client_psi", "detection_metrics",
]
