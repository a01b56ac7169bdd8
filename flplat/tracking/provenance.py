"""What code made a run: its *code identity*, recorded as tags on every run (``flplat run``, the runs of ``sweep``,
``tune`` and ``reproduce`` and their parent runs), so that a study never reuses a run of other code silently.

:class:`CodeIdentity` is one small, serialisable structure (:meth:`~CodeIdentity.to_tags` /
:meth:`~CodeIdentity.from_tags` for MLflow, :meth:`~CodeIdentity.to_dict` / :meth:`~CodeIdentity.from_dict` for
JSON records such as ``reproduce --out``'s ``*_runs.jsonl``):

* ``version`` and ``commit``: flplat's version and, in a git checkout, the commit with ``-dirty`` when the
  checkout has changes (tags ``flplat.version``, ``flplat.git_commit``): for people, not compared;
* ``source``: a SHA-256 of every ``*.py`` file of the flplat package (tag ``flplat.code.source``). A commit that
  changes only documentation, configs or tests leaves it as it was; any change to flplat's Python code (a
  comment or docstring included) changes it;
* ``plugins``: per plugin module behind the run's algorithm, dataset, model and partition (the module that defines
  the entry and the plugin module whose import registered it: :func:`flplat.protocol.registry.entry_modules`), a
  SHA-256 of the ``*.py`` files of its top-level package (or of its one file) and, when that package comes from
  an installed distribution, the distribution's name and version (tag ``flplat.code.plugins``). The hash decides,
  not the version: an editable install keeps its version while its code changes. A plugin loaded but not used
  by the run does not count; code a plugin imports from outside its own top-level package is not covered;
* ``key``: a hash of ``source`` and the plugins' hashes (tag ``flplat.code``): two runs come from the same code
  when their keys are equal. A run continued from a checkpoint by other code than the one that started it
  records ``mixed`` (:data:`MIXED`), never equal to any code.

:func:`code_identity` computes it; the hashes are computed once per process (a command's runs share them), so a
file changed while a command runs counts from the next command on. A run logged before runs carried these tags
has no identity (:meth:`CodeIdentity.from_tags` returns None): studies count it as "unknown code".
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CODE_TAG = "flplat.code"
SOURCE_TAG = "flplat.code.source"
PLUGINS_TAG = "flplat.code.plugins"
VERSION_TAG = "flplat.version"
COMMIT_TAG = "flplat.git_commit"
MIXED = "mixed"  # the key of a run continued by other code than the one that started it
#: registry kind -> the config key naming the run's entry
ENTRY_KEYS = {"algorithm": "algorithm.name", "dataset": "data.name", "model": "model.name",
              "partition": "partition.name"}
_HASH = 16  # hex digits kept of each SHA-256


@dataclass(frozen=True)
class CodeIdentity:
    """The code that made a run (see the module docstring). ``plugins``: ``(module, "sha256:<hash>[ (distribution
    NAME VERSION)]")`` pairs, sorted by module."""

    version: str
    commit: str | None
    source: str
    plugins: tuple[tuple[str, str], ...] = ()
    key: str = field(default="")

    def __post_init__(self):
        if not self.key:
            object.__setattr__(self, "key", _key(self.source, self.plugins))

    def to_tags(self) -> dict[str, str]:
        tags = {VERSION_TAG: self.version, SOURCE_TAG: self.source, CODE_TAG: self.key,
                PLUGINS_TAG: "; ".join(f"{m}={h}" for m, h in self.plugins) or "none"}
        if self.commit:
            tags[COMMIT_TAG] = self.commit
        return tags

    @classmethod
    def from_tags(cls, tags: Mapping[str, str]) -> CodeIdentity | None:
        """The identity a run recorded, or None for a run logged before runs recorded one."""
        if CODE_TAG not in tags:
            return None
        text = tags.get(PLUGINS_TAG, "none")
        plugins = tuple(tuple(p.split("=", 1)) for p in text.split("; ") if "=" in p) if text != "none" else ()
        return cls(tags.get(VERSION_TAG, "?"), tags.get(COMMIT_TAG), tags.get(SOURCE_TAG, "?"), plugins,
                   tags[CODE_TAG])

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "version": self.version, "commit": self.commit, "source": self.source,
                "plugins": dict(self.plugins)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CodeIdentity:
        return cls(d["version"], d.get("commit"), d["source"], tuple(sorted((d.get("plugins") or {}).items())),
                   d["key"])

    def describe(self) -> str:
        """One line for people: ``flplat 0.1.0 (commit abc1234-dirty, source 0123abcd...) + my_pkg.algo sha256:...``."""
        sha, dirty = (self.commit or "").removesuffix("-dirty"), (self.commit or "").endswith("-dirty")
        commit = f"commit {sha[:12]}{'-dirty' if dirty else ''}, " if self.commit else ""
        text = f"flplat {self.version} ({commit}source {self.source})"
        text += "".join(f" + {m} {h}" for m, h in self.plugins)
        return text + (" continued by other code (mixed)" if self.key == MIXED else "")


