"""The strategy interface every algorithm implements, and the messages it exchanges with clients.

This module is the contract between the engine (which drives strategies) and the algorithms (which implement
them); it sits below both, so neither imports the other. Plugins import these names from :mod:`flplat.api`.

The orchestrator owns the one round loop and asks the strategy, each round, to

1. ``select`` the participating clients (uniform sampling of a fraction q by default; Power-of-Choice,
   HACCS or FedCLS override it),
2. ``plan`` each selected client's local work (start weights, extra loss terms, epochs, trainable part),
3. ``aggregate`` the clients' results into the next :class:`~flplat.protocol.state.ServerState`,

and for evaluation, ``eval_weights`` says which model a client would use (global, its cluster's, its own).

What the engine may rely on is *declared*, never inferred from which methods a class overrides:
:attr:`Strategy.eval_models` (an :class:`EvalModels`: the model a training client is scored with, and the one an
unseen client is scored with, or why there is none), :attr:`Strategy.reduces_across_shards` (``aggregate`` needs only
per-group sample-weighted means, so a sharded round all-reduces them) and :attr:`LocalHook.vectorizes` (the hook's
whole effect is its ``functional_loss``, so its clients can train vectorised; or its ``Stacked`` form does the whole
effect for a group of clients at once). ``flplat check`` verifies each
declaration on a tiny federation (:mod:`flplat.studies.declarations`).
Strategies never load data, pick devices, seed global RNGs or log: they receive a numpy ``Generator`` for
their randomness and a :class:`FederationOps` handle for client-side computations they need (losses of
candidate clients, cross-evaluation of models).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import numpy as np
import torch
from torch import nn

from flplat.errors import ConfigError
from flplat.protocol.state import ParamLayout, ServerState

__all__ = ["SEEN_MODELS", "TRUE_M", "UNSEEN_MODELS", "ClientFn", "ClientPlan", "ClientResult", "ClientView",
           "ClusteredStrategy", "EvalModels", "EvalResult", "FederationInfo", "FederationOps", "HookContext",
           "LocalHook", "NoConfig", "PersonalizedStrategy", "Strategy", "sample_uniform", "true_m"]


@dataclass
class HookContext:
    """What a local hook sees: the bare network, its flat layout and its parameters in layout order."""

    net: nn.Module
    layout: ParamLayout
    params: list[torch.Tensor]
    batch: tuple[torch.Tensor, torch.Tensor] | None = None  # the current step's (x, y), set by the trainer
    lr: float = 0.0  # the current phase's learning rate, set by the trainer (DA-PFL's post-step pull)

    def param_views(self, vec: torch.Tensor) -> list[torch.Tensor]:
        """Views of a flat vector shaped like ``params`` (e.g. the global model as a proximal centre)."""
        views = self.layout.split(vec.to(self.params[0].device))
        return [v for v, is_p in zip(views, self.layout.is_param) if is_p]


class LocalHook:
    """A change to a client's local objective or update, e.g. FedProx's proximal term.

    ``setup`` runs once before the client trains; ``loss`` returns an extra term added to every batch loss
    (or None); ``after_step`` runs after each optimizer step (e.g. DA-PFL's post-step correction; ``ctx.batch``
    is that step's batch, for hooks that keep a second model: APFL); ``finalize`` runs once after training and
    returns what the hook sends back besides the weights (merged into ``ClientResult.extra``, e.g. pFedMe's
    local model), or None.

    ``vectorizes`` declares that the hook's whole effect is :meth:`functional_loss` (``loss`` returns the same term,
    and ``setup`` only prepares it), so its clients can be trained as one stacked group
    (:mod:`flplat.engine.vectorized`, which calls neither ``loss``, ``after_step`` nor ``finalize``). False (the
    default): its clients train with the per-client loop, and say so in the log. A class that defines ``loss``,
    ``functional_loss``, ``after_step`` or ``finalize`` itself does not inherit a True declaration: it states its
    own. ``Stacked`` (a :class:`~flplat.protocol.stacked.StackedHook` subclass, or None) is a hook's whole effect --
    ``setup``, ``loss``, ``after_step`` and ``finalize`` -- for a group of vectorised clients at once (APFL's second
    model, pFedMe's moving centre); it too is not inherited by a class that redefines one of those. ``flplat check``
    compares a declared hook's vectorised clients with the loop's.
    """

    vectorizes: ClassVar[bool] = False
    Stacked: ClassVar[type | None] = None

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        own = vars(cls).keys() & {"setup", "loss", "functional_loss", "after_step", "finalize"}
        if "vectorizes" not in vars(cls) and own - {"setup"}:
            cls.vectorizes = False
        if "Stacked" not in vars(cls) and own:
            cls.Stacked = None

    def setup(self, ctx: HookContext) -> None:
        return None

    def loss(self, ctx: HookContext) -> torch.Tensor | None:
        return None

    def after_step(self, ctx: HookContext) -> None:
        return None

    def finalize(self, ctx: HookContext) -> dict[str, Any] | None:
        return None

    def functional_loss(self, params: list[torch.Tensor]) -> torch.Tensor | None:
        """``loss`` as a pure function of ``params`` (one tensor per parameter, in ``HookContext.params`` order),
        for vectorised clients (:mod:`flplat.engine.vectorized`), which call it after ``setup`` with one client's slices
        of the stacked parameters. A hook that overrides ``loss`` but not this, or that overrides ``after_step``,
        makes its client fall back to the per-client loop."""
        return None


@dataclass
class ClientPlan:
    """What one client does this round."""

    weights: torch.Tensor | None  # flat start weights (None: only in ``phases``, continue from the previous phase)
    hooks: tuple[LocalHook, ...] = ()
    epochs: int | None = None  # None: federation.local_epochs
    lr: float | None = None  # None: federation.optimizer.lr
    trainable: str = "all"  # all | features | head  (FedRep-style phases)
    indices: np.ndarray | None = None  # train on these pool indices instead of the client's train split (CL)
    extra_bytes_down: int = 0  # besides the weights (descriptors, centroids, ...)
    batch_steps: int = 1  # optimizer steps on each minibatch before the next is drawn (pFedMe: K inner steps on one)
    # this plan's optimizer instead of federation.optimizer's fields (keys name, momentum, weight_decay; lr is
    # ``lr``), e.g. pFedMe's inner solve with plain gradient steps whatever the federation's optimizer; None: as is
    optimizer: dict[str, Any] | None = None
    # further local phases run after this one (FedRep: head epochs, then body epochs; Ditto: personal, then global
    # model). A phase whose ``weights`` is None continues from the previous phase's weights; every phase uses the
    # client-round seed, like a stand-alone plan. The result's ``weights`` are the last phase's, and
    # ``extra["phase_weights"]`` lists the weights after each earlier phase.
    phases: tuple[ClientPlan, ...] = ()


@dataclass
class ClientResult:
    client: int
    weights: torch.Tensor  # flat weights after local training
    num_samples: int
    train_loss: float
    num_steps: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    extra_bytes_up: int = 0
    loss_scale: float | None = None  # 16-mixed: the client's gradient-scaler scale after its last step (engine's)


@dataclass
class EvalResult:
    client: int
    loss_sum: float
    correct: int
    num_samples: int
    class_correct: tuple[int, ...] = ()  # per class (by true label): correct predictions ...
    class_total: tuple[int, ...] = ()  # ... and samples (empty where not computed)
    # multi-label data only (flplat/metrics/multilabel.py): the macro ROC AUC and the (n, C) scores/targets it was
    # computed from (kept so the orchestrator can pool every client's predictions into global_auroc)
    auroc: float = float("nan")
    scores: torch.Tensor | None = None
    targets: torch.Tensor | None = None

    @property
    def accuracy(self) -> float:
        return self.correct / self.num_samples if self.num_samples else float("nan")

    @property
    def loss(self) -> float:
        return self.loss_sum / self.num_samples if self.num_samples else float("nan")


@dataclass
class ClientView:
    """What a client-side function passed to :meth:`FederationOps.compute` sees on the client.

    ``net`` holds the requested weights (``None`` weights: left as they are) and is in eval mode; ``x``/``y`` are
    the client's ``split`` tensors on the compute device (a strategy that must not use labels simply ignores
    ``y``); ``seed`` is a per-client seed derived from the caller's ``seed`` and the client id, for client-side
    randomness (``torch.Generator(device=...).manual_seed(view.seed)``). ``autocast`` is the precision context.
    """

    client: int
    net: nn.Module
    layout: ParamLayout
    x: torch.Tensor
    y: torch.Tensor
    seed: int
    device: torch.device
    autocast: Any


ClientFn = Callable[[ClientView], Any]


class FederationOps(Protocol):
    """Client-side computations a strategy may request (run by the client executor)."""

    def evaluate(self, requests: Sequence[tuple[int, torch.Tensor]], split: str = "val") -> list[EvalResult]:
        """Score ``(client, weights)`` pairs on that client's ``split`` (train | val | test)."""
        ...

    def compute(self, requests: Sequence[tuple[int, torch.Tensor | None]], fn: ClientFn, split: str = "train",
                seed: int = 0) -> list[Any]:
        """Run ``fn(view)`` on each ``(client, weights)`` pair's ``split`` and return the results in order.

        This is how client-side statistics travel (Flux descriptors, projected features, per-sample losses,
        test-time adaptation): results must be picklable (tensors are moved to CPU); under sharded execution
        each process computes its share and every process receives every result. ``fn`` must not keep state
        between calls, and runs under ``torch.no_grad`` unless it enables gradients itself.
        """
        ...


