"""Shared fixtures: dataset location and the skip-or-fail rule for missing data."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from graphdist.testing.env import require

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "datasets"


def data_dirs() -> list[Path]:
    """The dataset directories tests read from: GRAPHDIST_DATA, else ../shared/datasets."""
    env = os.environ.get("GRAPHDIST_DATA")
    if env:
        return [Path(p) for p in env.split(":") if p]
    return [DEFAULT_DATA]


@pytest.fixture
def dataset_path():
    """Returns a function name -> path of <name>.npz, skipping (or failing in CI) when absent."""

    def find(name: str) -> Path:
        for d in data_dirs():
            p = d / f"{name}.npz"
            if p.exists():
                return p
        require(False, f"{name}.npz not found in {':'.join(map(str, data_dirs()))}; set GRAPHDIST_DATA to its folder")
        raise AssertionError  # unreachable

    return find


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Every test writes derived files under its own GRAPHDIST_CACHE, never ~/.cache."""
    monkeypatch.setenv("GRAPHDIST_CACHE", str(tmp_path_factory.mktemp("cache")))
    if "GRAPHDIST_DATA" not in os.environ and DEFAULT_DATA.exists():
        monkeypatch.setenv("GRAPHDIST_DATA", str(DEFAULT_DATA))
