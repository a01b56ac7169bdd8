"""Text datasets as padded token ids: a word tokenizer, a vocabulary built on the training split only, and the
loaders of Sent140 (Clust-PSI-PFL Table I: "Sent140 [36] Text Sentiment analysis 3 1,600,000") and Amazon reviews
(Table I: "Amazon reviews [37] Text Product classification 6 50,000").

Encoding (``data.max_length``, ``min_freq``, ``max_vocab``, ``padding``, ``truncation``: both datasets' keys)
------------------------------------------------------------------------------------------------------------
:func:`tokenize` lowercases and keeps runs of letters, digits and apostrophes (``[a-z0-9']+``); everything else
separates words. :func:`build_vocab` counts the words of the TRAINING split only (the pool; never the official test
set), keeps those seen at least ``min_freq`` times, most frequent first (ties: alphabetical), at most ``max_vocab``.
Id 0 is padding and id 1 an out-of-vocabulary word, so word ``vocab[i]`` has id ``i`` (``Dataset.vocab``, whose
length is the embedding size a model needs). :func:`encode` pads or truncates every example to ``max_length`` ids,
the padding before (``padding=pre``, Keras' ``pad_sequences`` default, which the authors' code uses) or after the
words, and cuts a long example's start (``truncation=pre``) or end. ``x`` is int64 ``(N, max_length)``.

Sent140 (``data.name=sent140``: ``data.source``, ``labels``)
------------------------------------------------------------
Two file formats: LEAF's JSON (``{"users": [...], "num_samples": [...], "user_data": {user: {"x": [[id, date, query,
user, text], ...], "y": [...]}}}``, ``y`` 0 negative / 1 positive; the ``train/*.json`` + ``test/*.json`` split
directories, else ``all_data/*.json`` as the pool) and the original Sentiment140 CSV
(``training.1600000.processed.noemoticon.csv``: polarity, id, date, query, user, text; latin-1, no header), with
``testdata.manual.2009.06.14.csv`` as the official test set when present. Table I's "3 classes": Sentiment140's
polarity takes the values 0 (negative), 2 (neutral) and 4 (positive), but the 1.6 million training tweets hold only
0 and 4 (the neutral ones are only in the 498-tweet manual test set). ``labels=polarity3`` (the default, Table I's
reading) maps polarity 0/2/4 to classes 0/1/2 (LEAF's 0/1 to 0/2), so class 1 is empty in the training pool;
``labels=binary`` keeps negative 0 / positive 1 and drops the neutral test tweets. The tweet's user becomes the
natural client (``client_ids`` / ``client_ids_test``: one integer per user name, the same in both splits).

Amazon reviews (``data.name=amazon_reviews``: ``data.source``, ``fields``)
-------------------------------------------------------------------------
Table I cites Zhang et al. 2015 [37], whose CSVs (``class,title,text``, no header, classes from 1) have 5 classes
(``amazon_review_full_csv``: 3,000,000 train + 650,000 test) or 2 (``amazon_review_polarity_csv``: 3,600,000 +
400,000): neither has 6 classes or 50,000 examples, and neither is a *product* classification. The one public
Amazon-reviews set that matches "Product classification, 6 classes, 50,000 examples" is the Kaggle "hierarchical
text classification" set (``train_40k.csv`` + ``val_10k.csv``: productId, Title, userId, Helpfulness, Score, Time,
Text, Cat1, Cat2, Cat3; 6 ``Cat1`` product categories), so ``source=categories`` (the default) reads it, with
``val_10k.csv`` (or ``valid_10k.csv``) as the official test set; ``source=full`` / ``polarity`` read Zhang et al.'s
``train.csv`` / ``test.csv`` (classes shifted to start at 0).
"""

from __future__ import annotations

import csv
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from flplat.data.containers import Dataset
from flplat.data.formats import DataFormatError
from flplat.data.leaf import read_leaf_dir
from flplat.data.registry import register_dataset
from flplat.data.sources import find_data
from flplat.errors import check_choice, check_range

PAD, OOV = 0, 1
_WORD = re.compile(r"[a-z0-9']+")

SENT140_CSV = "training.1600000.processed.noemoticon.csv"
SENT140_TEST_CSV = "testdata.manual.2009.06.14.csv"
SENT140_WHERE = ("LEAF's sent140 JSON (github.com/TalwalkarLab/leaf, data/sent140) or Sentiment140's "
                 "trainingandtestdata.zip (help.sentiment140.com/for-students)")