@dataclass
class FederationInfo:
    """What a strategy may know about the federation (sizes and the label counts clients report)."""

    num_clients: int
    num_classes: int
    num_samples: np.ndarray  # (K,) train-split sizes
    label_counts: np.ndarray  # (K, C) train-split label counts
    client_fraction: float
    local_epochs: int
    layout: ParamLayout
    all_train_indices: np.ndarray  # the union of the clients' train splits (centralized training)
    state_dtype: torch.dtype = torch.float32
    state_dir: str | None = None
    public_x: torch.Tensor | None = None  # unlabeled public inputs the server may use (PQFed's public sample)
    rounds: int = 0  # federation.rounds (R), for schedules that depend on it (Flux's clustering start, Eq. 14)
    num_distributions: int = 0  # true M of a partition with planted distributions (shift); 0: unknown. Oracle
    #                             knowledge: only where asked for (Flux-prior's K-means; a baseline's M = 0 under
    #                             Flux's protocol, App. E.1: see true_m)
    # ground truth known to the partition, for evaluation metrics only (never for a method's decisions):
    # which clients are IID under the `cafa` partition (CBCC's detection accuracy), else None
    true_iid: np.ndarray | None = None
    # (K,) sizes of every client's evaluation splits by name ("val", "test"), for checks a method needs before it
    # runs (CAFA's ABFA needs validation data); empty: unknown (an info built by hand)
    split_samples: dict[str, np.ndarray] = field(default_factory=dict)

    def client_store(self, default: torch.Tensor | None = None, size: int | None = None, name: str = "personal"):
        """A per-client state store configured by ``federation.client_state_dtype`` / ``client_state_dir``."""
        from flplat.protocol.state import ClientStore

        path = None if self.state_dir is None else f"{self.state_dir}/{name}.bin"
        return ClientStore(self.num_clients, size or self.num_params, default, self.state_dtype, path)

    @property
    def num_params(self) -> int:
        return self.layout.size

    def train_indices(self, client: int) -> np.ndarray:
        """Pool indices of ``client``'s train split, in the order ``FederationOps.compute(..., "train")`` sees its
        samples (``all_train_indices`` is the clients' train splits concatenated in client order)."""
        end = np.cumsum(self.num_samples)
        return self.all_train_indices[end[client] - self.num_samples[client]:end[client]]


