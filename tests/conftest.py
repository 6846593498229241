"""Shared fixtures: dataset location and the skip-or-fail rule for missing data."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from graphdist.testing.env import find_dataset, require  # noqa: F401

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "datasets"


@pytest.fixture
def dataset_path():
    """Returns a function name -> path of <name>.npz, skipping (or failing in CI) when absent."""
    return find_dataset


@pytest.fixture(autouse=True, scope="session")
def _numba_cache(tmp_path_factory):
    """One numba cache for the session (sampling.compiled): each test's cache would compile again."""
    os.environ.setdefault("NUMBA_CACHE_DIR", str(tmp_path_factory.mktemp("numba")))


@pytest.fixture(autouse=True, scope="session")
def _no_plots():
    """Training runs skip the run directory's PNGs (``GRAPHDIST_PLOTS=0``, as ``--no-plots``): drawing them costs
    rank 0 ~1.2 s of CPU (matplotlib) at the end of each of the suite's hundreds of runs. The tests of the
    plots ask for them (``--plots``: tests/trainers/test_train_e2e.py, test_multihost.py; test_runlog_plots.py)."""
    os.environ["GRAPHDIST_PLOTS"] = "0"


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Every test writes derived files under its own GRAPHDIST_CACHE, never ~/.cache."""
    monkeypatch.setenv("GRAPHDIST_CACHE", str(tmp_path_factory.mktemp("cache")))
    if "GRAPHDIST_DATA" not in os.environ and DEFAULT_DATA.exists():
        monkeypatch.setenv("GRAPHDIST_DATA", str(DEFAULT_DATA))
