"""The link-prediction edge split: held-out edges, their negatives, and where they live in a partition.

``graphdist-partition --task link`` (and ``graphdist-train --task link`` partitioning on the fly)
splits the graph's edges before partitioning, seeded:

- ``train`` edges stay in the message-passing graph and are what the model learns to score;
- ``val`` and ``test`` edges are removed from it (both directions of an undirected edge), so no
  layer ever aggregates over an edge it is asked to predict;
- each ``val``/``test`` edge ``(u, v)`` gets ``eval_negatives`` seeded negatives ``(u, w)``: nodes
  ``w`` that are not neighbours of ``u`` in the original graph (nor ``u``), so every run, and the
  single-process reference, ranks a positive against the same candidates.

Each undirected edge is one candidate (self loops stay in the graph and are never held out).
An edge is stored with a random orientation, and belongs to the part that owns its first end
(``u``): that worker trains on it or scores it, whatever part ``v`` is in. In the partition
directory (format 2), per part, in new global ids::

    part-p/link_train.npy     int64 [2, E_train]   supervision edges (u in part p)
    part-p/link_val.npy       int64 [2, E_val]      held-out edges
    part-p/link_val_neg.npy   int64 [E_val, K]      K negatives w of each (u, v): pairs (u, w)
    part-p/link_test.npy ...  the same for test
    link_degree.npy           int64 [N]             message-passing degree (degree-biased negatives)

and ``meta.json`` records ``"task": "link"`` and ``"link"``: fractions, seed, K, counts.

Example:
    >>> import graphdist as gd
    >>> g = gd.synthetic(500, avg_degree=8, num_features=4, num_classes=2, seed=0)
    >>> mp, split = split_edges(g, (0.8, 0.1, 0.1), seed=0, eval_negatives=5)
    >>> split.val.shape[1] == split.val_neg.shape[0], split.val_neg.shape[1]
    (True, 5)
    >>> mp.num_edges == g.num_edges - 2 * (split.val.shape[1] + split.test.shape[1])
    True
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

import numpy as np

from graphdist.section import Section, fail

if TYPE_CHECKING:  # imported where used: the config reads this module's names without torch
    import torch

    from graphdist.data.graph import Graph

logger = logging.getLogger(__name__)

DEFAULT_FRACTIONS = (0.85, 0.05, 0.10)  # train, val, test: the split of the PyG/OGB link examples
DEFAULT_EVAL_NEGATIVES = 100  # per held-out edge: enough for MRR and Hits@10 to separate models
# How training draws its negatives (sampling/link.py): uniform over nodes, or ~ degree^0.75. The
# stored evaluation negatives are always uniform non-neighbours.
NEGATIVES = ("uniform", "degree")
_REDRAWS = 20  # rounds of redrawing negatives that hit a neighbour before keeping what is left
SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class LinkSection(Section):
    """Link prediction's options (``--task link``): the edge split, the negatives, the metric.

    Example:
        >>> LinkSection(edge_split=(0.8, 0.1, 0.1)).edge_split
        (0.8, 0.1, 0.1)
    """

    edge_split: tuple[float, ...] = DEFAULT_FRACTIONS  # train, val, test edges: the PyG/OGB examples' split
    eval_negatives: int = DEFAULT_EVAL_NEGATIVES  # stored negatives per held-out edge: MRR and Hits@10 need a few dozen
    num_negatives: int = 1  # negatives per positive edge in training (PyG's and DGL's examples use 1)
    neg_sampling: str = "uniform"  # "degree": negatives drawn ~ degree^0.75 (harder, closer to evaluation on hubs)
    hits_k: int = 10  # Hits@K of the held-out edges against their stored negatives

    def check(self) -> None:
        check_fractions(self.edge_split)
        if self.neg_sampling not in NEGATIVES:
            raise fail("neg-sampling", f"must be one of {', '.join(NEGATIVES)}", self.neg_sampling)
        for name in ("eval_negatives", "hits_k"):
            if getattr(self, name) < 1:
                raise fail(name, "must be >= 1", getattr(self, name))
        if self.num_negatives < 0:
            raise fail("num-negatives", "must be >= 0", self.num_negatives)


@dataclass
class EdgeSplit:
    """Held-out and supervision edges in original ids (``[2, E]``), negatives ``[E, K]`` per held-out edge."""

    fractions: tuple[float, float, float]
    seed: int
    eval_negatives: int
    undirected: bool
    train: np.ndarray
    val: np.ndarray
    val_neg: np.ndarray
    test: np.ndarray
    test_neg: np.ndarray
    degree: np.ndarray  # message-passing in-degree of every node (original ids)
    negatives_on_edges: int = 0  # negatives that hit a neighbour after every redraw (dense rows)

    def describe(self) -> dict[str, Any]:
        """What ``meta.json`` records as ``"link"``."""
        return {"fractions": list(self.fractions), "seed": self.seed, "eval_negatives": self.eval_negatives,
                "undirected": self.undirected, "num_train_edges": int(self.train.shape[1]),
                "num_val_edges": int(self.val.shape[1]), "num_test_edges": int(self.test.shape[1]),
                "negatives_on_edges": self.negatives_on_edges}


def check_fractions(fractions: Sequence[float]) -> tuple[float, float, float]:
    """Validated ``(train, val, test)``: three non-negative shares summing to 1, val and test above 0.

    Example:
        >>> check_fractions([0.85, 0.05, 0.1])
        (0.85, 0.05, 0.1)
    """
    values = tuple(float(f) for f in fractions)
    if len(values) != 3 or min(values) < 0 or abs(sum(values) - 1.0) > 1e-6 or values[1] <= 0 or values[2] <= 0:
        raise fail("edge-split", "expects train,val,test shares summing to 1 with val and test above 0, e.g. "
                   "0.85,0.05,0.10", ",".join(map(str, values)))
    return values  # type: ignore[return-value]


def _is_symmetric(keys: np.ndarray, src: np.ndarray, dst: np.ndarray, n: int) -> bool:
    """Whether every edge's reverse is an edge too (``keys``: sorted ``dst * n + src``)."""
    reverse = np.sort(src * n + dst)
    return reverse.size == keys.size and bool(np.array_equal(reverse, keys))


