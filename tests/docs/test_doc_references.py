"""The docs cite only files and modules that exist (a newcomer follows every link)."""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
_LINK = re.compile(r"\]\((?P<target>[^)#\s]+)(?:#[^)]*)?\)")
# a backticked repository path: a directory prefix and a file name with an extension
_CITED = re.compile(r"`(?P<path>(?:[\w.-]+/)+[\w.-]+\.(?:md|py|yml|yaml|toml|json|txt))`")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_cited_file_exists(doc: Path) -> None:
    text = doc.read_text()
    missing = []
    for m in _LINK.finditer(text):
        target = m["target"]
        if "://" in target or target.startswith("mailto:"):
            continue
        if not (doc.parent / target).exists():
            missing.append(target)
    for m in _CITED.finditer(text):
        path = m["path"]
        if "<" in path or path.startswith(("/", "~")):
            continue
        # a repository file (its top folder is one of ours) or a cited document; not an
        # on-disk layout pattern such as `_prepared/N/bucket-B.json`
        if not ((REPO / path.split("/")[0]).exists() or path.endswith(".md")):
            continue
        if not ((REPO / path).exists() or (doc.parent / path).exists()):
            missing.append(path)
    assert not missing, f"{doc.relative_to(REPO)} cites files not in the repository: {missing}"


# a backticked dotted name in one of our packages: `bridge.tables.open_log_writer`,
# `logstore.client_config`, `filestore.errors.TableNotFound(...)`; `<part>` placeholders
# and trailing dots end the name where the identifier ends
_DOTTED = re.compile(r"`(?P<name>(?:filestore|logstore|bridge)(?:\.[A-Za-z_]\w*)+)")
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")


def _prose(text: str) -> str:
    """``text`` without its fenced blocks (those run, or are shown as output)."""
    kept, fence = [], None
    for line in text.splitlines():
        m = _FENCE.match(line)
        if fence is None and m:
            fence = m[1]
        elif fence is not None and m and m[1][0] == fence[0] and len(m[1]) >= len(fence):
            fence = None
        elif fence is None:
            kept.append(line)
    return "\n".join(kept)


def resolves(name: str) -> bool:
    """Whether ``name`` is a module of ours or an attribute (at any depth) of one."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        module_name = ".".join(parts[:i])
        try:
            spec = importlib.util.find_spec(module_name)
        except ModuleNotFoundError:  # a parent is not a package
            spec = None
        if spec is None:
            continue
        obj: object = importlib.import_module(module_name)
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def test_resolves_modules_and_their_attributes() -> None:
    assert resolves("filestore")
    assert resolves("bridge.tables.open_log_writer")
    assert resolves("filestore.errors.TableNotFound")
    assert resolves("bridge.meta.metrics.meta_registry")
    assert not resolves("bridge.metrics")
    assert not resolves("bridge.tables.no_such_function")
    assert not resolves("filestore.errors.TableNotFound.no_such_attribute")
    assert _DOTTED.findall("`bridge.commands.<part>` and `bridge.x()`") == [
        "bridge.commands",
        "bridge.x",
    ]
    assert _prose("a\n```python\nimport bridge.nope\n```\nb") == "a\nb"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_named_module_exists(doc: Path) -> None:
    names = sorted({m["name"] for m in _DOTTED.finditer(_prose(doc.read_text()))})
    missing = [name for name in names if not resolves(name)]
    assert not missing, (
        f"{doc.relative_to(REPO)} names modules or attributes that do not exist: {missing}"
    )
