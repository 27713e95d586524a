"""Builds the API reference (docs/reference/*.html) from the public API's docstrings.

`make reference` runs it; tests/docs/test_api_reference.py builds it again into a
temporary directory and fails when the checked-in pages differ, so the reference
cannot drift from the code. pdoc renders the docstrings (Google style: Args, Returns,
Raises, Example) and the signatures it reads from the code itself.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

#: The public API, module by module: what `__all__` names in each is documented.
MODULES = (
    "filestore",
    "filestore.table_history",  # Table's snapshots, tags and rollback (its base class)
    "bridge.spark.registration",
    "bridge.spark.ctas",
    "bridge.spark.native.extension",
    "bridge.spark.native.scan",
    "bridge.consistency_read",
    "bridge.meta.client",
    "logstore.spec",
    "logstore.writer",
    "logstore.reader",
)

HERE = Path(__file__).resolve().parent


def build(out: Path) -> list[Path]:
    """Render the reference of `MODULES` into `out` (emptied first).

    Args:
        out: the directory the HTML pages go to.

    Returns:
        The pages written, sorted.
    """
    import pdoc
    import pdoc.render

    if out.exists():
        for page in out.rglob("*.html"):
            page.unlink()
    pdoc.render.configure(docformat="google", show_source=False, search=False)
    pdoc.pdoc(*MODULES, output_directory=out)
    return sorted(out.rglob("*.html"))


def main() -> None:
    """Build into a temporary directory, then replace the checked-in pages."""
    # run as a script, this directory is sys.path[0]: its page folders (bridge/,
    # logstore/) would shadow the packages as namespace packages
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
    with tempfile.TemporaryDirectory() as tmp:
        pages = build(Path(tmp))
        for old in HERE.rglob("*.html"):
            old.unlink()
        for page in pages:
            target = HERE / page.relative_to(tmp)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(page, target)
    print(f"{len(pages)} pages in {HERE} (open {HERE / 'index.html'})", file=sys.stderr)


if __name__ == "__main__":
    main()
