"""Reads OGB's heterogeneous node-property directories (ogbn-mag) into a typed graph, without ``ogb``.

The layout, as ogb's ``read_csv_heterograph_raw``, ``read_node_label_hetero`` and
``read_nodesplitidx_split_hetero`` (``ogb/io/read_graph_raw.py``) read it::

    ogbn_mag/
      raw/
        num-node-dict.csv.gz                  header: the node types; one row: their counts
        triplet-type-list.csv.gz              src,rel,dst of every relation (else: the folders below)
        relations/<src>___<rel>___<dst>/
          edge.csv.gz                         one src,dst row per edge, ids within their types
          num-edge-list.csv.gz                the edge count (checked when present)
          edge_reltype.csv.gz                 not read (the folder names the relation)
        node-feat/<type>/node-feat.csv.gz     features of the types that have them (mag: paper)
        node-label/<type>/node-label.csv.gz   [N, 1] labels of the labelled type, NaN: unlabelled
        nodetype-has-label.csv.gz             not read (node-label/<type> says it)
      split/<split>/<type>/{train,valid,test}.csv.gz   ids within the type (mag: split/time/paper)

The graph: the labelled type is the target, its ids first; the other types follow in
``num-node-dict``'s column order. The relations keep ``triplet-type-list``'s order; with
``add_inverse_edge`` (the default, as PyG's and DGL's ogbn-mag examples train) each relation between
two types gets its reverse, ``(dst, rev_<rel>, src)``, after all of them, and a relation within one
type (mag: ``paper__cites__paper``) is made symmetric in place (reverse edges added, duplicates
dropped), as PyG's ``ToUndirected`` does both. Not read: ``node_year`` and other extra node or edge
files, edge features, the binary layout (``raw/edge_index_dict.npz``, no OGB dataset uses it).
"""

from __future__ import annotations

import csv
import gzip
import io
from pathlib import Path
from typing import Optional

import numpy as np

from graphdist.data.graph import Graph
from graphdist.data.hetero import SEP, Relation, typed_graph
from graphdist.data.readers.common import PathLike, _check_finite
from graphdist.data.readers.ogb import _ogb_labels
from graphdist.data.readers.text import read_table

#: OGB's own split of ogbn-mag (``master.csv``, row ``split``): the default when ``split/`` holds it.
DEFAULT_SPLIT = "time"
OGB_SEP = "___"  # OGB's separator in relation folder names


def is_ogb_hetero_directory(path: PathLike) -> bool:
    """Whether ``path`` holds a heterogeneous OGB layout (``raw/num-node-dict.csv.gz`` or ``raw/relations/``).

    Example:
        >>> is_ogb_hetero_directory("/nonexistent/ogbn_mag")
        False
    """
    raw = Path(path) / "raw"
    return (raw / "num-node-dict.csv.gz").is_file() or (raw / "relations").is_dir()