@dataclass(frozen=True)
class NoConfig:
    """An algorithm without hyperparameters of its own."""


#: the model a training ("seen") client is scored with: ``global`` -- the strategy's :meth:`~Strategy.global_weights`,
#: the same for every client; ``cluster`` -- its cluster's, ``state.clusters[state.assignment[k]]`` (a client not
#: assigned yet: :meth:`ClusteredStrategy.unassigned_weights`); ``personal`` -- its own, :meth:`~Strategy.eval_weights`
SEEN_MODELS = ("global", "cluster", "personal")
#: the model an unseen (test-only, unlabeled) client is scored with in the test phase (Flux App. F.1): ``global`` --
#: :meth:`~Strategy.global_weights`; ``cluster_ensemble`` -- the prediction ensemble Σ_c (n_c / Σ n) f(x; θ_c) of the
#: cluster models, n_c the training clients of cluster c that have trained (F.1's weighting); ``client_ensemble`` --
#: the equally weighted prediction ensemble of the models of the training clients that have trained (each its own
#: cluster of one: F.1's rule for a method without a global or cluster model); ``test_time`` -- the model the method
#: infers for the client without its labels (:meth:`~Strategy.test_time_weights`: Flux, ATP); ``not_applicable`` --
#: the method has none (``EvalModels.note`` says why): no test-phase accuracy is reported
UNSEEN_MODELS = ("global", "cluster_ensemble", "client_ensemble", "test_time", "not_applicable")


