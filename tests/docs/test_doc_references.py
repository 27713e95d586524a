"""The docs cite only files that exist in the repository (a newcomer follows every link)."""

from __future__ import annotations

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
