"""Writing the array files of a partition directory: ``np.save`` with each file's sha256 and size recorded.

The ``{file: {"sha256", "bytes"}}`` table it fills goes into ``meta.json`` (``partition/format.py``
draws the layout), and the reader verifies against it. Used by every writer of a part's files: the
in-memory writer (``format``), the out-of-core scan (``scan``) and the link splits (``edges``).

Example:
    >>> import tempfile, pathlib
    >>> files = {}
    >>> save_array(pathlib.Path(tempfile.mkdtemp()), "part-0/a.npy", np.arange(3), files)
    >>> files["part-0/a.npy"]["bytes"], len(files["part-0/a.npy"]["sha256"])
    (152, 64)
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np


class _HashingFile:
    """A write-only file object that hashes what passes through (one read of the data, not two)."""

    def __init__(self, fh: Any) -> None:
        self._fh = fh
        self.sha256 = hashlib.sha256()
        self.size = 0

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self.sha256.update(view)
        self.size += view.nbytes
        return self._fh.write(view)


def save_array(root: Path, relpath: str, array: np.ndarray, files: dict[str, dict[str, Any]]) -> None:
    """``np.save`` to ``root/relpath``, recording its sha256 and size in ``files``."""
    path = root / relpath
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        sink = _HashingFile(fh)
        # A non-file sink makes numpy write in bounded chunks through our hash.
        np.save(sink, np.ascontiguousarray(array), allow_pickle=False)  # type: ignore[arg-type]
    files[relpath] = {"sha256": sink.sha256.hexdigest(), "bytes": sink.size}


__all__ = ["save_array"]
