"""tools/ is split by purpose (benchmarks, generators, scripts, investigations) and every ``tools/...`` path the
documentation, the package and the scripts' own usage text name exists: a merge that brings back a script at the top
of tools/, or a reference to a path that moved, fails here instead of in a user's shell."""

from __future__ import annotations

import re

from conftest import REPO

TOOLS = REPO / "tools"
FOLDERS = ("benchmarks", "generators", "scripts", "investigations")
# The per-paper scripts `flplat reproduce` replaced: the record of the runs they made (docs/results_earlier.md) and of
# the files they wrote (docs/results/README.md) keep their commands and say so at their top; no other file names them.
RETIRED = {"tools/reproduce_table3.py", "tools/flux_repro.py", "tools/reproduce_dapfl.py", "tools/reproduce_cafa.py",
           "tools/pqfed_tables.py", "tools/pqfed_privacy.py"}
HISTORY = {REPO / "docs" / "results_earlier.md", REPO / "docs" / "results" / "README.md"}
PATH = re.compile(r"(?<![\w/.-])tools/[\w./-]*[\w/]")


def _documents():
    yield REPO / "README.md"
    yield REPO / "CHANGELOG.md"
    yield from sorted((REPO / "docs").rglob("*.md"))
    yield from sorted((REPO / "flplat").rglob("*.py"))
    yield from sorted(TOOLS.rglob("*.py"))
    yield TOOLS / "README.md"


def mentioned_paths(text: str) -> set[str]:
    return {m.group(0).rstrip("./") for m in PATH.finditer(text)}


def test_path_pattern_finds_tool_paths_and_skips_other_tools_folders():
    text = ("run `python tools/benchmarks/bench_e2e.py --x`, see tools/investigations/dapfl/ and tools/README.md.\n"
            "not these: /work/shared/tools/x.py, mytools/y.py, itertools.cycle")
    assert mentioned_paths(text) == {"tools/benchmarks/bench_e2e.py", "tools/investigations/dapfl", "tools/README.md"}


def test_every_tools_path_named_in_docs_package_and_scripts_exists():
    missing = []
    for doc in _documents():
        for path in sorted(mentioned_paths(doc.read_text(encoding="utf-8"))):
            if path in RETIRED and doc in HISTORY:
                continue
            if not (REPO / path).exists():
                missing.append(f"{doc.relative_to(REPO)}: {path}")
    assert not missing, "paths under tools/ that do not exist:\n" + "\n".join(missing)


def test_tools_holds_only_its_purpose_folders_each_script_listed_in_its_readme():
    top = sorted(p.name for p in TOOLS.iterdir() if p.name != "__pycache__")
    assert top == sorted([*FOLDERS, "README.md"]), f"tools/ holds {top}: put a script in one of {FOLDERS}"
    sections = {}
    for block in (TOOLS / "README.md").read_text(encoding="utf-8").split("\n## ")[1:]:
        head, _, body = block.partition("\n")
        sections[head.split("/")[0].strip()] = set(re.findall(r"^\| `([\w/.-]+\.py)` \|", body, re.M))
    assert sorted(sections) == sorted(FOLDERS)
    for folder in FOLDERS:
        on_disk = {p.relative_to(TOOLS / folder).as_posix() for p in (TOOLS / folder).rglob("*.py")}
        assert sections[folder] == on_disk, f"tools/README.md, {folder}/: listed {sorted(sections[folder])}, " \
                                            f"on disk {sorted(on_disk)}"


def test_scripts_find_the_checkout_from_their_folder():
    """A script that finds the repository from its own path (``Path(__file__).resolve().parents[N]``) reaches the
    checkout's root from the folder it is in now (a script moved one folder deeper needs N + 1)."""
    wrong = []
    for script in sorted(TOOLS.rglob("*.py")):
        for n in re.findall(r"Path\(__file__\)\.resolve\(\)\.parents\[(\d+)\]", script.read_text(encoding="utf-8")):
            if script.resolve().parents[int(n)] != REPO.resolve():
                wrong.append(f"{script.relative_to(REPO)}: parents[{n}]")
    assert not wrong, "repository lookups that miss the checkout:\n" + "\n".join(wrong)


def test_code_and_tools_name_no_issue_numbers():
    """A user reading the package or a tool has no issue tracker: docstrings and comments say what and why, never
    "issue 15"."""
    cite = re.compile(r"\bissues? #?\d+", re.IGNORECASE)
    found = [f"{p.relative_to(REPO)}:{n}: {line.strip()}" for p in [*sorted((REPO / "flplat").rglob("*.py")),
                                                                  *sorted(TOOLS.rglob("*.py"))]
             for n, line in enumerate(p.read_text().splitlines(), 1) if cite.search(line)]
    assert not found, found[:5]
