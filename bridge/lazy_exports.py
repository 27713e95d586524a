"""A package's exports imported on first use (PEP 562's module ``__getattr__``).

``bridge``, ``bridge.spark`` and ``bridge.meta`` export names whose modules must not come
along with the package: Spark's Python workers import ``bridge.spark`` before any of its
modules, a Spark driver with only the ``spark`` extra imports ``bridge.meta.errors`` (and
so ``bridge.meta``) without pydantic, and ``dts`` commands start without Spark.

Imports within bridge: nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """The ``__getattr__`` of `package` that imports each of `exports` (name -> module)
    when it is first asked for."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(import_module(module), name)

    return __getattr__
