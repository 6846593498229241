"""Reads the graphdist ``.npz`` format (``datasets/README.md``) into a ``Graph``.

``edge_index``, dense ``x`` or CSR ``x_indptr/x_indices/x_data/x_shape``, ``y`` and masks;
members stored uncompressed are memory-mapped rather than read.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any, Optional

import numpy as np

from graphdist.data.graph import MASK_NAMES, Graph
from graphdist.data.readers.common import (
    PathLike,
    _as_float32,
    _build,
    _check_finite,
    _edge_index_array,
    _labels_array,
    _mask_array,
)


def load_npz(path: PathLike, name: Optional[str] = None) -> Graph:
    """Loads a graph stored in the graphdist ``.npz`` format (``datasets/README.md``).

    Keys: ``edge_index`` int ``[2, E]`` (source, target); ``x`` float ``[N, F]`` or CSR
    ``x_indptr``, ``x_indices``, ``x_data``, ``x_shape``; optional ``y`` and masks.
    Members stored uncompressed are memory-mapped instead of read.

    Raises:
        ValueError: a missing or malformed key (the message names the file and key).
        FileNotFoundError: no such file.

    Example:
        >>> import pathlib, tempfile
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "tiny.npz"
        >>> np.savez(path, edge_index=np.array([[0, 1, 1], [1, 0, 2]]), x=np.eye(3, dtype=np.float32))
        >>> g = load_npz(path)
        >>> g.name, g.num_nodes, g.num_edges
        ('tiny', 3, 3)
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    try:
        archive = np.load(path, allow_pickle=False)
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise ValueError(f"{path}: expected a numpy .npz archive (got an unreadable file: {exc})") from exc
    with archive:
        keys = set(archive.files)
        if "edge_index" not in keys:
            raise ValueError(f"{path}: expected key 'edge_index' (got keys {sorted(keys)})")

        def read(key: str) -> np.ndarray:
            mapped = _npz_member_memmap(path, key)
            return mapped if mapped is not None else archive[key]

        x: Optional[np.ndarray] = None
        if "x" in keys:
            x = _as_float32(read("x"), f"{path}: x")
            if x.ndim != 2:
                raise ValueError(f"{path}: expected x of shape [N, F] (got {x.shape})")
        elif "x_indptr" in keys:
            x = _csr_features_to_dense(archive, path)
        y = _labels_array(archive["y"], f"{path}: y") if "y" in keys else None
        if x is not None:
            n = int(x.shape[0])
        elif y is not None:
            n = int(y.shape[0])
        else:
            n = None
        edge_index = _edge_index_array(read("edge_index"), f"{path}: edge_index")
        if n is None:
            n = int(edge_index.max()) + 1 if edge_index.size else 0
        node_data: dict[str, Any] = {"x": x, "y": y}
        for mask in MASK_NAMES:
            if mask in keys:
                node_data[mask] = _mask_array(archive[mask], f"{path}: {mask}")
    if x is not None:
        _check_finite(x, path, "x")
    return _build(path, edge_index, n, name or path.stem, node_data)


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


def _csr_features_to_dense(archive: Any, path: Path) -> np.ndarray:
    """Densifies CSR features row block by row block (the dense matrix is the only big buffer)."""
    missing = [k for k in ("x_indptr", "x_indices", "x_data", "x_shape") if k not in archive.files]
    if missing:
        raise ValueError(f"{path}: CSR features need x_indptr, x_indices, x_data and x_shape (missing {missing})")
    shape = tuple(int(v) for v in np.asarray(archive["x_shape"]).reshape(-1))
    if len(shape) != 2 or min(shape) < 0:
        raise ValueError(f"{path}: expected x_shape = [N, F] (got {list(shape)})")
    n, f = shape
    indptr = np.asarray(archive["x_indptr"]).astype(np.int64, copy=False)
    indices = np.asarray(archive["x_indices"])
    data = _as_float32(archive["x_data"], f"{path}: x_data")
    if indptr.ndim != 1 or indptr.shape[0] != n + 1:
        raise ValueError(f"{path}: expected x_indptr of length N + 1 = {n + 1} (got shape {indptr.shape})")
    if indptr[0] != 0 or indptr[-1] != indices.shape[0] or np.any(np.diff(indptr) < 0):
        raise ValueError(
            f"{path}: expected x_indptr non-decreasing from 0 to len(x_indices) = {indices.shape[0]} "
            f"(got {indptr[0]}..{indptr[-1]})"
        )
    if data.shape != indices.shape:
        raise ValueError(f"{path}: expected x_data and x_indices of equal length (got {data.shape} and {indices.shape})")
    if indices.size and (indices.min() < 0 or indices.max() >= f):
        raise ValueError(f"{path}: expected x_indices in [0, {f}) (got {indices.min()}..{indices.max()})")
    bad = ~np.isfinite(data)
    if bad.any():
        row = int(np.searchsorted(indptr, int(np.argmax(bad)), side="right") - 1)
        raise ValueError(f"{path}: x: features must be finite (got NaN or inf in row {row})")
    x = np.zeros((n, f), dtype=np.float32)
    block = 1 << 16
    for start in range(0, n, block):
        stop = min(start + block, n)
        lo, hi = int(indptr[start]), int(indptr[stop])
        rows = np.repeat(np.arange(start, stop), np.diff(indptr[start : stop + 1]))
        x[rows, indices[lo:hi]] = data[lo:hi]
    return x
