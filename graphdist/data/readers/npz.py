"""Reads the graphdist ``.npz`` format (``datasets/README.md``) into a ``Graph``.

``edge_index``, dense ``x`` or CSR ``x_indptr/x_indices/x_data/x_shape``, ``y`` and masks;
members stored uncompressed are memory-mapped rather than read. An archive of typed keys
(``edge_index__<src>__<rel>__<dst>``, ``x__<type>``, ...) is a typed graph: ``readers/typed_npz.py``.
"""

from __future__ import annotations

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
    _npz_member_memmap,  # here for the readers that import it from this module (ogb)
    open_npz,
)
from graphdist.data.readers.typed_npz import is_typed_npz, load_typed_npz


def load_npz(path: PathLike, name: Optional[str] = None) -> Graph:
    """Loads a graph stored in the graphdist ``.npz`` format (``datasets/README.md``).

    Keys: ``edge_index`` int ``[2, E]`` (source, target); ``x`` float ``[N, F]`` or CSR
    ``x_indptr``, ``x_indices``, ``x_data``, ``x_shape``; optional ``y`` and masks.
    Members stored uncompressed are memory-mapped instead of read. An archive of typed keys
    (``edge_index__<src>__<rel>__<dst>``, ...) is read by ``typed_npz.load_typed_npz`` into a typed graph.

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
    archive = open_npz(path)
    with archive:
        keys = set(archive.files)
        if is_typed_npz(keys):
            archive.close()  # the typed reader opens it itself
            return load_typed_npz(path, name)
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
