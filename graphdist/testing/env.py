"""Skip-or-fail rule for tests whose data or privilege is missing."""

from __future__ import annotations

import os
from pathlib import Path


def require(condition: bool, reason: str) -> None:
    """Skips with ``reason`` on a user's machine; fails when ``CI=true`` (CI must have everything).

    Example:
        >>> require(True, "never shown")
    """
    if condition:
        return
    import pytest

    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but {reason}")
    pytest.skip(reason)


def find_dataset(name: str) -> Path:
    """``<name>.npz`` in ``GRAPHDIST_DATA`` (``:``-separated), else ``../shared/datasets`` beside the repo.

    Skips the calling test when it is absent (fails when ``CI=true``), saying how to point at it.
    """
    from graphdist.data import paths

    # Only the GRAPHDIST_DATA directories (never the cache, which tests isolate), or, for a
    # checkout run without it, the shared datasets folder beside the repo.
    dirs = paths.dataset_dirs() or [Path(__file__).resolve().parents[2].parent / "shared" / "datasets"]
    found = paths.find_dataset(name, dirs=dirs)
    if found is not None:
        return found
    require(False, f"{name}.npz not found in {':'.join(map(str, dirs))}; set GRAPHDIST_DATA to its folder")
    raise AssertionError("unreachable")
