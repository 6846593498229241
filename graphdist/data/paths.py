"""Where graphdist looks for datasets and where it writes: the one place for those rules.

Named datasets are read as ``<name>.npz`` from the read-only ``GRAPHDIST_DATA`` directories
(``:``-separated, in order), then from the cache; the cache (``GRAPHDIST_CACHE``, default
``~/.cache/graphdist``) is the only directory graphdist ever writes to.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Sequence


def dataset_dirs() -> list[Path]:
    """The read-only dataset directories from ``GRAPHDIST_DATA`` (``:``-separated), in order.

    Example:
        >>> import os
        >>> from unittest import mock
        >>> with mock.patch.dict(os.environ, {"GRAPHDIST_DATA": "/data/a:/data/b"}):
        ...     [str(p) for p in dataset_dirs()]
        ['/data/a', '/data/b']
    """
    value = os.environ.get("GRAPHDIST_DATA", "")
    return [Path(p).expanduser() for p in value.split(os.pathsep) if p]


def cache_dir(create: bool = False) -> Path:
    """The one directory graphdist writes to: ``GRAPHDIST_CACHE``, default ``~/.cache/graphdist``.

    Args:
        create: make the directory (and parents) if missing (default False).

    Example:
        >>> import os, pathlib
        >>> from unittest import mock
        >>> with mock.patch.dict(os.environ, {"GRAPHDIST_CACHE": ""}):  # unset or empty: the default
        ...     cache_dir() == pathlib.Path.home() / ".cache" / "graphdist"
        True
    """
    path = Path(os.environ.get("GRAPHDIST_CACHE") or Path.home() / ".cache" / "graphdist").expanduser()
    if create:
        path.mkdir(parents=True, exist_ok=True)
    return path


def find_dataset(name: str, dirs: Optional[Sequence[Path]] = None) -> Optional[Path]:
    """``<name>.npz`` in the first ``GRAPHDIST_DATA`` directory holding it, else in the cache.

    Args:
        name: the dataset name, without ``.npz``.
        dirs: where to look instead, in order (default: ``dataset_dirs()``, then ``cache_dir()``).

    Example:
        >>> find_dataset("no-such-dataset") is None
        True
    """
    searched = [*dataset_dirs(), cache_dir()] if dirs is None else dirs
    for directory in searched:
        candidate = directory / f"{name}.npz"
        if candidate.is_file():
            return candidate
    return None


__all__ = ["cache_dir", "dataset_dirs", "find_dataset"]
