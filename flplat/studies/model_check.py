"""``flplat check --model NAME``: a registered model (built-in or a plugin's) held to what the platform needs of it.

Each property is one function on a :class:`ModelTarget` -- the model built with its defaults (plus
:data:`MODEL_CHECK_OVERRIDES` for a built-in that needs a value there is no default for, then the user's
``model.KEY=VALUE`` overrides) for :data:`NUM_CLASSES` classes and the first of :data:`SHAPES` it accepts (or
``--input-shape``), on a batch of inputs holding 0s and 1s (valid pixels, features and token ids alike):

* ``build`` -- it builds, as a :class:`~flplat.models.base.SplitModel`;
* ``split`` -- ``features(x)`` is a flat ``(B, D)`` representation, ``head`` is the final linear layer ``D -> C``
  (``model(x) == head(features(x))``, and every parameter belongs to ``features`` or ``head``), and ``latent(x)`` is
  ``(B, latent_dim)``: what FedRep, CReFF and Flux's descriptors rely on;
* ``init`` -- the same seed gives the same initial weights (a model drawing from its own generator breaks every
  run's reproducibility);
* ``vectorize`` -- clients with this model can be trained and scored as stacked groups
  (:func:`~flplat.maths.stacked.stack_reason`, :func:`~flplat.maths.stacked.probe`), or the reason they cannot
  (then they train with the per-client loop: a PASS that says so).

The test suite runs these over the whole model registry (tests/test_model_check.py), as it runs ``flplat check`` over
the algorithm registry.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import torch
from torch import nn

from flplat.errors import ConfigError
from flplat.studies.conformance import Result

#: what a built-in model needs beyond its defaults on the check's input: the text models' vocabulary (0 means
#: "the dataset's", which a check without data does not have)
MODEL_CHECK_OVERRIDES: dict[str, dict] = {"sent140_lstm": {"vocab_size": 50}, "amazon_dnn": {"vocab_size": 50}}
#: input shapes tried in order (images: grey 28 x 28, colour 32 x 32; sequences / feature vectors: 20)
SHAPES = ((1, 28, 28), (3, 32, 32), (20,))
NUM_CLASSES = 5
BATCH = 4


class ModelTarget:
    """A registered model under check: its ``model`` section and the input shape it is built for."""

    def __init__(self, name: str, overrides: Sequence[str] = (), input_shape: Sequence[int] | None = None):
        from omegaconf import OmegaConf

        from flplat.models import MODELS
        from flplat.plugins import load_plugins

        load_plugins()
        if name not in MODELS:
            raise ConfigError(f"model {name!r} is not registered; allowed: {', '.join(sorted(MODELS))}")
        bad = [o for o in overrides if not o.startswith("model.") or "=" not in o]
        if bad:
            raise ConfigError(f"{bad[0]!r}: flplat check --model takes model.KEY=VALUE overrides")
        given = OmegaConf.to_container(OmegaConf.from_dotlist(list(overrides))).get("model", {})
        self.name = name
        self.section = {"name": name, **MODEL_CHECK_OVERRIDES.get(name, {}), **given}
        self.shapes = [tuple(int(s) for s in input_shape)] if input_shape else list(SHAPES)
        self.shape: tuple[int, ...] | None = None
        self._model: nn.Module | None = None

    def model(self) -> nn.Module:
        """The model built with seed 0 (once)."""
        if self._model is None:
            self._model = self.build()
        return self._model

    def build(self, seed: int = 0) -> nn.Module:
        """The model for the first accepted input shape, its weights drawn with ``seed`` (the caller's global
        generator untouched)."""
        from flplat.models import build_model

        errors = []
        for shape in [self.shape] if self.shape else self.shapes:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                try:
                    model = build_model(self.section, shape, NUM_CLASSES)
                except ConfigError as e:
                    errors.append(f"{shape}: {e}")
                    continue
            self.shape = shape
            return model.eval()
        raise ConfigError(f"model {self.name!r} builds for none of the input shapes {self.shapes} ({errors[-1]}); "
                          "give one with --input-shape")

    def inputs(self) -> torch.Tensor:
        g = torch.Generator().manual_seed(0)
        return torch.randint(0, 2, (BATCH, *self.shape), generator=g).float()


def _flat(model: nn.Module) -> torch.Tensor:
    return torch.cat([t.detach().reshape(-1).float() for t in model.state_dict().values() if t.is_floating_point()])


def check_build(t: ModelTarget) -> Result:
    from flplat.models import SplitModel

    model = t.model()
    if not isinstance(model, SplitModel):
        return Result("build", False, f"builds a {type(model).__name__}, not a SplitModel (features + head)")
    n = sum(p.numel() for p in model.parameters())
    return Result("build", True, f"{type(model).__name__} for input {t.shape}, {NUM_CLASSES} classes: {n} parameters")


def check_split(t: ModelTarget) -> Result:
    model, x = t.model(), t.inputs()
    head = getattr(model, "head", None)
    if not isinstance(head, nn.Linear) or head.out_features != NUM_CLASSES:
        return Result("split", False, f"head is {type(head).__name__}, not a Linear layer to {NUM_CLASSES} classes")
    with torch.no_grad():
        z, out, lat = model.features(x), model(x), model.latent(x)
    if z.shape != (BATCH, head.in_features):
        return Result("split", False, f"features(x) has shape {tuple(z.shape)}, the head takes (B, {head.in_features})")
    with torch.no_grad():
        direct = head(z)
    if out.shape != direct.shape or not torch.allclose(out, direct, rtol=1e-5, atol=1e-6):
        return Result("split", False, "model(x) != head(features(x)): the head is not the final layer")
    body = {id(p) for p in model.features.parameters()} | {id(p) for p in head.parameters()}
    stray = [n for n, p in model.named_parameters() if id(p) not in body]
    if stray:
        return Result("split", False, f"parameter {stray[0]} belongs to neither features nor head")
    if lat.dim() != 2 or lat.shape[0] != BATCH:
        return Result("split", False, f"latent(x) has shape {tuple(lat.shape)}, not (B, latent_dim)")
    return Result("split", True, f"features -> (B, {head.in_features}), head Linear {head.in_features} -> "
                                 f"{NUM_CLASSES}, latent (B, {lat.shape[1]})")


def check_init(t: ModelTarget) -> Result:
    a, b = _flat(t.build(seed=3)), _flat(t.build(seed=3))
    if a.shape != b.shape or not torch.equal(a, b):
        return Result("init", False, "the same seed gives different initial weights (does the model draw from a "
                                     "generator of its own?)")
    return Result("init", True, f"the same seed gives the same {a.numel()} initial values")


def check_vectorize(t: ModelTarget) -> Result:
    from flplat.maths.stacked import StackedForward, probe, stack_reason
    from flplat.protocol.state import ParamLayout

    model, x = t.model(), t.inputs()
    reason = stack_reason(model)
    if reason is None:
        layout = ParamLayout(model)
        forward = StackedForward(model, layout.names, randomness="different")
        reason = probe(forward, model, layout.tensors, x[:3], train=True)[0]
    if reason is not None:
        return Result("vectorize", True, f"not vectorisable, clients train with the per-client loop: {reason}")
    return Result("vectorize", True, "vectorisable: vmap over stacked copies trains and matches the module")


MODEL_PROPERTIES: dict[str, Callable[[ModelTarget], Result]] = {
    "build": check_build,
    "split": check_split,
    "init": check_init,
    "vectorize": check_vectorize,
}


def check_model(name: str, overrides: Sequence[str] = (), input_shape: Sequence[int] | None = None,
                only: Sequence[str] | None = None, report: Callable[[Result], None] | None = None) -> list[Result]:
    """Run the model properties (or those ``only``) on the registered model ``name``. Bad name, override or
    property: ConfigError; a property that raises fails with the exception's first line."""
    bad = [p for p in only or () if p not in MODEL_PROPERTIES]
    if bad:
        raise ConfigError(f"--only={','.join(bad)} unknown; allowed: {', '.join(MODEL_PROPERTIES)}")
    t = ModelTarget(name, overrides, input_shape)
    results = []
    for prop in [p for p in MODEL_PROPERTIES if not only or p in only]:
        t0 = time.perf_counter()
        try:
            r = MODEL_PROPERTIES[prop](t)
        except Exception as e:  # noqa: BLE001  (a model that cannot be built or run fails the property)
            text = str(e).strip().splitlines()
            r = Result(prop, False, f"{type(e).__name__}: {text[0] if text else ''}")
        r.seconds = time.perf_counter() - t0
        results.append(r)
        if report:
            report(r)
    return results
