"""Validation helpers shared by every reader, and the one place a reader's arrays become a ``Graph``.

Each helper checks one kind of array read from a file (edge index, features, labels, masks),
naming the file and the field in its error; ``_build`` makes the CSR ``Graph``;
``_atomic_savez`` writes a ``.npz`` that is never left half-written; ``_npz_member_memmap`` maps a
member stored uncompressed instead of reading it.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np

from graphdist.data.graph import Graph, as_tensor, check_finite_features, edges_to_csr

PathLike = Union[str, "os.PathLike[str]"]


def _atomic_savez(path: Path, arrays: dict[str, np.ndarray]) -> None:
    # Uncompressed, so that a later load can memory-map x; written aside and renamed so an
    # interrupted run never leaves a truncated file that looks complete.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def open_npz(path: Path) -> Any:
    """``np.load`` of an ``.npz`` (no pickles); a missing file or one that is not an archive fails naming it."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    try:
        return np.load(path, allow_pickle=False)
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise ValueError(f"{path}: expected a numpy .npz archive (got an unreadable file: {exc})") from exc


def _npz_member_memmap(path: Path, key: str) -> Optional[np.ndarray]:
    """A read-only memory map of ``key`` if the archive stores it uncompressed, else None.

    ``np.load`` ignores ``mmap_mode`` for archives and would read a 56 GB feature
    matrix (ogbn-papers100M) into memory; an uncompressed member is a plain ``.npy``
    at a fixed offset, so it can be mapped like one.
    """
    try:
        with zipfile.ZipFile(path) as zf:
            info = zf.getinfo(f"{key}.npy")
            if info.compress_type != zipfile.ZIP_STORED:
                return None
            with open(path, "rb") as f:
                f.seek(info.header_offset)
                header = f.read(30)
                if header[:4] != b"PK\x03\x04":
                    return None
                name_len = int.from_bytes(header[26:28], "little")
                extra_len = int.from_bytes(header[28:30], "little")
                f.seek(info.header_offset + 30 + name_len + extra_len)
                version = np.lib.format.read_magic(f)
                if version == (1, 0):
                    shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
                elif version == (2, 0):
                    shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
                else:
                    return None
                offset = f.tell()
    except (KeyError, zipfile.BadZipFile, ValueError, OSError):
        return None
    if dtype.hasobject or int(np.prod(shape)) == 0:
        return None
    return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=tuple(shape), order="F" if fortran else "C")


def _edge_index_array(value: Any, where: str) -> np.ndarray:
    arr = np.asarray(value)
    if arr.ndim != 2 or arr.shape[0] != 2:
        raise ValueError(f"{where}: expected shape [2, E] (got {arr.shape})")
    if not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{where}: expected integer node ids (got dtype {arr.dtype})")
    if arr.size and arr.min() < 0:
        raise ValueError(f"{where}: expected node ids >= 0 (got {arr.min()})")
    return arr


def _as_float32(value: Any, where: str) -> np.ndarray:
    arr = value if isinstance(value, np.ndarray) else np.asarray(value)
    if arr.dtype == np.float32:
        return arr
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer) or arr.dtype == bool):
        raise ValueError(f"{where}: expected numeric features (got dtype {arr.dtype})")
    return arr.astype(np.float32)


def _labels_array(value: Any, where: str) -> np.ndarray:
    """Class labels as int64 ``[N]``; a ``[N, C]`` 0/1 matrix (C > 1) is multi-label, kept as uint8."""
    if np.ndim(value) == 2 and np.shape(value)[1] > 1:
        arr = np.asarray(value)
        if arr.dtype != bool and not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
            raise ValueError(f"{where}: expected a multi-label 0/1 matrix (got dtype {arr.dtype})")
        if arr.size and not np.isin(arr, (0, 1)).all():
            raise ValueError(f"{where}: a [N, C] multi-label matrix holds 0 and 1 only")
        return arr.astype(np.uint8, copy=False)
    arr = np.asarray(value).reshape(-1) if np.ndim(value) == 2 and np.shape(value)[1] == 1 else np.asarray(value)
    if not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{where}: expected integer labels (-1 = unlabelled) (got dtype {arr.dtype})")
    return arr.astype(np.int64, copy=False)


def _mask_array(value: Any, where: str) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype != bool and np.issubdtype(arr.dtype, np.integer) and arr.size and set(np.unique(arr).tolist()) <= {0, 1}:
        return arr.astype(bool)
    return arr


def _check_finite(x: np.ndarray, where: Any, field: str) -> None:
    # The single NaN/inf scan of a (possibly memory-mapped) feature matrix: chunked, once.
    try:
        check_finite_features(as_tensor(x, field), name=field)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from exc


def _build(where: Any, edge_index: np.ndarray, n: int, name: str, node_data: dict[str, Any]) -> Graph:
    """CSR from (source, target) pairs plus node data; Graph errors are prefixed with the file."""
    node_data = {k: v for k, v in node_data.items() if v is not None}
    try:
        ei = as_tensor(np.ascontiguousarray(edge_index, dtype=np.int64), "edge_index")
        if ei.numel() and int(ei.max()) >= n:
            raise ValueError(f"edge_index: node ids must lie in [0, {n}) (got {int(ei.max())})")
        indptr, indices = edges_to_csr(ei[0], ei[1], n)
        del ei
        return Graph(indptr=indptr, indices=indices, name=name, validate_features=False, **node_data)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from exc