@dataclass(frozen=True)
class EvalModels:
    """Which model a strategy's clients are scored with (:data:`SEEN_MODELS`, :data:`UNSEEN_MODELS`), and in words
    what it is (``note``: logged with the run as ``flplat.eval.unseen_model``; required for ``not_applicable``)."""

    seen: str = "global"
    unseen: str = "global"
    note: str = ""

    def __post_init__(self):
        if self.seen not in SEEN_MODELS:
            raise ValueError(f"EvalModels.seen={self.seen!r}; allowed: {', '.join(SEEN_MODELS)}")
        if self.unseen not in UNSEEN_MODELS:
            raise ValueError(f"EvalModels.unseen={self.unseen!r}; allowed: {', '.join(UNSEEN_MODELS)}")
        if self.unseen == "not_applicable" and not self.note:
            raise ValueError("EvalModels(unseen='not_applicable') needs a note saying why")


class Strategy(ABC):
    """Base class: override what differs from FedAvg-style single-model training."""

    name: ClassVar[str] = ""
    Config: ClassVar[type] = NoConfig
    communicates: ClassVar[bool] = True  # False: no model traffic (local-only, centralized) -> 0 bytes logged
    # name prefixes of the flat layout (``ParamLayout.names``) whose entries never leave the client, e.g. FedRep's and
    # FedPer's local head ``("head.",)``: the round's ``bytes_down`` / ``bytes_up`` count the model vector without
    # them (:meth:`sent_mask`). (): the whole vector travels both ways
    local_prefixes: ClassVar[tuple[str, ...]] = ()
    # why the method cannot take multi-label data (y (N, C) of 0/1: BCE), or None; the experiment refuses it by name
    multilabel_unsupported: ClassVar[str | None] = None
    # the number of clients of the federation this strategy trains, when another method runs it on a subset of the
    # K clients (PQFed's inner federation: the target and its collaborators); None: all K. FedDyn's 1/K reads it.
    population: int | None = None
    # which model a training client and an unseen client are scored with (see EvalModels); a strategy whose answer
    # depends on its config sets ``self.eval_models`` in ``__init__``. A class that defines ``eval_weights`` or
    # ``test_time_weights`` itself without declaring this gets ``seen="personal"`` / ``unseen="test_time"`` (its own
    # method is then what scores its clients)
    eval_models: ClassVar[EvalModels] = EvalModels("global", "global", "the global model")
    # True: ``aggregate`` reads only each group's sample-weighted mean model (:meth:`mean_groups`), so a sharded round
    # all-reduces those means instead of gathering every client's model. A class that defines ``aggregate`` itself
    # does not inherit a True declaration: it states its own (``flplat check`` compares both aggregates).
    reduces_across_shards: ClassVar[bool] = False

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        # a declaration about a method is not inherited by a class that defines that method itself
        own = vars(cls)
        if "aggregate" in own and "reduces_across_shards" not in own:
            cls.reduces_across_shards = False
        if "eval_models" not in own and own.keys() & {"eval_weights", "test_time_weights"}:
            d = cls.eval_models
            cls.eval_models = EvalModels("personal" if "eval_weights" in own else d.seen,
                                         "test_time" if "test_time_weights" in own else d.unseen,
                                         "its own eval_weights / test_time_weights (not declared)")

    def __init__(self, cfg: Any, info: FederationInfo):
        self.cfg = cfg
        self.info = info

    # ---- checkpoints -----------------------------------------------------------------------------
    # What a strategy carries between rounds outside ``ServerState`` (e.g. FedOpt's hyperparameter schedule,
    # PQFed's inner strategy, anything set in ``init_state``). The default covers every strategy generically:
    # all instance attributes except the config and the federation info (both rebuilt from the config). Override
    # both only for state that cannot be pickled.
    _not_checkpointed: ClassVar[tuple[str, ...]] = ("cfg", "info", "eval_models")

    def state_dict(self) -> dict[str, Any]:
        """The strategy's own state between rounds (pickled into checkpoints with the server state)."""
        return {k: v for k, v in vars(self).items() if k not in self._not_checkpointed}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (on a freshly constructed strategy of the same config)."""
        vars(self).update(d)

    # ---- lifecycle -------------------------------------------------------------------------------
    def init_state(self, init_weights: torch.Tensor, rng: np.random.Generator, ops: FederationOps) -> ServerState:
        return ServerState(weights=init_weights.clone())

    def select(self, state: ServerState, rng: np.random.Generator, ops: FederationOps) -> np.ndarray:
        return sample_uniform(self.info.num_clients, self.info.client_fraction, rng)

    def plan(self, state: ServerState, client: int) -> ClientPlan:
        return ClientPlan(weights=state.weights)

    def plan_round(self, state: ServerState, clients: Sequence[int]) -> list[tuple[int, ClientPlan]]:
        """The round's ``(client, plan)`` jobs: one ``plan`` per selected client by default. A method whose clients
        train several models per round (FedEM's M components) returns several jobs for one client; the results
        come back in the same order."""
        return [(int(k), self.plan(state, int(k))) for k in clients]

    @abstractmethod
    def aggregate(self, state: ServerState, results: list[ClientResult], ops: FederationOps) -> ServerState:
        """Combine the round's client results into the next server state."""

    def sent_mask(self, direction: str) -> torch.Tensor | None:
        """Which entries of a model vector actually travel ``direction`` (``"down"``: a plan's ``weights``, server to
        client; ``"up"``: a result's ``weights``, client to server): a boolean mask over the flat layout, or None for
        all of it. The orchestrator's ``bytes_down`` / ``bytes_up`` count only these entries (what a strategy sends
        besides the model goes in ``ClientPlan.extra_bytes_down`` / ``ClientResult.extra_bytes_up``). The default
        leaves out :attr:`local_prefixes` in both directions; override it for anything else (a part sent one way
        only)."""
        if not self.local_prefixes:
            return None
        return ~self.info.layout.mask(tuple(self.local_prefixes))

    # ---- evaluation ------------------------------------------------------------------------------
    def mean_groups(self, state: ServerState, plans: Sequence[tuple[int, ClientPlan]]) -> list[int] | None:
        """Group ids of the planned clients when ``aggregate`` needs only each group's sample-weighted mean model
        (:attr:`reduces_across_shards`): one group, ``[0, ...]``, by default; a clustered method returns each
        client's cluster. ``None`` when the strategy does not declare it: ``aggregate`` sees each client's own model.

        With groups a sharded executor all-reduces one flattened buffer of per-group weighted sums instead of
        gathering every client's model, and every result arrives with its group's mean as ``weights`` (so
        ``fedavg(results)`` of a group is that mean).
        """
        return [0] * len(plans) if self.reduces_across_shards else None

    def eval_weights(self, state: ServerState, client: int) -> torch.Tensor:
        """The model client ``client`` would use now (with ``eval_models.seen`` = ``global`` or ``cluster``, the
        declared one: ``flplat check`` compares them)."""
        return state.weights

    def global_weights(self, state: ServerState) -> torch.Tensor | None:
        """The single global model, if the method has one (scored on the pooled global test set)."""
        return state.weights

    def unassigned_weights(self, state: ServerState) -> torch.Tensor | None:
        """The model of a client not assigned to a cluster (yet), for clustered methods (``state.assignment`` -1):
        ``state.weights`` by default."""
        return state.weights

    def round_metrics(self, state: ServerState) -> dict[str, float]:
        """Method-specific per-round metrics (e.g. ``tau``), logged with step = round."""
        return {}

    def series(self, state: ServerState) -> dict[str, list[tuple[int, float]]]:
        """Curves over another axis, logged once at the end as metrics with their own steps and plotted
        (e.g. ``{"silhouette_by_k": [(2, 0.41), (3, 0.57), ...]}``)."""
        return {}

    def artifacts(self, state: ServerState) -> dict[str, str]:
        """Text artifacts written at the end of the run, by path (e.g. ``{"clustering/assignment.csv": ...}``)."""
        return {}

    def scatter(self, state: ServerState) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """2-D point sets to plot at the end of the run, by name: ``(points (n, 2), colour labels (n,))``
        (e.g. Flux's client descriptors projected to 2-D, coloured by cluster)."""
        return {}

    def test_time_weights(self, state: ServerState, ops: FederationOps, clients: Sequence[int]
                          ) -> list[torch.Tensor] | None:
        """The model each unseen (test-only, unlabeled) client would use, inferred without its labels (Flux: the
        label-free descriptor's nearest centroid; ATP: an adapted model), for a strategy whose
        ``eval_models.unseen`` is ``test_time``. ``None``: the method has no test-time mechanism (and declares
        which other model its unseen clients are scored with)."""
        return None


class PersonalizedStrategy(Strategy):
    """Base for methods where every client keeps its own model in ``state.personal`` (a compact
    :class:`~flplat.protocol.state.ClientStore`): each trained model is stored back and each client is scored with its
    own. There is no single global model: an unseen client is scored with the prediction ensemble of the trained
    clients' models (``client_ensemble``)."""

    eval_models = EvalModels("personal", "client_ensemble", "the equally weighted prediction ensemble of the trained "
                                                            "training clients' own models")

    def aggregate(self, state: ServerState, results: list[ClientResult], ops: FederationOps) -> ServerState:
        for r in results:
            state.personal.set(r.client, r.weights)
        return state

    def eval_weights(self, state: ServerState, client: int) -> torch.Tensor:
        return state.personal.get(client)

    def global_weights(self, state: ServerState) -> torch.Tensor | None:
        return None


class ClusteredStrategy(Strategy):
    """Base for methods with one model per cluster: ``state.clusters`` is ``(tau, P)``, ``state.assignment[k]``
    the cluster of client k (-1: not assigned yet, such a client uses :meth:`unassigned_weights`)."""

    eval_models = EvalModels("cluster", "cluster_ensemble", "the training-client-weighted prediction ensemble of the "
                                                            "cluster models (Flux App. F.1)")

    def eval_weights(self, state: ServerState, client: int) -> torch.Tensor:
        c = -1 if state.assignment is None else int(state.assignment[client])
        return self.unassigned_weights(state) if c < 0 else state.clusters[c]

    def global_weights(self, state: ServerState) -> torch.Tensor | None:
        return None

    def round_metrics(self, state: ServerState) -> dict[str, float]:
        return {} if state.clusters is None else {"tau": float(state.clusters.shape[0])}

    def artifacts(self, state: ServerState) -> dict[str, str]:
        if state.assignment is None:
            return {}
        rows = "\n".join(f"{k},{int(c)}" for k, c in enumerate(state.assignment))
        return {"clustering/assignment.csv": "client,cluster\n" + rows + "\n"}


TRUE_M = "0: the partition's true number of distributions M (Flux App. E.1)"


def true_m(value: int, info: FederationInfo, key: str) -> int:
    """A number of cluster models: ``value`` when > 0; ``0`` asks for the partition's true number of distributions M
    (``info.num_distributions``), which Flux's protocol gives IFCA, FeSEM, FedEM and FedRC (App. E.1). A partition
    without planted distributions has no M, and more cluster models than clients cannot all be trained: one-line
    ConfigErrors naming ``key``."""
    if value > info.num_clients:
        raise ConfigError(f"{key}={value} is out of range for {info.num_clients} clients; allowed: an integer in "
                          f"[1, partition.num_clients={info.num_clients}] (0: the partition's M)")
    if value > 0:
        return int(value)
    if info.num_distributions > 0:
        return int(info.num_distributions)
    raise ConfigError(f"{key}=0 asks for the partition's number of distributions M, but this partition has none; "
                      "allowed: an integer >= 1, or 0 with partition.name=shift")


def sample_uniform(num_clients: int, fraction: float, rng: np.random.Generator) -> np.ndarray:
    """max(1, round(q·K)) clients uniformly without replacement, sorted."""
    m = max(1, int(round(fraction * num_clients)))
    return np.sort(rng.choice(num_clients, size=m, replace=False))
