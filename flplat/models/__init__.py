"""Model registry: ``MODELS[name] -> ModelSpec(name, Config, build, validate_config)`` and :func:`build_model`.

Architectures follow the papers the platform reproduces (PLATFORM.md §4): ``logreg`` (ACSIncome), ``mlp3x500``
(Serengeti), ``fmnist_cnn`` and ``cifar_cnn`` (Clust-PSI-PFL §IV-A-d), ``lenet5`` (Flux's MNIST/FMNIST/CIFAR-10
backbone), ``resnet9`` (Flux's CIFAR-100/CheXpert/Office-Home backbone), ``dapfl_cnn10``/``dapfl_cnn100`` (DA-PFL's
CIFAR CNNs, FedRep's sizes), ``vgg19`` (CAFA's CIFAR-10 network, the authors' batch-norm form), ``pqfed_cnn``
(PQFed's 2-conv MNIST / CIFAR-10 CNN), ``sent140_lstm``/``amazon_dnn`` (Clust-PSI-PFL's text models) and a small
``mlp`` for ``digits``/``synthetic``. Every model is a :class:`SplitModel` with an explicit ``features`` body, a linear
``head`` and a ``latent`` hook (see :mod:`flplat.models.base`).
"""

from flplat.models import cnn, mlp, resnet, text, vgg  # noqa: F401  (importing registers the models)
from flplat.models.base import (
    MODELS,
    FeatureExtractor,
    ModelSpec,
    SplitModel,
    build_model,
    output_size,
    register_model,
)
from flplat.models.cnn import CIFARCNN, FMNISTCNN, CIFARCNNConfig, FMNISTCNNConfig, LeNet5, LeNet5Config
from flplat.models.mlp import MLP, LogisticRegression, LogRegConfig, MLP3x500Config, MLPConfig

__all__ = [
    "CIFARCNN",
    "FMNISTCNN",
    "MLP",
    "MODELS",
    "CIFARCNNConfig",
    "FMNISTCNNConfig",
    "FeatureExtractor",
    "LeNet5",
    "LeNet5Config",
    "LogRegConfig",
    "LogisticRegression",
    "MLP3x500Config",
    "MLPConfig",
    "ModelSpec",
    "SplitModel",
    "build_model",
    "output_size",
    "register_model",
]