AMAZON_WHERE = {
    "categories": "Kaggle dataset kashnitsky/hierarchical-text-classification (train_40k.csv, val_10k.csv)",
    "full": "amazon_review_full_csv.tgz of Zhang et al. 2015 (the Xiang Zhang Google Drive / fast.ai mirror)",
    "polarity": "amazon_review_polarity_csv.tgz of Zhang et al. 2015 (the Xiang Zhang Google Drive / fast.ai mirror)",
}
AMAZON_CATEGORIES = ["baby products", "beauty", "grocery gourmet food", "health personal care", "pet supplies",
                     "toys games"]


@dataclass
class TextConfig:
    """The encoding keys of every text dataset: lowercase word tokens, a vocabulary built on the training split
    only, ids padded / truncated to ``max_length`` (0 = padding, 1 = out of vocabulary)."""

    max_length: int = 25  # tokens per example (the Clust-PSI-PFL authors' Sent140 length)
    min_freq: int = 1  # a word enters the vocabulary when it occurs at least this often in the training split
    max_vocab: int = 100000  # at most this many words (most frequent first); 0: no limit
    padding: str = "pre"  # pre | post: where the padding ids go (pre: Keras' pad_sequences default)
    truncation: str = "pre"  # pre | post: which end of a long example is cut off

    def check(self) -> None:
        check_range(self.max_length >= 1, "data.max_length", self.max_length, "an integer >= 1")
        check_range(self.min_freq >= 1, "data.min_freq", self.min_freq, "an integer >= 1")
        check_range(self.max_vocab >= 0, "data.max_vocab", self.max_vocab, "an integer >= 0 (0: no limit)")
        check_choice("data.padding", self.padding, ("pre", "post"))
        check_choice("data.truncation", self.truncation, ("pre", "post"))


@dataclass
class Sent140Config(TextConfig):
    """``sent140``: LEAF's JSON or the original Sentiment140 CSV."""

    source: str = "auto"  # auto (LEAF JSON when present, else the CSV) | leaf | csv
    labels: str = "polarity3"  # polarity3: 0/2/4 -> 0/1/2 (3 classes, Table I) | binary: negative 0, positive 1

    def check(self) -> None:
        super().check()
        check_choice("data.source", self.source, ("auto", "csv", "leaf"))
        check_choice("data.labels", self.labels, ("binary", "polarity3"))


@dataclass
class AmazonConfig(TextConfig):
    """``amazon_reviews``."""

    source: str = "categories"  # categories (6 product classes, 40k + 10k) | full (5 stars) | polarity (2)
    fields: str = "text"  # text | title_text (the title, a space, then the text)

    def check(self) -> None:
        super().check()
        check_choice("data.source", self.source, ("categories", "full", "polarity"))
        check_choice("data.fields", self.fields, ("text", "title_text"))


# ---------------------------------------------------------------------------------------------------- encoding


def tokenize(text: str) -> list[str]:
    """Lowercase word tokens: runs of ``[a-z0-9']`` (everything else separates words)."""
    return _WORD.findall(text.lower())


def build_vocab(token_lists: Iterable[Sequence[str]], min_freq: int = 1, max_vocab: int = 0) -> list[str]:
    """``["<pad>", "<unk>", words...]``: words seen at least ``min_freq`` times, most frequent first (ties:
    alphabetical), at most ``max_vocab`` words (0: no limit)."""
    counts = Counter(w for tokens in token_lists for w in tokens)
    words = sorted((w for w, c in counts.items() if c >= min_freq), key=lambda w: (-counts[w], w))
    if max_vocab > 0:
        words = words[:max_vocab]
    return ["<pad>", "<unk>", *words]


def encode(token_lists: Iterable[Sequence[str]], vocab: Sequence[str], max_length: int, padding: str = "pre",
           truncation: str = "pre") -> torch.Tensor:
    """int64 ``(N, max_length)`` ids of ``vocab`` (unknown words: 1), padded with 0 and truncated as documented."""
    index = {w: i for i, w in enumerate(vocab)}
    token_lists = list(token_lists)
    out = np.full((len(token_lists), max_length), PAD, dtype=np.int64)
    for row, tokens in zip(out, token_lists):
        ids = [index.get(w, OOV) for w in tokens]
        if len(ids) > max_length:
            ids = ids[len(ids) - max_length:] if truncation == "pre" else ids[:max_length]
        if ids and padding == "pre":
            row[max_length - len(ids):] = ids
        elif ids:
            row[:len(ids)] = ids
    return torch.from_numpy(out)