def load_ogb_hetero(path: PathLike, split: Optional[str] = None, add_inverse_edge: Optional[bool] = None) -> Graph:
    """Loads a heterogeneous OGB node-property directory (ogbn-mag) as a typed graph.

    Args:
        path: the dataset directory (``dataset/ogbn_mag``).
        split: the ``split/<split>`` folder (default ``time``, OGB's split of ogbn-mag, when present;
            else the only one).
        add_inverse_edge: add each relation's reverse (``rev_<rel>``; a relation within one type made
            symmetric instead); default True.

    Returns:
        A typed ``Graph`` named after the folder (``ogbn-mag``), the labelled type as target.

    Raises:
        ValueError: a missing or malformed file, named in the message.

    Example:
        >>> import gzip, pathlib, tempfile
        >>> root = pathlib.Path(tempfile.mkdtemp()) / "ogbn_tiny"
        >>> def put(rel, text):
        ...     (root / rel).parent.mkdir(parents=True, exist_ok=True)
        ...     (root / rel).write_bytes(gzip.compress(text.encode()))
        >>> put("raw/num-node-dict.csv.gz", "author,paper\\n2,3\\n")
        >>> put("raw/relations/author___writes___paper/edge.csv.gz", "0,0\\n1,2\\n")
        >>> put("raw/node-label/paper/node-label.csv.gz", "1\\n0\\n1\\n")
        >>> g = load_ogb_hetero(root)
        >>> g.name, [r.key for r in g.schema.relations], g.num_edges
        ('ogbn-tiny', ['author__writes__paper', 'paper__rev_writes__author'], 4)
    """
    root = Path(path)
    raw = root / "raw"
    if add_inverse_edge is None:
        add_inverse_edge = True
    counts = _node_counts(root)
    relations = _relations(raw, counts)
    labelled = [t for t in counts if (raw / "node-label" / t / "node-label.csv.gz").is_file()]
    if len(labelled) > 1:
        raise ValueError(f"{raw / 'node-label'}: expected labels of one node type, the target (got {labelled})")
    target = labelled[0] if labelled else None

    edges: dict[Relation, np.ndarray] = {}
    for rel in relations:
        edges[rel] = _relation_edges(raw, rel, counts)
    if add_inverse_edge:
        for rel in list(edges):
            ei = edges[rel]
            if rel.src == rel.dst:
                edges[rel] = _symmetric(ei, counts[rel.src])
            else:
                edges[Relation(rel.dst, f"rev_{rel.name}", rel.src)] = np.ascontiguousarray(ei[::-1])

    x: dict[str, np.ndarray] = {}
    for t, n in counts.items():
        file = raw / "node-feat" / t / "node-feat.csv.gz"
        if file.is_file():
            feats = read_table(file, np.float32)
            if feats.shape[0] != n:
                raise ValueError(f"{file}: expected {n} feature rows, one per {t} node (got {feats.shape[0]})")
            _check_finite(feats, file, f"x[{t}]")
            x[t] = feats
    y = masks = None
    if target is not None:
        label_file = raw / "node-label" / target / "node-label.csv.gz"
        y = _ogb_labels(read_table(label_file, np.float64), counts[target], label_file)
        masks = _split_masks(root, target, counts[target], split)
    order = ([target] if target else []) + [t for t in counts if t != target]
    try:
        return typed_graph({t: counts[t] for t in order}, {r.key: ei for r, ei in edges.items()}, x=x, y=y,
                           masks=masks, target=target, name=root.name.replace("_", "-"))
    except ValueError as exc:
        raise ValueError(f"{root}: {exc}") from exc


def _node_counts(root: Path) -> dict[str, int]:
    """``raw/num-node-dict.csv.gz``: a header of type names over one row of counts."""
    file = root / "raw" / "num-node-dict.csv.gz"
    if not file.is_file():
        raise ValueError(f"{root}: a heterogeneous OGB directory (raw/relations/) needs {file}, the node count of "
                         "every type (a header of type names over one row of counts)")
    with gzip.open(file, "rt", newline="") as f:
        rows = [row for row in csv.reader(io.StringIO(f.read())) if row]
    if len(rows) != 2 or len(rows[0]) != len(rows[1]):
        raise ValueError(f"{file}: expected a header of type names over one row of counts, one graph (got {len(rows)} "
                         "rows; graph-property datasets hold several graphs)")
    counts = {}
    for t, value in zip(rows[0], rows[1]):
        t = t.strip()
        if not t or SEP in t:
            raise ValueError(f"{file}: expected node type names without '{SEP}' (got {t!r})")
        try:
            counts[t] = int(value)
        except ValueError:
            raise ValueError(f"{file}: expected an integer count for {t} (got {value!r})") from None
        if counts[t] < 0:
            raise ValueError(f"{file}: expected a count >= 0 for {t} (got {counts[t]})")
    return counts


