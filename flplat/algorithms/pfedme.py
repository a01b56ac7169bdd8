"""pFedMe — Dinh, Tran, Nguyen, "Personalized Federated Learning with Moreau Envelopes", NeurIPS 2020
(Algorithm 1).

Each client minimises the Moreau envelope of its loss, F_i(w) = min_θ f_i(θ) + (λ/2)‖θ − w‖² (Eq. 2–3): its
personalised model θ_i solves the inner problem around its local copy w of the global model. Per local round
(Algorithm 1: "sample a fresh mini-batch D_i ... and minimize h̃_i(θ_i; w_{i,r}, D_i)"; one local round per
minibatch of the client's epochs, E = ``federation.local_epochs``):

* inner problem on that ONE minibatch: θ ← θ − η_p ∇[f_i(θ; D_i) + (λ/2)‖θ − w‖²] for K steps (``inner_steps``,
  personal learning rate η_p = ``personal_lr``), θ warm-started from the previous local round's θ (the authors'
  ``UserpFedMe.train`` and PFLlib's ``clientpFedMe.train`` loop ``for i in range(K)`` over one batch);
* local model update (after the K inner steps): w ← w − ηλ(w − θ) (η = ``lr``, Eq. 8), done by a hook that keeps w
  and sends it back as ``extra["local"]``;

and the server sets w_{t+1} = (1 − β) w_t + β · mean_i w_i over the sampled clients (β = ``beta``; the paper's
mean is uniform, ``weighting: uniform``; ``samples`` weights by n_i). θ_i is kept per client (a
:class:`~flplat.protocol.state.ClientStore`) and is the model the client is evaluated with (the global w until it
has one; an unseen client, never trained, is scored with the global w, as pFedMe's "GM").

The inner solver (``inner_optimizer``). ``"sgd"`` (default): plain gradient steps with η_p, whatever
``federation.optimizer`` is — Algorithm 1's inner solve and the authors' ``pFedMeOptimizer`` (p ← p − η_p(∇f +
λ(p − w) + μp)) have no momentum and no other state. With a federation optimizer of momentum 0.9 (Flux's protocol)
and η_p·λ = 0.1·15 = 1.5 > 1 the proximal part alone maps θ − w to (1 − η_pλ)(θ − w) = −0.5(θ − w) per plain step,
which converges, but momentum turns that overshoot into growing oscillations. Along a direction of loss curvature h
a plain step maps θ − θ* by 1 − η_p(λ + h), so it is stable only while h < 2/η_p − λ (= 5 at the defaults): LeNet-5
under Flux's protocol exceeds that on some cells and diverges (docs/results.md, "pFedMe under Flux's protocol").
``"federation"`` (opt-in): the federation's optimizer (the earlier flplat behaviour). ``inner_weight_decay`` is the
authors' μ (their code's default 0.001; not in the paper's Algorithm 1, so 0 here).

``inner_batch``: ``"same"`` (default, the paper and the authors' code) K steps on one minibatch; ``"fresh"`` (opt-in,
the earlier flplat behaviour) a new minibatch every inner step, so the K inner steps see K consecutive minibatches;
with ``scale_epochs`` (default, read only then) the local epochs are multiplied by K, so the number of local-model
updates per round stays E·(batches).

Reduction: K = 1, η = 1/λ, β = 1, ``weighting: samples`` and ``inner_optimizer: federation`` make w ← θ after every
step, i.e. FedAvg.

Settings under Flux's protocol (seed 003). The defaults are pFedMe's own MNIST settings (λ 15, K 5, η 0.005, η_p 0.1),
which Flux does not state it used and which barely train in Flux's 10 rounds. Flux's tables therefore have two pFedMe
rows: "pFedMe (its paper's settings)" sets these defaults explicitly, and "pFedMe" takes the λ, η, η_p that
``flplat tune`` chose on the validation split under Flux's protocol: MNIST P(Y) level 5 at the reduced scale, seed 0,
grid λ ∈ {1, 15} × η ∈ {0.005, 0.05, 0.3} × η_p ∈ {0.05, 0.1} (configs/search_spaces/flux_pfedme.yaml), chosen
λ 15, η 0.3, η_p 0.05 (validation accuracy 92.0 %; pFedMe's own point 22.9 %; λ 15, η 0.3, η_p 0.1 diverges). The
point, the command (``flplat tune configs/flux/table1/mnist_label_l5.yaml --space
configs/search_spaces/flux_pfedme.yaml algorithm.name=pfedme partition.samples_per_client=500
federation.optimizer.lr=0.03``) and every grid point's value are in configs/flux/pfedme_tuned.yaml, which the
"pFedMe" rows read; docs/results.md, "pFedMe under Flux's protocol".

PFLlib's pFedMe (TsingZ0/PFLlib ``serverpFedMe`` / ``clientpFedMe``), a likely source of other papers' pFedMe
numbers, differs in what it scores. ``pFedMeOptimizer.step`` returns ``group['params']``, the model's own parameters,
so the client's ``personalized_params`` alias the model, and ``set_parameters`` loads the global model into it before
``evaluate_personalized``. Its "personalised" accuracy is therefore the global model's on each client's data (pooled
over clients, the best round's). Its ``--beta`` defaults to 0.0, and ``beta_aggregate_parameters`` sets
w = (1 − β)·w_prev + β·mean, so with the default the global model never leaves its initialisation. flplat scores
each client's θ_i and uses β = 1 (the paper's plain mean). A PFLlib number and a flplat number are not the same
quantity.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from flplat.api import (
    ClientPlan,
    ConfigError,
    EvalModels,
    LocalHook,
    ServerState,
    StackedHook,
    Strategy,
    param_choice,
    register_algorithm,
    stack,
    weighted_mean,
)

WEIGHTING = ("uniform", "samples")
INNER_BATCH = ("same", "fresh")
INNER_OPTIMIZER = ("sgd", "federation")


class MoreauEnvelope(LocalHook):
    """Adds (λ/2)‖θ − w‖² to the loss and moves the local model w towards θ every K steps: w ← w − ηλ(w − θ)."""

    def __init__(self, lam: float, lr: float, inner_steps: int):
        self.lam, self.lr, self.inner_steps = lam, lr, inner_steps

    def setup(self, ctx):
        self._w = [p.detach().clone() for p in ctx.params]
        self._step = 0

    def loss(self, ctx):
        return self.functional_loss(ctx.params)

    def functional_loss(self, params):
        return 0.5 * self.lam * sum(((p - w) ** 2).sum() for p, w in zip(params, self._w))

    def after_step(self, ctx):
        self._step += 1
        if self._step % self.inner_steps == 0:
            with torch.no_grad():  # w + ηλ(θ − w), exact θ when ηλ = 1
                torch._foreach_lerp_(self._w, [p.detach() for p in ctx.params], self.lr * self.lam)

    def finalize(self, ctx):
        vec = ctx.layout.flatten().to(ctx.params[0].device)  # buffers as trained; parameters replaced by w
        for view, w in zip(ctx.param_views(vec), self._w):
            view.copy_(w)
        return {"local": vec.cpu()}


class StackedEnvelope(StackedHook):
    """:class:`MoreauEnvelope` for a group of vectorised clients: the local models w as ``(G, ...)`` tensors, the
    proximal term per client, w ← w + ηλ(θ − w) after every K-th step (the K inner steps of one batch are the
    group's steps K·j .. K·j + K − 1, the same for every live client)."""

    def __init__(self, hooks, ctx):
        super().__init__(hooks, ctx)
        h = hooks[0]
        if any((o.lam, o.lr, o.inner_steps) != (h.lam, h.lr, h.inner_steps) for o in hooks):
            raise ValueError("StackedEnvelope: the clients of a group must share pFedMe's λ, η and K")
        self.lam, self.rate, self.inner_steps = h.lam, h.lr * h.lam, h.inner_steps
        self.w = [p.clone() for p in ctx.params]

    def loss(self, params):
        g = params[0].shape[0]
        return 0.5 * self.lam * sum(((p - w[:g]) ** 2).flatten(1).sum(1) for p, w in zip(params, self.w))

    def after_step(self, step):
        if (step.step + 1) % self.inner_steps == 0:
            with torch.no_grad():
                torch._foreach_lerp_([w[:step.live] for w in self.w], step.params, self.rate)

    def finalize(self, weights):
        local = self.ctx.with_params(weights, self.w)
        return [{"local": local[g].clone().cpu()} for g in range(len(self.hooks))]


MoreauEnvelope.Stacked = StackedEnvelope


@register_algorithm
class PFedMe(Strategy):
    name = "pfedme"
    eval_models = EvalModels("personal", "global", "the global model w (pFedMe's GM)")

    @dataclass(frozen=True)
    class Config:
        lam: float = 15.0  # λ, the Moreau-envelope regularisation
        inner_steps: int = 5  # K
        personal_lr: float = 0.1  # η_p, the inner (personalised) learning rate (the authors' MNIST setting)
        lr: float = 0.005  # η, the local-model learning rate
        beta: float = 1.0  # server mixing β
        weighting: str = "uniform"  # server mean over clients: uniform (paper) | samples
        inner_batch: str = "same"  # same: K inner steps on one minibatch (paper) | fresh: a new minibatch per step
        inner_optimizer: str = "sgd"  # sgd: plain gradient steps (paper, authors' code) | federation: its optimizer
        inner_weight_decay: float = 0.0  # μ of the authors' pFedMeOptimizer (their default 0.001); sgd only
        scale_epochs: bool = True  # inner_batch=fresh: local epochs × K (K inner steps per local-model update)

    @staticmethod
    def validate_config(cfg, section: str) -> None:
        for key in ("lam", "personal_lr", "lr", "beta"):
            if not getattr(cfg, key) > 0:
                raise ConfigError(f"{section}.{key}={getattr(cfg, key)!r} is out of range; allowed: a number > 0")
        if cfg.inner_steps < 1:
            raise ConfigError(f"{section}.inner_steps={cfg.inner_steps!r} is out of range; allowed: an integer >= 1")
        param_choice(section, cfg, "weighting", WEIGHTING)
        param_choice(section, cfg, "inner_batch", INNER_BATCH)
        param_choice(section, cfg, "inner_optimizer", INNER_OPTIMIZER)
        if cfg.inner_weight_decay < 0:
            raise ConfigError(f"{section}.inner_weight_decay={cfg.inner_weight_decay!r} is out of range; allowed: a "
                              "number >= 0")
        if cfg.inner_weight_decay > 0 and cfg.inner_optimizer != "sgd":
            raise ConfigError(f"{section}.inner_weight_decay={cfg.inner_weight_decay!r} needs {section}."
                              "inner_optimizer=sgd (the federation optimizer has its own weight_decay)")

    def init_state(self, init_weights, rng, ops):
        return ServerState(weights=init_weights.clone(), personal=self.info.client_store())

    def plan(self, state, client):
        cfg = self.cfg
        same = cfg.inner_batch == "same"
        epochs = self.info.local_epochs * cfg.inner_steps if cfg.scale_epochs and not same else None
        opt = ({"name": "sgd", "momentum": 0.0, "weight_decay": cfg.inner_weight_decay}
               if cfg.inner_optimizer == "sgd" else None)
        return ClientPlan(weights=state.weights, hooks=(MoreauEnvelope(cfg.lam, cfg.lr, cfg.inner_steps),),
                          lr=cfg.personal_lr, epochs=epochs, batch_steps=cfg.inner_steps if same else 1,
                          optimizer=opt)

    def aggregate(self, state, results, ops):
        if not results:
            return state
        local = torch.stack([r.extra["local"].to(state.weights.device) for r in results])
        _, n = stack(results)
        coef = n if self.cfg.weighting == "samples" else torch.ones_like(n)
        mean = weighted_mean(local, coef.to(local.device))
        state.weights = mean if self.cfg.beta == 1 else (1 - self.cfg.beta) * state.weights + self.cfg.beta * mean
        for r in results:
            state.personal.set(r.client, r.weights)
        return state

    def eval_weights(self, state, client):
        return state.personal.get(client) if state.personal.has(client) else state.weights
