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


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` is the file system saying it has no room (no space, or over quota)."""
    import errno

    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def free_bytes(path: os.PathLike | str) -> Optional[int]:
    """Free bytes on the file system holding ``path`` (its nearest existing ancestor); None if unknown.

    Example:
        >>> free_bytes("/") > 0
        True
    """
    import shutil

    here = Path(path).absolute()
    while not here.exists() and here != here.parent:
        here = here.parent
    try:
        return shutil.disk_usage(here).free
    except OSError:
        return None


def human_bytes(n: float) -> str:
    """``1536`` -> ``'1.5 KiB'``.

    Example:
        >>> human_bytes(1536), human_bytes(3 * 2**30)
        ('1.5 KiB', '3.0 GiB')
    """
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover - the loop returns at GiB


class WriteError(OSError):
    """A write that failed, in words: ``str()`` is the message alone (no ``[Errno 28]`` prefix)."""

    def __str__(self) -> str:
        return str(self.strerror)


def write_error(exc: OSError, path: os.PathLike | str, what: str, kept: str = "") -> WriteError:
    """An ``OSError`` (same errno) naming what could not be written where; a full disk says how much is free.

    Call it before removing what the failed write left, so the free space is the space it had.

    Args:
        exc: the error the write raised.
        path: the file or directory being written.
        what: what it is, for the message ("checkpoint", "partition directory").
        kept: what the failure left intact, said after the reason.

    Example:
        >>> import errno
        >>> e = write_error(OSError(errno.ENOSPC, "No space left on device"), "/nowhere/x.pt", "checkpoint",
        ...                 kept="the previous one is intact")
        >>> str(e).startswith("could not write checkpoint /nowhere/x.pt: no space left on device (")
        True
    """
    if is_disk_full(exc):
        free = free_bytes(path)
        reason = "no space left on device" + (f" ({human_bytes(free)} free there)" if free is not None else "")
    else:
        reason = exc.strerror or str(exc)
    return WriteError(exc.errno, f"could not write {what} {path}: {reason}" + (f"; {kept}" if kept else ""))
