"""Reads OGB node-property dataset directories as the ``ogb`` package lays them out, without ``ogb``.

Text ``raw/edge.csv.gz`` + ``num-node-list.csv.gz`` (+ ``node-feat``, ``node-label``) or the
binary ``raw/data.npz`` + ``node-label.npz``, with ``split/<type>/{train,valid,test}.csv.gz``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import numpy as np

from graphdist.data.graph import Graph
from graphdist.data.readers.common import PathLike, _as_float32, _build, _check_finite, _edge_index_array
from graphdist.data.readers.npz import _npz_member_memmap
from graphdist.data.readers.text import read_table

# ogb's master.csv: datasets whose edge.csv.gz stores one direction of an undirected graph.
_OGB_ADD_INVERSE = {"ogbn-proteins": True, "ogbn-products": True, "ogbn-arxiv": False, "ogbn-papers100M": False}


def is_ogb_directory(path: PathLike) -> bool:
    """Whether ``path`` is an OGB node-property folder: it holds ``raw/edge.csv.gz`` or the binary ``raw/data.npz``.

    Example:
        >>> is_ogb_directory("/nonexistent/ogbn_arxiv")
        False
    """
    raw = Path(path) / "raw"
    return (raw / "edge.csv.gz").is_file() or (raw / "data.npz").is_file()


def load_ogb(path: PathLike, split: Optional[str] = None, add_inverse_edge: Optional[bool] = None) -> Graph:
    """Loads an OGB node-property dataset directory as the ``ogb`` package lays it out.

    Reads ``raw/edge.csv.gz`` (one ``src,dst`` row per edge), ``raw/num-node-list.csv.gz``
    (which counts isolated nodes too), optional ``raw/node-feat.csv.gz`` and
    ``raw/node-label.csv.gz``; or the binary ``raw/data.npz`` (``edge_index``,
    ``node_feat``, ``num_nodes_list``) and ``raw/node-label.npz`` (``node_label``) that
    ogbn-papers100M uses. Splits come from ``split/<type>/{train,valid,test}.csv.gz``.
    Missing labels (NaN) become ``-1``. No network and no ``ogb`` import.

    Args:
        path: the dataset directory (e.g. ``dataset/ogbn_arxiv``).
        split: the split folder to use when ``split/`` holds several (default: the only one).
        add_inverse_edge: add every edge's reverse; default ogb's flag for the known
            dataset names (``ogbn-products``, ``ogbn-proteins``: True), else False.

    Raises:
        ValueError: malformed or inconsistent files (named in the message).

    Example:
        >>> import pathlib, tempfile
        >>> raw = pathlib.Path(tempfile.mkdtemp()) / "ogbn_tiny" / "raw"
        >>> raw.mkdir(parents=True)
        >>> np.savez(raw / "data.npz", edge_index=np.array([[0, 1], [1, 2]]), num_nodes_list=np.array([4]))
        >>> g = load_ogb(raw.parent)
        >>> g.name, g.num_nodes, g.num_edges  # node 3 has no edge; num_nodes_list counts it
        ('ogbn-tiny', 4, 2)
    """
    root = Path(path)
    raw = root / "raw"
    name = root.name.replace("_", "-")
    if add_inverse_edge is None:
        add_inverse_edge = _OGB_ADD_INVERSE.get(name, False)

    x: Optional[np.ndarray]
    if (raw / "data.npz").is_file():
        data_path = raw / "data.npz"
        with np.load(data_path, allow_pickle=False) as archive:
            for key in ("edge_index", "num_nodes_list"):
                if key not in archive.files:
                    raise ValueError(f"{data_path}: expected key {key!r} (got keys {sorted(archive.files)})")
            num_nodes_list = np.asarray(archive["num_nodes_list"]).reshape(-1)
            edge_source = _npz_member_memmap(data_path, "edge_index")
            edge_index = _edge_index_array(edge_source if edge_source is not None else archive["edge_index"],
                                           f"{data_path}: edge_index")
            x = None
            if "node_feat" in archive.files:
                feat = _npz_member_memmap(data_path, "node_feat")
                x = _as_float32(feat if feat is not None else archive["node_feat"], f"{data_path}: node_feat")
        label_path = raw / "node-label.npz"
        y_raw: Optional[np.ndarray] = None
        if label_path.is_file():
            with np.load(label_path, allow_pickle=False) as labels:
                if "node_label" not in labels.files:
                    raise ValueError(f"{label_path}: expected key 'node_label' (got keys {sorted(labels.files)})")
                y_raw = labels["node_label"]
        feat_file: Path = data_path
    else:
        edge_file = raw / "edge.csv.gz"
        count_file = raw / "num-node-list.csv.gz"
        if not count_file.is_file():
            raise ValueError(f"{root}: expected {count_file} next to {edge_file} (the node count, isolated nodes included)")
        num_nodes_list = read_table(count_file, np.int64).reshape(-1)
        edge_index = _edge_index_array(read_table(edge_file, np.int64, columns=2).T, f"{edge_file}")
        feat_file = raw / "node-feat.csv.gz"
        x = read_table(feat_file, np.float32) if feat_file.is_file() else None
        label_file = raw / "node-label.csv.gz"
        y_raw = read_table(label_file, np.float64) if label_file.is_file() else None

    if num_nodes_list.size != 1:
        raise ValueError(f"{raw}: expected one graph in num-node-list (got {num_nodes_list.size}); "
                         "graph-property datasets are not node-property datasets")
    n = int(num_nodes_list[0])
    if x is not None and x.shape[0] != n:
        raise ValueError(f"{feat_file}: expected {n} feature rows, one per node (got {x.shape[0]})")
    y = _ogb_labels(y_raw, n, raw) if y_raw is not None else None
    if add_inverse_edge:
        edge_index = np.concatenate([edge_index, edge_index[::-1]], axis=1)
    node_data: dict[str, Any] = {"x": x, "y": y}
    node_data.update(_ogb_split_masks(root, n, split))
    if x is not None:
        _check_finite(x, feat_file, "x")
    return _build(root, edge_index, n, name, node_data)


def _ogb_labels(y_raw: np.ndarray, n: int, where: Path) -> np.ndarray:
    y_raw = np.asarray(y_raw)
    if y_raw.ndim == 2 and y_raw.shape[1] != 1:
        raise ValueError(f"{where}: expected one label column (got {y_raw.shape[1]}: a multi-task dataset "
                         "such as ogbn-proteins, which graphdist's single-label Graph does not hold)")
    y_raw = y_raw.reshape(-1)
    if y_raw.shape[0] != n:
        raise ValueError(f"{where}: expected {n} labels, one per node (got {y_raw.shape[0]})")
    if np.issubdtype(y_raw.dtype, np.floating):
        missing = np.isnan(y_raw)
        y = np.where(missing, -1, y_raw).astype(np.int64)
    else:
        y = y_raw.astype(np.int64)
    return y


def _ogb_split_masks(root: Path, n: int, split: Optional[str]) -> dict[str, np.ndarray]:
    split_root = root / "split"
    if not split_root.is_dir():
        return {}
    kinds = sorted(p.name for p in split_root.iterdir() if p.is_dir())
    if split is None:
        if len(kinds) != 1:
            if not kinds:
                return {}
            raise ValueError(f"{split_root}: expected one split folder or split=<name> (got {kinds})")
        split = kinds[0]
    folder = split_root / split
    if not folder.is_dir():
        raise ValueError(f"{split_root}: expected split={split!r} to be one of {kinds}")
    masks: dict[str, np.ndarray] = {}
    for part, mask_name in (("train", "train_mask"), ("valid", "val_mask"), ("test", "test_mask")):
        file = next((folder / f"{part}{ext}" for ext in (".csv.gz", ".csv") if (folder / f"{part}{ext}").is_file()), None)
        if file is None:
            continue
        ids = read_table(file, np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= n):
            raise ValueError(f"{file}: expected node ids in [0, {n}) (got {ids.min()}..{ids.max()})")
        mask = np.zeros(n, dtype=bool)
        mask[ids] = True
        masks[mask_name] = mask
    return masks