def split_edges(graph: "Graph", fractions: Sequence[float] = DEFAULT_FRACTIONS, seed: int = 0,
                eval_negatives: int = DEFAULT_EVAL_NEGATIVES) -> tuple["Graph", EdgeSplit]:
    """Splits ``graph``'s edges for link prediction; returns the message-passing graph and the split.

    Args:
        graph: the whole graph (original ids).
        fractions: train, val, test shares of the edge candidates (undirected edges once each).
        seed: seeds the split, the orientations and the negatives.
        eval_negatives: negatives per held-out edge (>= 1).

    Raises:
        ValueError: bad fractions or negatives, or a graph with too few edges to hold any out.
    """
    import torch

    from graphdist.data.graph import Graph

    fractions = check_fractions(fractions)
    if int(eval_negatives) < 1:
        raise ValueError(f"--eval-negatives: expected >= 1 (got {eval_negatives})")
    n = graph.num_nodes
    rng = np.random.default_rng(seed)
    src = graph.indices.numpy().astype(np.int64, copy=False)
    dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(graph.indptr.numpy()))
    keys = dst * n + src  # CSR order: sorted by row, then by source when built by Graph
    if keys.size > 1 and not bool((keys[1:] >= keys[:-1]).all()):
        keys = np.sort(keys)
    undirected = _is_symmetric(keys, src, dst, n)
    candidate = (src < dst) if undirected else (src != dst)
    cand_src, cand_dst = src[candidate], dst[candidate]
    if undirected or cand_src.size == 0:
        pass
    else:  # a directed multigraph: each distinct (src, dst) once
        uniq = np.unique(cand_dst * n + cand_src)
        cand_src, cand_dst = uniq % n, uniq // n
    total = cand_src.size
    n_val, n_test = int(round(fractions[1] * total)), int(round(fractions[2] * total))
    if n_val < 1 or n_test < 1 or total - n_val - n_test < 1:
        raise ValueError(f"--task link: {graph.name} has {total:,} edges to split; --edge-split "
                         f"{','.join(map(str, fractions))} leaves a split empty (needs a larger graph)")
    order = rng.permutation(total)
    # Random orientation: an edge's first end decides which part owns it, so ownership spreads
    # like the nodes do (u < v would give low ids more edges).
    flip = rng.random(total) < 0.5
    first = np.where(flip, cand_dst, cand_src)
    second = np.where(flip, cand_src, cand_dst)
    pick = {"val": order[:n_val], "test": order[n_val:n_val + n_test], "train": order[n_val + n_test:]}
    edges = {name: np.stack([first[idx], second[idx]]) for name, idx in pick.items()}
    held = np.concatenate([edges["val"], edges["test"]], axis=1)
    removed = held[1] * n + held[0]
    if undirected:
        removed = np.concatenate([removed, held[0] * n + held[1]])
    keep = ~np.isin(keys, removed)
    mp_src = keys[keep] % n
    mp_dst = keys[keep] // n
    mp = Graph.from_edge_index(torch.from_numpy(np.stack([mp_src, mp_dst])), num_nodes=n, name=graph.name,
                               validate_features=False, **graph.node_data())
    negatives, missed = {}, 0
    for name in ("val", "test"):
        negatives[name], hits = _negatives(edges[name][0], keys, n, int(eval_negatives), rng)
        missed += hits
    if missed:
        logger.warning("link split: %d of %d negatives are neighbours of their source after %d redraws "
                       "(very dense rows); they are kept", missed, (n_val + n_test) * int(eval_negatives), _REDRAWS)
    split = EdgeSplit(fractions=fractions, seed=int(seed), eval_negatives=int(eval_negatives), undirected=undirected,
                      train=edges["train"], val=edges["val"], val_neg=negatives["val"], test=edges["test"],
                      test_neg=negatives["test"], degree=np.diff(mp.indptr.numpy()), negatives_on_edges=missed)
    return mp, split


