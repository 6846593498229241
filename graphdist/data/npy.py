"""Streaming ``.npy`` files: write an array chunk by chunk, scan a memory map without keeping it resident.

Out-of-core phases (the generator, the partition writer) handle arrays larger than they may hold:

- :class:`NpyWriter` writes a ``.npy`` of known shape by appending chunks through ordinary file
  writes, hashing as it goes (the partition format's checksums cost no second read). Writing
  through a memory map instead would keep every written page resident in the writer: its RSS
  would grow to the file's size.
- :func:`release` drops the resident pages of a slice of a read-only file mapping once a scan has
  used it (``madvise(MADV_DONTNEED)``; the next access reads the file again), so scanning a 4 GB
  feature map costs one chunk of memory, not 4 GB of RSS. Memory that is not a read-only file
  mapping is never touched.

Example:
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "a.npy"
    >>> with NpyWriter(path, (4, 2), np.float32) as w:
    ...     w.write(np.ones((3, 2), np.float32)); w.write(np.zeros((1, 2), np.float32))
    >>> float(np.load(path).sum()), len(w.sha256)
    (6.0, 64)
"""

from __future__ import annotations

import ctypes
import hashlib
import mmap
import os
from pathlib import Path
from typing import Any, Optional

import numpy as np

_MADV_DONTNEED = 4


class NpyWriter:
    """A ``.npy`` file of ``shape`` and ``dtype`` filled by appending C-ordered chunks along axis 0.

    Args:
        path: the file (created or truncated).
        shape: the final shape.
        dtype: the element type.

    Raises:
        ValueError: on close, when the chunks did not add up to ``shape`` (the file is then removed).
    """

    def __init__(self, path: os.PathLike | str, shape: tuple[int, ...], dtype: Any) -> None:
        self.path, self.shape, self.dtype = Path(path), tuple(int(s) for s in shape), np.dtype(dtype)
        self.rows = 0
        self._hash = hashlib.sha256()
        self.size = 0
        self._fh = open(self.path, "wb")
        header = {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False, "shape": self.shape}
        self._emit(_header_bytes(header))

    def _emit(self, data: Any) -> None:
        view = memoryview(data).cast("B")
        self._hash.update(view)
        self._fh.write(view)
        self.size += view.nbytes

    def write(self, chunk: np.ndarray) -> None:
        """Appends ``chunk`` (rows along axis 0; the other axes as ``shape``'s)."""
        chunk = np.ascontiguousarray(chunk, dtype=self.dtype)
        if chunk.shape[1:] != self.shape[1:]:
            raise ValueError(f"{self.path}: chunk of shape {chunk.shape} does not fit rows of {self.shape[1:]}")
        self._emit(chunk)
        self.rows += chunk.shape[0] if chunk.ndim else 1

    @property
    def sha256(self) -> str:
        return self._hash.hexdigest()

    def close(self) -> None:
        self._fh.close()
        expected = self.shape[0] if self.shape else 1
        if self.rows != expected:
            self.path.unlink(missing_ok=True)
            raise ValueError(f"{self.path}: wrote {self.rows} rows of the {expected} announced")

    def __enter__(self) -> "NpyWriter":
        return self

    def __exit__(self, kind: Any, *rest: Any) -> None:
        if kind is not None:
            self._fh.close()
            self.path.unlink(missing_ok=True)
            return
        self.close()


def _header_bytes(header: dict[str, Any]) -> bytes:
    """The ``.npy`` magic and version 1.0 header numpy itself writes for ``header``."""
    import io

    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, header)
    return buf.getvalue()


def _file_mapping(address: int) -> Optional[tuple[int, int, str]]:
    """``(start, end, permissions)`` of the file mapping holding ``address`` (``/proc/self/maps``), or None."""
    try:
        with open("/proc/self/maps") as fh:
            for line in fh:
                fields = line.split(maxsplit=5)
                lo, hi = (int(v, 16) for v in fields[0].split("-"))
                if lo <= address < hi:
                    path = fields[5].strip() if len(fields) > 5 else ""
                    return (lo, hi, fields[1]) if path.startswith("/") and not path.endswith("(deleted)") else None
    except OSError:
        return None
    return None


def is_mapped(array: Any) -> bool:
    """Whether ``array`` (numpy or tensor) lies in a memory-mapped file.

    Example:
        >>> is_mapped(np.zeros(4096))
        False
    """
    if hasattr(array, "numpy") and not isinstance(array, np.ndarray):
        if array.device.type != "cpu" or not array.numel():
            return False
        array = array.detach().numpy()
    if not array.size:
        return False
    return _file_mapping(array.__array_interface__["data"][0]) is not None


# A memory map larger than this stays mapped where it is read (a partition's CSR columns, its own
# feature rows): copying it would cost as much private memory; smaller ones are copied once.
MAPPED_COPY_MAX_BYTES = 256 << 20


def stays_mapped(array: Any, copy_bytes: int) -> bool:
    """Whether ``array`` is a memory map whose copy (``copy_bytes``) is above ``MAPPED_COPY_MAX_BYTES``.

    Example:
        >>> import torch
        >>> stays_mapped(torch.zeros(4), copy_bytes=1 << 40)  # not a map: copy it
        False
    """
    return copy_bytes > MAPPED_COPY_MAX_BYTES and is_mapped(array)


def release(array: Any, unwritten: bool = False) -> None:
    """Drops the resident pages of ``array`` (a numpy array or tensor) where they only mirror a file.

    A read-only file mapping (``r--``) keeps nothing but the file's content: dropping its pages
    only means the next access reads the file again. A private writable one (a copy-on-write
    memory map, as ``Graph`` makes of read-only maps) may hold pages written since; those are
    dropped only when the caller knows none was written (``unwritten=True``: it only read the
    array). Anything else (anonymous memory, a shared writable map) is left alone.
    """
    if hasattr(array, "numpy") and not isinstance(array, np.ndarray):
        array = array.numpy()
    if array.nbytes < mmap.PAGESIZE:
        return
    start = array.__array_interface__["data"][0]
    mapping = _file_mapping(start)
    if mapping is None:
        return
    lo, hi, perms = mapping
    if "w" in perms and not (unwritten and "p" in perms):
        return
    page = mmap.PAGESIZE
    first = max(lo, (start + page - 1) // page * page)  # only whole pages inside the array
    last = min(hi, (start + array.nbytes) // page * page)
    if last > first:
        ctypes.CDLL(None, use_errno=True).madvise(ctypes.c_void_p(first), ctypes.c_size_t(last - first),
                                                  ctypes.c_int(_MADV_DONTNEED))


__all__ = ["MAPPED_COPY_MAX_BYTES", "NpyWriter", "is_mapped", "release", "stays_mapped"]