def _relations(raw: Path, counts: dict[str, int]) -> list[Relation]:
    """The relations in ``triplet-type-list.csv.gz``'s order, else the folders' sorted order (OGB sorts too)."""
    listing = raw / "triplet-type-list.csv.gz"
    if listing.is_file():
        with gzip.open(listing, "rt", newline="") as f:
            triplets = [tuple(p.strip() for p in row) for row in csv.reader(io.StringIO(f.read())) if row]
        where = listing
    else:
        folder = raw / "relations"
        found = sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []
        triplets = [tuple(p.name.split(OGB_SEP)) for p in found]
        where = folder
    if not triplets:
        raise ValueError(f"{where}: expected at least one relation, a triplet-type-list.csv.gz row or a "
                         f"relations/<src>{OGB_SEP}<rel>{OGB_SEP}<dst>/ folder (got none)")
    relations = []
    for triplet in triplets:
        if len(triplet) != 3 or not all(triplet) or any(SEP in p for p in triplet):
            raise ValueError(f"{where}: expected src,rel,dst names without '{SEP}' (got {list(triplet)})")
        rel = Relation(*triplet)
        for end in (rel.src, rel.dst):
            if end not in counts:
                raise ValueError(f"{where}: relation {OGB_SEP.join(triplet)} names node type {end!r}, which "
                                 f"num-node-dict.csv.gz does not count (types: {list(counts)})")
        relations.append(rel)
    return relations


def _relation_edges(raw: Path, rel: Relation, counts: dict[str, int]) -> np.ndarray:
    folder = raw / "relations" / OGB_SEP.join((rel.src, rel.name, rel.dst))
    file = folder / "edge.csv.gz"
    if not file.is_file():
        raise ValueError(f"{folder}: expected edge.csv.gz, one src,dst row per {rel.key} edge")
    ei = read_table(file, np.int64, columns=2).T
    count_file = folder / "num-edge-list.csv.gz"
    if count_file.is_file():
        listed = read_table(count_file, np.int64).reshape(-1)
        if listed.size != 1 or int(listed[0]) != ei.shape[1]:
            raise ValueError(f"{count_file}: expected one count equal to edge.csv.gz's {ei.shape[1]} rows "
                             f"(got {listed.tolist()})")
    for row, end in ((0, rel.src), (1, rel.dst)):
        if ei.shape[1] and (ei[row].min() < 0 or ei[row].max() >= counts[end]):
            bad = ei[row].min() if ei[row].min() < 0 else ei[row].max()
            raise ValueError(f"{file}: column {row + 1} holds {end} ids, expected in [0, {counts[end]}) (got {bad})")
    return ei


def _symmetric(ei: np.ndarray, n: int) -> np.ndarray:
    """Both directions of every edge, each pair once (``torch_geometric.utils.to_undirected``)."""
    both = np.concatenate([ei, ei[::-1]], axis=1)
    key = np.unique(both[0] * n + both[1])
    return np.stack([key // n, key % n])


def _split_masks(root: Path, target: str, n: int, split: Optional[str]) -> dict[str, np.ndarray]:
    split_root = root / "split"
    kinds = sorted(p.name for p in split_root.iterdir() if p.is_dir()) if split_root.is_dir() else []
    if split is None:
        if not kinds:
            return {}
        if DEFAULT_SPLIT not in kinds and len(kinds) > 1:
            raise ValueError(f"{split_root}: expected split/{DEFAULT_SPLIT} or split=<name> (got {kinds})")
        split = DEFAULT_SPLIT if DEFAULT_SPLIT in kinds else kinds[0]
    folder = split_root / split / target
    if split not in kinds:
        raise ValueError(f"{split_root}: expected split={split!r} to be one of {kinds}")
    masks: dict[str, np.ndarray] = {}
    for part, mask_name in (("train", "train_mask"), ("valid", "val_mask"), ("test", "test_mask")):
        file = folder / f"{part}.csv.gz"
        if not file.is_file():
            continue
        ids = read_table(file, np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= n):
            raise ValueError(f"{file}: expected {target} ids in [0, {n}) (got {ids.min()}..{ids.max()})")
        mask = np.zeros(n, dtype=bool)
        mask[ids] = True
        masks[mask_name] = mask
    if not masks:
        raise ValueError(f"{split_root / split}: expected {target}/train.csv.gz, valid.csv.gz, test.csv.gz (the "
                         f"labelled type's split) (got none)")
    return masks


__all__ = ["DEFAULT_SPLIT", "is_ogb_hetero_directory", "load_ogb_hetero"]
