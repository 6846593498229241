"""Skip-or-fail rule for tests whose data or privilege is missing; a small disk that fills up."""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path
from typing import Iterator


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


@contextlib.contextmanager
def small_disk(path: Path, size_kib: int) -> Iterator[Path]:
    """Mounts a ``size_kib`` KiB tmpfs at ``path`` for the block: a disk that fills up (needs root).

    Skips (fails when ``CI=true``) where mounting is not allowed.
    """
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    mounted = os.geteuid() == 0 and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={int(size_kib)}k", "tmpfs", str(path)], capture_output=True
    ).returncode == 0
    require(mounted, "mounting a small tmpfs (a full disk) needs root and mount(8)")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill_disk(path: Path, leave_bytes: int) -> Path:
    """Fills the file system holding ``path`` until about ``leave_bytes`` are free; returns the filler file."""
    import shutil

    filler = Path(path) / ".filler"
    with open(filler, "wb") as f:
        chunk = b"\0" * (1 << 16)
        while shutil.disk_usage(path).free > leave_bytes + len(chunk):
            f.write(chunk)
            f.flush()
        rest = shutil.disk_usage(path).free - leave_bytes
        if rest > 0:
            f.write(b"\0" * rest)
    return filler
