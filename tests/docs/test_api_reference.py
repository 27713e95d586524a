"""The API reference (docs/reference/) is built from the code, and the public API it
documents carries Args / Returns and an example in its docstrings.

The reference is pdoc's rendering of the modules `docs/reference/build_reference.py`
names (each module's `__all__`); this test builds it again and compares page by page,
so a changed signature or docstring without `make reference` fails here.
"""

from __future__ import annotations

import enum
import importlib
import importlib.util
import inspect
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference"


def _builder() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "build_reference", REFERENCE / "build_reference.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BUILDER = _builder()


def test_the_checked_in_reference_is_what_the_code_builds(tmp_path: Path) -> None:
    built = {p.relative_to(tmp_path) for p in BUILDER.build(tmp_path)}
    checked = {p.relative_to(REFERENCE) for p in REFERENCE.rglob("*.html")}
    assert built == checked, (
        f"pages missing or extra: {sorted(map(str, built ^ checked))}; run `make reference`"
    )
    stale = sorted(
        str(p) for p in built if (tmp_path / p).read_bytes() != (REFERENCE / p).read_bytes()
    )
    assert not stale, f"docs/reference is stale ({stale}): run `make reference`"


def _section(doc: str, name: str) -> str:
    """The body of a Google-style section (``Args:``) up to the next section or the end."""
    match = re.search(rf"^\s*{name}:\s*\n(.*?)(?=^\s*[A-Z][A-Za-z ]+:\s*$|\Z)", doc, re.M | re.S)
    return match.group(1) if match else ""


def _problems(qualname: str, obj: Callable[..., Any], *, example: bool) -> Iterator[str]:
    doc = inspect.getdoc(obj) or ""
    if not doc:
        yield f"{qualname}: no docstring"
        return
    if example and not re.search(r"^\s*Examples?:\s*$", doc, re.M):
        yield f"{qualname}: no Example section"
    signature = inspect.signature(obj)
    args = _section(doc, "Args")
    for name in signature.parameters:
        if name in ("self", "cls"):
            continue
        if not re.search(rf"^\s*\**{re.escape(name)}\b[^:\n]*:", args, re.M):
            yield f"{qualname}: parameter {name!r} not in its Args section"
    returns = signature.return_annotation
    gives = returns not in (None, "None", inspect.Signature.empty)
    if gives and not (_section(doc, "Returns") or _section(doc, "Yields")):
        yield f"{qualname}: returns {returns} but has no Returns section"


def _public_api() -> Iterator[tuple[str, Any]]:
    for module_name in BUILDER.MODULES:
        module = importlib.import_module(module_name)
        assert hasattr(module, "__all__"), f"{module_name} names its public API in __all__"
        for name in module.__all__:
            yield f"{module_name}.{name}", getattr(module, name)


def _checked(qualname: str, obj: Any) -> Iterator[str]:
    if inspect.isclass(obj):
        if issubclass(obj, BaseException | enum.Enum):
            if not inspect.getdoc(obj):
                yield f"{qualname}: no docstring"
            return
        if not re.search(r"^\s*Examples?:\s*$", inspect.getdoc(obj) or "", re.M):
            yield f"{qualname}: no Example section"
        if "__init__" in vars(obj) and inspect.isfunction(vars(obj)["__init__"]):
            # the constructor's arguments are documented in the class docstring
            init = vars(obj)["__init__"]
            doc = inspect.getdoc(obj) or ""
            listed = _section(doc, "Args") + _section(doc, "Attributes")  # a dataclass: fields
            for name in list(inspect.signature(init).parameters)[1:]:
                if not re.search(rf"^\s*\**{re.escape(name)}\b[^:\n]*:", listed, re.M):
                    yield f"{qualname}: constructor argument {name!r} in neither Args nor Attributes"
        for name, member in vars(obj).items():
            if name.startswith("_"):
                continue
            if isinstance(member, staticmethod | classmethod):
                member = member.__func__
            if inspect.isfunction(member):
                yield from _problems(f"{qualname}.{name}", member, example=False)
    elif inspect.isfunction(obj):
        yield from _problems(qualname, obj, example=True)


def test_the_public_api_documents_its_arguments_returns_and_an_example() -> None:
    problems = [p for qualname, obj in _public_api() for p in _checked(qualname, obj)]
    assert not problems, f"{len(problems)} gaps:\n" + "\n".join(problems)


def _undocumented(x: int) -> int:
    """Adds one."""
    return x + 1


def _documented(x: int) -> int:
    """Adds one.

    Args:
        x: any integer.

    Returns:
        ``x + 1``.

    Example:
        >>> _documented(1)
        2
    """
    return x + 1


@pytest.mark.parametrize(("function", "gaps"), [(_undocumented, 3), (_documented, 0)])
def test_the_docstring_check_finds_what_is_missing(function: Callable[..., Any], gaps: int) -> None:
    assert len(list(_checked("f", function))) == gaps