def _key(source: str, plugins: tuple[tuple[str, str], ...]) -> str:
    text = "\n".join([source, *(f"{m}={h.split()[0]}" for m, h in plugins)])
    return hashlib.sha256(text.encode()).hexdigest()[:_HASH]


def _hash_files(root: Path, files: list[Path]) -> str:
    h = hashlib.sha256()
    for f in sorted(files, key=lambda p: p.relative_to(root).as_posix()):
        h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:_HASH]


def _py_files(directory: Path) -> list[Path]:
    return [p for p in directory.rglob("*.py") if "__pycache__" not in p.parts]


@functools.cache
def source_hash() -> str:
    """SHA-256 (first 16 hex digits) of the flplat package's ``*.py`` files, their paths included."""
    pkg = Path(__file__).resolve().parents[1]
    return _hash_files(pkg, _py_files(pkg))


@functools.cache
def _distributions() -> dict[str, list[str]]:
    from importlib.metadata import packages_distributions

    return packages_distributions()


@functools.cache
def module_code(module: str) -> str:
    """``sha256:<hash>`` of the ``*.py`` files of the top-level package of ``module`` (of its one file for a
    top-level module), with `` (distribution NAME VERSION)`` when that package comes from an installed one;
    ``unknown (no source file)`` when it has none (a module defined in ``__main__``, a compiled extension)."""
    top = module.split(".")[0]
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        spec = None
    files: list[Path] = []
    root = None
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            root = Path(loc).resolve().parent
            files += _py_files(Path(loc).resolve())
    elif spec is not None and spec.origin and spec.origin.endswith(".py"):
        files = [Path(spec.origin).resolve()]
        root = files[0].parent
    if not files or root is None:
        return "unknown (no source file)"
    text = f"sha256:{_hash_files(root, files)}"
    from importlib.metadata import PackageNotFoundError, version

    for dist in _distributions().get(top, [])[:1]:
        try:
            text += f" (distribution {dist} {version(dist)})"
        except PackageNotFoundError:
            pass
    return text


@functools.lru_cache(maxsize=1)
def git_commit() -> str | None:
    """The commit of the git checkout holding the flplat package (with ``-dirty`` when it has changes), or None
    (an installed wheel, no git). Two git commands, once per process."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5)
        if sha.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return sha.stdout.strip() + ("-dirty" if dirty.returncode == 0 and dirty.stdout.strip() else "")


def _entries(params: Any) -> dict[str, str]:
    """The run's registry entries by kind, from a config (``DictConfig``) or its flattened params."""
    from omegaconf import DictConfig, OmegaConf

    if isinstance(params, DictConfig):
        values = {kind: OmegaConf.select(params, key) for kind, key in ENTRY_KEYS.items()}
    else:
        values = {kind: params.get(key) for kind, key in ENTRY_KEYS.items()}
    return {kind: str(v) for kind, v in values.items() if v is not None}


def code_identity(params: Any = None) -> CodeIdentity:
    """The code identity of a run of ``params`` (a config, or its flattened params with dotted keys; None: flplat
    alone) in this process: flplat's version, commit and source hash, and the code of the plugin modules behind its
    algorithm, dataset, model and partition."""
    from flplat import __version__
    from flplat.protocol.registry import entry_modules

    modules = sorted({m for kind, name in _entries(params or {}).items() for m in entry_modules(kind, name)})
    return CodeIdentity(__version__, git_commit(), source_hash(), tuple((m, module_code(m)) for m in modules))


def other_code(recorded: CodeIdentity | None, now: CodeIdentity) -> str | None:
    """Why a run that recorded ``recorded`` does not come from ``now`` (one phrase for a line on stderr), or None
    when it does."""
    if recorded is None:
        return "unknown code (the run was logged before runs recorded their code)"
    if recorded.key == now.key:
        return None
    return f"other code ({recorded.describe()}; now {now.describe()})"


def clear_cache() -> None:
    """Forget the hashes computed so far (a test that changes a plugin's file within one process)."""
    for f in (source_hash, module_code, _distributions, git_commit):
        f.cache_clear()