def text_dataset(cfg: Any, name: str, train_texts: list[str], y_train, num_classes: int,
                 test_texts: list[str] | None = None, y_test=None, class_names: list[str] | None = None,
                 users: tuple[list[str], list[str] | None] | None = None) -> Dataset:
    """Tokenize, build the vocabulary on ``train_texts`` only, encode both splits; ``users`` (names per example)
    become ``client_ids`` / ``client_ids_test`` (one integer per distinct name, shared by the two splits)."""
    t = cfg
    train_tokens = [tokenize(s) for s in train_texts]
    vocab = build_vocab(train_tokens, int(t.min_freq), int(t.max_vocab))

    def enc(tokens):
        return encode(tokens, vocab, int(t.max_length), str(t.padding), str(t.truncation))

    ds = Dataset(name=name, x_train=enc(train_tokens), y_train=torch.as_tensor(np.asarray(y_train, np.int64)),
                 num_classes=num_classes, class_names=class_names, vocab=vocab)
    if test_texts is not None:
        ds.x_test = enc([tokenize(s) for s in test_texts])
        ds.y_test = torch.as_tensor(np.asarray(y_test, np.int64))
    if users is not None:
        train_users, test_users = users
        names = sorted(set(train_users) | set(test_users or []))
        ids = {u: i for i, u in enumerate(names)}
        ds.client_ids = np.fromiter((ids[u] for u in train_users), np.int64, len(train_users))
        if test_users is not None:
            ds.client_ids_test = np.fromiter((ids[u] for u in test_users), np.int64, len(test_users))
    return ds


# ----------------------------------------------------------------------------------------------------- Sent140


def _read_sent140_csv(path: Path) -> tuple[list[int], list[str], list[str]]:
    """(polarity, user, text) per row of a Sentiment140 CSV (latin-1, no header)."""
    pol, users, texts = [], [], []
    with open(path, encoding="latin-1", newline="") as fh:
        for i, row in enumerate(csv.reader(fh)):
            if len(row) != 6 or row[0] not in ("0", "2", "4"):
                raise DataFormatError(f"{path}: row {i + 1} is not 'polarity,id,date,query,user,text' with "
                                      f"polarity 0/2/4: {row[:2]!r}")
            pol.append(int(row[0]))
            users.append(row[4])
            texts.append(row[5])
    return pol, users, texts


def _leaf_sent140(pool: dict, path: Path) -> tuple[list[int], list[str], list[str]]:
    """LEAF's Sent140 JSON as (polarity 0/4, user, text) rows (LEAF: y 0 negative, 1 positive)."""
    pol, users, texts = [], [], []
    for user, x, y in pool["rows"]:
        if not isinstance(x, list) or len(x) < 5 or y not in (0, 1):
            raise DataFormatError(f"{path}: a LEAF sent140 sample is [id, date, query, user, text] with y 0/1")
        pol.append(4 * int(y))
        users.append(user)
        texts.append(str(x[4]))
    return pol, users, texts


def _find_sent140(d: Path, source: str):
    if source in ("auto", "leaf"):
        leaf = read_leaf_dir(d, ("data",))
        if leaf is not None:
            return "leaf", leaf
    if source in ("auto", "csv") and (d / SENT140_CSV).is_file():
        test = d / SENT140_TEST_CSV
        return "csv", (d / SENT140_CSV, test if test.is_file() else None)
    return None


