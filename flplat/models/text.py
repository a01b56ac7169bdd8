"""Text models of Clust-PSI-PFL (Jimenez-Gutierrez et al., §IV-A-d) over int64 token ids ``(B, L)``.

The paper: "For Sent140, we employ a compact sequence model consisting of an embedding layer, dropout (p=0.5), a
10-unit LSTM (dropout/recurrent dropout 0.2), and a softmax classifier. For Amazon Reviews, we use a small
embedding-based DNN (embedding → flatten → 8-unit ReLU layer → softmax)."

* ``sent140_lstm`` — Embedding(vocab_size, embedding_dim, padding id 0) -> Dropout(``dropout``=0.5) -> LSTM with
  ``lstm_units``=10 units, input dropout ``lstm_dropout``=0.2 and recurrent dropout ``recurrent_dropout``=0.2 ->
  its last hidden state (B, 10) -> linear classifier. "dropout/recurrent dropout" are the Keras LSTM arguments, so
  the LSTM is written out here (torch's ``nn.LSTM`` has no recurrent dropout): one mask per sequence, the same at
  every time step, on the inputs and on the previous hidden state (Keras' variational dropout), gates in Keras'
  order i, f, c, o with one bias. The loop runs over the L positions of the (fixed-length) input, so ``vmap``
  can run it (no data-dependent control flow). The loaders pad at the front (``padding=pre``, as Keras does), so
  the last state follows the real tokens.
* ``amazon_dnn`` — Embedding(vocab_size, embedding_dim) -> Flatten (latent L·embedding_dim) -> Linear(``hidden``=8)
  -> ReLU -> linear classifier.

Not stated in the paper, chosen here: ``embedding_dim`` = 32 for both (a key). The sequence length L is the
data's ``data.<name>.max_length`` (the tokenizer's padding/truncation, flplat/data/text.py): the model reads it
from the input shape, so it is not repeated as a model key (two keys could disagree). ``vocab_size`` = 0 (the
default) means "the dataset's vocabulary": :func:`flplat.experiment.prepare` fills it with ``len(dataset.vocab)``
and the logged config shows the filled value; building the model directly needs it set.

``latent(x)`` is the input of the first fully connected layer: the LSTM's last hidden state for
``sent140_lstm``, the flattened embeddings for ``amazon_dnn``. Token ids arrive as int64 (or as floats holding
integers, e.g. :func:`flplat.models.base.output_size`'s probe); the embedding casts them to ``long``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from flplat.errors import ConfigError
from flplat.models.base import SplitModel, check_dropout, dropout, register_model, require


class TokenEmbedding(nn.Module):
    """``nn.Embedding`` over token ids given as any dtype holding integers ((B, L) -> (B, L, E))."""

    def __init__(self, vocab_size: int, dim: int) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab_size, dim, padding_idx=0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.emb(x.long())


class KerasLSTM(nn.Module):
    """A one-layer LSTM returning its last hidden state, with Keras' ``dropout`` (on the inputs) and
    ``recurrent_dropout`` (on the previous hidden state): one Bernoulli mask per sequence, shared by the time steps
    and the four gates, applied in training mode only. Parameters: ``weight_ih`` (4H, E), ``weight_hh`` (4H, H),
    ``bias`` (4H), gates ordered i, f, c, o; initialised uniform(-1/sqrt(H), 1/sqrt(H)) like ``nn.LSTM``."""

    def __init__(self, input_size: int, hidden: int, p_input: float = 0.0, p_recurrent: float = 0.0) -> None:
        super().__init__()
        self.hidden = int(hidden)
        self.p_input, self.p_recurrent = float(p_input), float(p_recurrent)
        self.weight_ih = nn.Parameter(torch.empty(4 * hidden, input_size))
        self.weight_hh = nn.Parameter(torch.empty(4 * hidden, hidden))
        self.bias = nn.Parameter(torch.empty(4 * hidden))
        bound = 1.0 / math.sqrt(hidden)
        for p in (self.weight_ih, self.weight_hh, self.bias):
            nn.init.uniform_(p, -bound, bound)

    @staticmethod
    def _mask(like: torch.Tensor, p: float) -> torch.Tensor:
        return torch.bernoulli(torch.full_like(like, 1.0 - p)) / (1.0 - p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, steps, _ = x.shape
        h = x.new_zeros(b, self.hidden)
        c = x.new_zeros(b, self.hidden)
        if self.training and self.p_input > 0:
            x = x * self._mask(x[:, :1, :], self.p_input)
        xw = x @ self.weight_ih.t() + self.bias  # (B, L, 4H): the input part of every step at once
        rmask = self._mask(h, self.p_recurrent) if self.training and self.p_recurrent > 0 else None
        for t in range(steps):
            gates = xw[:, t] + (h if rmask is None else h * rmask) @ self.weight_hh.t()
            i, f, g, o = gates.chunk(4, dim=1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
        return h


def _token_length(input_shape: tuple[int, ...]) -> int:
    if len(input_shape) != 1:
        raise ConfigError(f"needs token ids of shape (L,), got input shape {tuple(input_shape)}; use it with a text "
                          "dataset (sent140, amazon_reviews)")
    return int(input_shape[0])


def _check_vocab(cfg, section: str = "model") -> None:
    if int(cfg.vocab_size) < 2:
        raise ConfigError(f"{section}.vocab_size={cfg.vocab_size!r} is not set; allowed: 0 in a config (filled with "
                          "the dataset's vocabulary size by the experiment) or an integer >= 2 when building directly")


# --------------------------------------------------------------------------------------------- sent140_lstm


@dataclass
class Sent140LSTMConfig:
    """``sent140_lstm``: vocabulary (0: the dataset's), embedding width, dropouts and LSTM units (paper values)."""

    vocab_size: int = 0
    embedding_dim: int = 32
    dropout: float = 0.5
    lstm_units: int = 10
    lstm_dropout: float = 0.2
    recurrent_dropout: float = 0.2


class Sent140LSTM(SplitModel):
    """Embedding -> Dropout -> LSTM (last hidden state) -> linear classifier."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, cfg: Sent140LSTMConfig) -> None:
        _token_length(input_shape)
        _check_vocab(cfg)
        e, h = int(cfg.embedding_dim), int(cfg.lstm_units)
        trunk = nn.Sequential(TokenEmbedding(int(cfg.vocab_size), e), dropout(float(cfg.dropout)),
                              KerasLSTM(e, h, float(cfg.lstm_dropout), float(cfg.recurrent_dropout)))
        super().__init__(trunk, nn.Identity(), input_shape, num_classes)


def _validate_text(cfg, section: str) -> None:
    require(cfg.vocab_size == 0 or cfg.vocab_size >= 2, section, "vocab_size", cfg.vocab_size,
            "0 (the dataset's vocabulary) or an integer >= 2")
    require(cfg.embedding_dim >= 1, section, "embedding_dim", cfg.embedding_dim, "an integer >= 1")
    check_dropout(section, "dropout", cfg.dropout)


def _validate_lstm(cfg: Sent140LSTMConfig, section: str) -> None:
    _validate_text(cfg, section)
    require(cfg.lstm_units >= 1, section, "lstm_units", cfg.lstm_units, "an integer >= 1")
    check_dropout(section, "lstm_dropout", cfg.lstm_dropout)
    check_dropout(section, "recurrent_dropout", cfg.recurrent_dropout)


@register_model("sent140_lstm", Sent140LSTMConfig, _validate_lstm)
def build_sent140_lstm(cfg: Sent140LSTMConfig, input_shape: tuple[int, ...], num_classes: int) -> Sent140LSTM:
    return Sent140LSTM(input_shape, num_classes, cfg)


# ----------------------------------------------------------------------------------------------- amazon_dnn


@dataclass
class AmazonDNNConfig:
    """``amazon_dnn``: vocabulary (0: the dataset's), embedding width, the ReLU layer's width (paper: 8), dropout
    after it (not in the paper: 0)."""

    vocab_size: int = 0
    embedding_dim: int = 32
    hidden: int = 8
    dropout: float = 0.0


class AmazonDNN(SplitModel):
    """Embedding -> Flatten -> Linear(hidden) -> ReLU -> linear classifier."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, cfg: AmazonDNNConfig) -> None:
        length = _token_length(input_shape)
        _check_vocab(cfg)
        e = int(cfg.embedding_dim)
        trunk = nn.Sequential(TokenEmbedding(int(cfg.vocab_size), e), nn.Flatten(1))
        dense = nn.Sequential(nn.Linear(length * e, int(cfg.hidden)), nn.ReLU(), dropout(float(cfg.dropout)))
        super().__init__(trunk, dense, input_shape, num_classes)


def _validate_dnn(cfg: AmazonDNNConfig, section: str) -> None:
    _validate_text(cfg, section)
    require(cfg.hidden >= 1, section, "hidden", cfg.hidden, "an integer >= 1")


@register_model("amazon_dnn", AmazonDNNConfig, _validate_dnn)
def build_amazon_dnn(cfg: AmazonDNNConfig, input_shape: tuple[int, ...], num_classes: int) -> AmazonDNN:
    return AmazonDNN(input_shape, num_classes, cfg)
