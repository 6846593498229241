"""Reads edge-list text files (``src dst`` per line), with optional feature and label files.

``.csv``, ``.tsv``, ``.txt``, ``.edges`` or ``.el``, optionally ``.gz``; features and labels
may be arrays, ``.npy`` (memory-mapped), ``.npz`` or text files.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Union

import numpy as np
import torch

from graphdist.data.graph import Graph
from graphdist.data.readers.common import PathLike, _build, _check_finite, _edge_index_array, _labels_array
from graphdist.data.readers.text import read_table

EDGE_LIST_SUFFIXES = (".csv", ".tsv", ".txt", ".edges", ".el")


def load_edge_list(
    path: PathLike,
    features: Optional[Union[PathLike, np.ndarray, torch.Tensor]] = None,
    labels: Optional[Union[PathLike, np.ndarray, torch.Tensor]] = None,
    num_nodes: Optional[int] = None,
) -> Graph:
    """Loads an edge list: one ``src dst`` pair per line (source, then destination).

    Separators may be commas, tabs, spaces or semicolons; lines starting with ``#``
    are comments; a first line that is not numeric is a header. Extra columns (e.g.
    weights) are ignored. Node ids are 0-based integers. Edges are kept as stored
    (an undirected graph must list both directions, or call ``.to_undirected()``).

    Args:
        path: the edge-list file (``.gz`` is decompressed on the fly).
        features: ``[N, F]`` features or a file of them (``.npy`` memory-mapped, ``.npz``,
            or text with one row per node).
        labels: ``[N]`` integer labels or a file of them.
        num_nodes: node count (default: rows of features or labels, else max id + 1).

    Raises:
        ValueError: a malformed line, a negative id, or sizes that disagree.

    Example:
        >>> import pathlib, tempfile
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "g.csv"
        >>> _ = p.write_text("src,dst\\n0,1\\n1,2\\n")
        >>> load_edge_list(p).num_edges
        2
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    try:
        table = read_table(path, np.int64, columns=None, allow_header=True)
    except ValueError as int_error:
        # Extra columns may be float weights: parse as floats, then insist on integer ids.
        try:
            table = read_table(path, np.float64, columns=None, allow_header=True)
        except ValueError:
            raise int_error from None
        ids = table[:, :2]
        if table.ndim != 2 or table.shape[1] < 3 or not np.array_equal(ids, np.round(ids)):
            raise int_error from None
        table = ids.astype(np.int64)
    if table.ndim != 2 or (table.size and table.shape[1] < 2):
        raise ValueError(f"{path}: expected at least two columns, src and dst (got {table.shape[1] if table.ndim == 2 else 1})")
    edge_index = _edge_index_array(table[:, :2].T, str(path)) if table.size else np.zeros((2, 0), np.int64)
    del table
    x = _load_array_arg(features, "features", np.float32) if features is not None else None
    y = _load_array_arg(labels, "labels", np.int64) if labels is not None else None
    if x is not None and x.ndim == 1:
        x = x.reshape(-1, 1)
    if y is not None:
        y = _labels_array(y, "labels")
    if num_nodes is None:
        candidates = [a.shape[0] for a in (x, y) if a is not None]
        if len(set(candidates)) > 1:
            raise ValueError(f"features and labels: expected the same number of rows (got {candidates[0]} and {candidates[1]})")
        num_nodes = candidates[0] if candidates else (int(edge_index.max()) + 1 if edge_index.size else 0)
    if x is not None:
        _check_finite(x, features if isinstance(features, (str, os.PathLike)) else "features", "x")
    return _build(path, edge_index, int(num_nodes), path.name.split(".")[0], {"x": x, "y": y})


def _load_array_arg(value: Union[PathLike, np.ndarray, torch.Tensor], what: str, dtype: type) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return value.numpy()
    if isinstance(value, np.ndarray):
        return value
    file = Path(value)
    if not file.is_file():
        raise FileNotFoundError(f"{what}: {file}: no such file")
    if file.suffix == ".npy":
        return np.load(file, mmap_mode="r", allow_pickle=False)
    if file.suffix == ".npz":
        wanted = "x" if what == "features" else "y"
        with np.load(file, allow_pickle=False) as archive:
            if wanted in archive.files:
                return archive[wanted]
            if len(archive.files) == 1:
                return archive[archive.files[0]]
            raise ValueError(f"{file}: expected a single array or key {wanted!r} (got keys {archive.files})")
    parsed = read_table(file, np.float32 if dtype is np.float32 else np.float64, allow_header=True)
    if dtype is np.int64:
        parsed = parsed.reshape(-1)
        if not np.all(np.isfinite(parsed)) or np.any(parsed != np.round(parsed)):
            raise ValueError(f"{file}: expected integer labels (got non-integer values)")
        return parsed.astype(np.int64)
    return parsed