@register_dataset("sent140", Sent140Config)
def load_sent140(cfg: Any, seed: int = 0) -> Dataset:
    """Sent140 from LEAF's JSON or the Sentiment140 CSV: token ids (N, L), users as natural clients."""
    source = str(cfg.source)
    needed = {"leaf": "LEAF train/*.json + test/*.json or all_data/*.json",
              "csv": SENT140_CSV}.get(source, f"LEAF's JSON or {SENT140_CSV}")
    kind, found = find_data(cfg, "sent140", "sent140", lambda d: _find_sent140(d, source), needed, SENT140_WHERE)
    if kind == "leaf":
        train = _leaf_sent140(found["train"], found["path"])
        test = _leaf_sent140(found["test"], found["path"]) if found["test"] is not None else None
    else:
        train = _read_sent140_csv(found[0])
        test = _read_sent140_csv(found[1]) if found[1] is not None else None
    binary = cfg.labels == "binary"

    def labels(rows):
        keep = [i for i, p in enumerate(rows[0]) if not (binary and p == 2)]
        y = [rows[0][i] // 4 if binary else rows[0][i] // 2 for i in keep]
        return y, [rows[1][i] for i in keep], [rows[2][i] for i in keep]

    y_tr, u_tr, t_tr = labels(train)
    y_te, u_te, t_te = labels(test) if test is not None else (None, None, None)
    names = ["negative", "positive"] if binary else ["negative", "neutral", "positive"]
    return text_dataset(cfg, "sent140", t_tr, y_tr, len(names), t_te, y_te, names, users=(u_tr, u_te))


# ---------------------------------------------------------------------------------------------- Amazon reviews


def _read_zhang_csv(path: Path, num_classes: int, fields: str) -> tuple[list[str], list[int]]:
    texts, y = [], []
    with open(path, encoding="utf-8", newline="") as fh:
        for i, row in enumerate(csv.reader(fh)):
            if len(row) != 3 or not row[0].isdigit() or not 1 <= int(row[0]) <= num_classes:
                raise DataFormatError(f"{path}: row {i + 1} is not 'class,title,text' with class 1..{num_classes}")
            y.append(int(row[0]) - 1)
            texts.append(f"{row[1]} {row[2]}" if fields == "title_text" else row[2])
    return texts, y


def _read_categories_csv(path: Path, fields: str) -> tuple[list[str], list[int]]:
    texts, y = [], []
    with open(path, encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        missing = {"Title", "Text", "Cat1"} - set(reader.fieldnames or [])
        if missing:
            raise DataFormatError(f"{path}: missing column(s) {', '.join(sorted(missing))} (need Title, Text, Cat1)")
        for i, row in enumerate(reader):
            if row["Cat1"] not in AMAZON_CATEGORIES:
                raise DataFormatError(f"{path}: row {i + 2} has Cat1={row['Cat1']!r}; expected one of "
                                      f"{', '.join(AMAZON_CATEGORIES)}")
            y.append(AMAZON_CATEGORIES.index(row["Cat1"]))
            texts.append(f"{row['Title']} {row['Text']}" if fields == "title_text" else row["Text"])
    return texts, y


def _find_amazon(d: Path, source: str):
    if source == "categories":
        test = next((d / n for n in ("val_10k.csv", "valid_10k.csv") if (d / n).is_file()), None)
        return (d / "train_40k.csv", test) if (d / "train_40k.csv").is_file() and test else None
    sub = {"full": "amazon_review_full_csv", "polarity": "amazon_review_polarity_csv"}[source]
    for base in (d, d / sub):
        if (base / "train.csv").is_file() and (base / "test.csv").is_file():
            return base / "train.csv", base / "test.csv"
    return None


@register_dataset("amazon_reviews", AmazonConfig)
def load_amazon(cfg: Any, seed: int = 0) -> Dataset:
    """Amazon reviews (6 product categories by default, Clust-PSI-PFL Table I): token ids (N, L)."""
    source, fields = str(cfg.source), str(cfg.fields)
    needed = "train_40k.csv and val_10k.csv" if source == "categories" else "train.csv and test.csv"
    train, test = find_data(cfg, "amazon_reviews", "amazon_reviews", lambda d: _find_amazon(d, source), needed,
                            AMAZON_WHERE[source])
    if source == "categories":
        (t_tr, y_tr), (t_te, y_te) = _read_categories_csv(train, fields), _read_categories_csv(test, fields)
        names = list(AMAZON_CATEGORIES)
    else:
        c = 5 if source == "full" else 2
        (t_tr, y_tr), (t_te, y_te) = _read_zhang_csv(train, c, fields), _read_zhang_csv(test, c, fields)
        names = [f"{i} star{'s' if i > 1 else ''}" for i in range(1, 6)] if c == 5 else ["negative", "positive"]
    return text_dataset(cfg, "amazon_reviews", t_tr, y_tr, len(names), t_te, y_te, names)
