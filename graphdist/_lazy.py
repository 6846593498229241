"""Lazy package exports: a package's public names imported on first use.

Packages whose light parts (name registries read by the CLI and the config) must import
without torch use it in their ``__init__``: ``__getattr__, __dir__ = lazy_exports(...)``.

Example:
    >>> getattr_, dir_ = lazy_exports("pkg", {"sqrt": "math"}, globals_={})
    >>> getattr_("sqrt")(9.0), dir_()
    (3.0, ['sqrt'])
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping


def lazy_exports(
    package: str, names: Mapping[str, str], globals_: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``names`` maps a public name to its module.

    A name is imported from its module on first access and cached in ``globals_``.
    """

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        globals_[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(globals_) | set(names))

    return __getattr__, __dir__


__all__ = ["lazy_exports"]
