"""Every docstring example in the packages runs and prints what it shows: users copy them."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

PACKAGES = ["graphdist", "partition", "sampling", "placement"]


def _modules() -> list[str]:
    names = []
    for package in PACKAGES:
        names.append(package)
        path = importlib.import_module(package).__path__
        names.extend(info.name for info in pkgutil.walk_packages(path, prefix=package + "."))
    return sorted(names)


@pytest.mark.parametrize("module", _modules())
def test_docstring_examples(module: str) -> None:
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS, verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} docstring examples in {module} failed (above)"