def _negatives(sources: np.ndarray, keys: np.ndarray, n: int, k: int,
               rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """``[len(sources), k]`` nodes that are neither ``u`` nor one of its neighbours (any direction),
    redrawn up to ``_REDRAWS`` times; returns them and how many still hit."""
    out = rng.integers(0, n, size=(sources.size, k), dtype=np.int64)
    u = np.repeat(sources, k).reshape(sources.size, k)
    for _ in range(_REDRAWS):
        bad = (out == u) | _is_edge(keys, u, out, n) | _is_edge(keys, out, u, n)
        count = int(bad.sum())
        if count == 0:
            return out, 0
        out[bad] = rng.integers(0, n, size=count, dtype=np.int64)
    bad = (out == u) | _is_edge(keys, u, out, n) | _is_edge(keys, out, u, n)
    return out, int(bad.sum())


def _is_edge(keys: np.ndarray, src: np.ndarray, dst: np.ndarray, n: int) -> np.ndarray:
    """Whether ``src -> dst`` is an edge, by binary search in the sorted keys ``dst * n + src``."""
    wanted = dst * n + src
    at = np.searchsorted(keys, wanted).clip(max=max(keys.size - 1, 0))
    return keys[at] == wanted if keys.size else np.zeros(wanted.shape, dtype=bool)


def link_files(part: int) -> dict[str, str]:
    """The link files of part ``part``, by name.

    Example:
        >>> link_files(1)["val_neg"]
        'part-1/link_val_neg.npy'
    """
    names = ("train", "val", "val_neg", "test", "test_neg")
    return {name: f"part-{part}/link_{name}.npy" for name in names}


DEGREE_FILE = "link_degree.npy"


def write_split(root: Path, split: EdgeSplit, new_ids: np.ndarray, part_offsets: np.ndarray,
                part_meta: list[dict[str, Any]], files: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Writes the split into a partition being staged at ``root``, in new global ids; returns meta entries.

    Args:
        new_ids: original id -> new global id.
        part_offsets: the parts' new-id ranges (a part owns ``part_offsets[p]:part_offsets[p+1]``).
        part_meta: each part's ``meta.json`` counts, updated with its edge counts.
        files: the checksummed file list, updated.
    """
    from partition.format import save_array

    def owner(ids: np.ndarray) -> np.ndarray:
        return np.searchsorted(part_offsets, ids, side="right") - 1

    relabelled = {"train": new_ids[split.train], "val": new_ids[split.val], "test": new_ids[split.test],
                  "val_neg": new_ids[split.val_neg], "test_neg": new_ids[split.test_neg]}
    owners = {name: owner(relabelled[name][0]) for name in SPLITS}
    for p, counts in enumerate(part_meta):
        paths = link_files(p)
        for name in SPLITS:
            mine = owners[name] == p
            save_array(root, paths[name], relabelled[name][:, mine], files)
            if name != "train":
                save_array(root, paths[f"{name}_neg"], relabelled[f"{name}_neg"][mine], files)
            counts[f"num_{name}_edges"] = int(mine.sum())
    degree = np.empty_like(split.degree)
    degree[new_ids] = split.degree
    save_array(root, DEGREE_FILE, degree.astype(np.int64, copy=False), files)
    return {"task": "link", "link": split.describe()}


@dataclass
class LinkEdges:
    """One worker's link-prediction edges (new global ids), for the parts it holds."""

    train: "torch.Tensor"  # [2, E]
    val: "torch.Tensor"
    val_neg: "torch.Tensor"  # [E, K]
    test: "torch.Tensor"
    test_neg: "torch.Tensor"


def load_link_edges(path: Any, parts: Sequence[int], meta: Optional[dict[str, Any]] = None) -> LinkEdges:
    """The link files of ``parts`` of a partition directory, concatenated part after part.

    Raises:
        PartitionFormatError: the directory was not made with ``--task link``, or a file is missing.
    """
    import torch

    from partition.format import PartitionFormatError, _load, read_meta

    root = Path(path)
    meta = meta if meta is not None else read_meta(root)
    if meta.get("task") != "link":
        raise PartitionFormatError(f"{root}: not a link-prediction partition (no edge split); partition it with "
                                   f"--task link")
    k = int(meta["link"]["eval_negatives"])
    loaded: dict[str, list[np.ndarray]] = {name: [] for name in ("train", "val", "val_neg", "test", "test_neg")}
    for p in parts:
        for name, rel in link_files(int(p)).items():
            loaded[name].append(_load(root, rel))

    def cat(name: str) -> "torch.Tensor":
        empty = np.zeros((0, k) if name.endswith("_neg") else (2, 0), dtype=np.int64)
        arrays = loaded[name] or [empty]
        return torch.from_numpy(np.concatenate(arrays, axis=0 if name.endswith("_neg") else 1))

    return LinkEdges(train=cat("train"), val=cat("val"), val_neg=cat("val_neg"), test=cat("test"),
                     test_neg=cat("test_neg"))


def load_degree(path: Any) -> "torch.Tensor":
    """Every node's message-passing degree (new global ids) from a link partition."""
    import torch

    from partition.format import _load

    return torch.from_numpy(np.array(_load(Path(path), DEGREE_FILE)))


__all__ = ["DEFAULT_EVAL_NEGATIVES", "DEFAULT_FRACTIONS", "NEGATIVES", "EdgeSplit", "LinkEdges", "LinkSection", "check_fractions",
           "link_files", "load_degree", "load_link_edges", "split_edges", "write_split"]
