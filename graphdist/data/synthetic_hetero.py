"""Synthetic heterogeneous graphs: papers, authors, venues and featureless terms, ``synthetic-hetero-<N>``.

``synthetic_hetero(N)`` builds a typed graph (``graphdist.data.hetero``) in which a relation-aware
model has something to win over a homogeneous one: the label of a paper is best read from its
typed neighbourhood (its venue, its authors, the papers it cites), each relation carrying the
label with its own reliability, while the homogeneous view mixes all of them in one mean over
a padded feature table whose columns mean different things per type.

Every node has a latent class in ``0..7``; the paper's latent class is its label. How it is drawn
(one ``numpy.random.Generator`` seeded from ``(seed, N)``, vectorised, no loop over nodes or edges):

1. counts: one venue per 250 nodes (at least 8), 30% authors, 25% terms, the rest (about 44%) papers;
   each type's classes are balanced (a shuffled ``arange % 8``);
2. relations, each stored with its reverse, so every type receives messages:

   ===========================  =================================  ====================================
   relation (and reverse)       per paper                          on the other end
   ===========================  =================================  ====================================
   venue publishes paper        exactly one venue                  Poisson (uniform within a class)
   author writes paper          ``1 + Poisson(1.5)`` authors       Poisson (uniform within a class)
   paper cites paper            ``Poisson(5)`` references          power law: ``P(k) ~ k^-2.5``
   term describes paper         ``3 + Binomial(4, 1/2)`` terms     power law: ``P(k) ~ k^-2``
   ===========================  =================================  ====================================

   the other end is, with the relation's homophily (venue 0.6, author 0.4, cites 0.35, term 0.2),
   drawn among the nodes of the paper's class, else among all (by propensity on the power-law
   relations); repeated pairs and self-citations are dropped;
3. features: ``x = signal_t * W_t[class] + N(0, I)`` with one random ``W_t`` per type (unit-norm rows),
   widths paper 64, author 32, venue 16, term none; the paper's own signal is weak (1.0 against
   2.0 for authors and venues);
4. masks on papers only: a random 60/20/20 train/val/test split (``y = -1`` on the other types).

Memory: about 12 directed edges and 64 padded floats per node; in memory, 3M nodes (36M edges) peak
at about 4.5 GiB, most of it ``typed_graph`` sorting the CSR. From ``OUT_OF_CORE_NODES`` on, the
dataset names are generated once into the cache out of core, the same arrays bit for bit (one
relation's draws and one bucket of edges in memory at a time: 0.8 GiB peak at 3M nodes), and
memory-mapped afterwards (:func:`synthetic_hetero_to_disk`).

Example:
    >>> g = synthetic_hetero(2000, seed=0)
    >>> g.schema.node_types, g.schema.widths, g.schema.target
    (('paper', 'author', 'venue', 'term'), (64, 32, 16, 0), 'paper')
    >>> g.schema.num_relations, g.num_classes
    (8, 8)
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional

import numpy as np
import torch

from graphdist.data.graph import Graph
from graphdist.data.hetero import typed_graph
from graphdist.data.schema import Relation, Schema

logger = logging.getLogger(__name__)

NUM_CLASSES = 8
TARGET = "paper"
MIN_NODES = 100  # every type then has at least NUM_CLASSES nodes, so every class exists in every type
# Bumped whenever a draw changes: a cached out-of-core directory of another version is regenerated.
GENERATOR_VERSION = 2  # 2: the tuned noise (version 1 was drawn with two sets of knobs)

_NAME_RE = re.compile(r"^synthetic-hetero-(\d+(?:\.\d+)?)([kmb]?)$", re.IGNORECASE)
_SUFFIX = {"": 1, "k": 1_000, "m": 1_000_000, "b": 1_000_000_000}
_CHUNK_ROWS = 1 << 16  # rows per chunk when adding centroids: a bounded temporary
OUT_OF_CORE_MAX_NODES = 1 << 30  # 8 relations: (dst * 8 + relation) * N + src fits int64 below 2**30 nodes


@dataclass(frozen=True)
class HeteroParams:
    """The knobs behind the names; the defaults are what ``synthetic-hetero-<N>`` means.

    Tuned often (they set the accuracies in datasets/synthetic.md): the ``homophily_*`` and the
    ``signal_*`` fields. Seldom: the counts and degree laws.
    """

    # tuned often: how reliably each relation and each type's features carry the label
    homophily_venue: float = 0.6
    homophily_author: float = 0.4
    homophily_cites: float = 0.35
    homophily_term: float = 0.2
    signal_paper: float = 1.0  # weak: the label lies in the typed neighbourhood, not in x
    signal_author: float = 2.0
    signal_venue: float = 2.0
    # seldom: sizes, widths and degree laws
    nodes_per_venue: int = 250
    author_share: float = 0.30
    term_share: float = 0.25  # featureless, >= 20% of the nodes by design
    width_paper: int = 64
    width_author: int = 32
    width_venue: int = 16
    extra_authors: float = 1.5  # authors per paper: 1 + Poisson(extra_authors)
    references: float = 5.0  # citations per paper: Poisson(references)
    cites_exponent: float = 2.5  # in-degree tail of citations
    min_terms: int = 3  # terms per paper: min_terms + Binomial(extra_terms, 1/2)
    extra_terms: int = 4
    term_exponent: float = 2.0  # degree tail of terms
    train_frac: float = 0.6
    val_frac: float = 0.2


PARAMS = HeteroParams()


def parse_hetero_name(name: str) -> Optional[int]:
    """The node count of a ``synthetic-hetero-<N>`` name (``k``/``m``/``b`` suffix allowed), or ``None``.

    Example:
        >>> parse_hetero_name("synthetic-hetero-100k"), parse_hetero_name("synthetic-hetero-2500")
        (100000, 2500)
        >>> parse_hetero_name("synthetic-100k"), parse_hetero_name("synthetic-hetero-1.5")
        (None, None)
    """
    match = _NAME_RE.match(name.strip().replace("_", ""))
    if match is None:
        return None
    value = float(match.group(1)) * _SUFFIX[match.group(2).lower()]
    return int(value) if value == int(value) and value >= 1 else None


def type_counts(num_nodes: int, params: HeteroParams = PARAMS) -> dict[str, int]:
    """Nodes of every type, in id-range order.

    Example:
        >>> type_counts(100_000)
        {'paper': 44600, 'author': 30000, 'venue': 400, 'term': 25000}
    """
    n = int(num_nodes)
    venue = max(NUM_CLASSES, n // params.nodes_per_venue)
    author = int(round(params.author_share * n))
    term = int(math.ceil(params.term_share * n))
    return {"paper": n - venue - author - term, "author": author, "venue": venue, "term": term}


def synthetic_hetero(num_nodes: int, seed: int = 0, name: Optional[str] = None,
                     params: HeteroParams = PARAMS) -> Graph:
    """Generates the typed paper/author/venue/term graph of ``num_nodes`` nodes, in memory.

    Args:
        num_nodes: total node count over all types, in ``[100, 2**31)``.
        seed: with ``num_nodes``, seeds every draw: the same pair gives bit-identical arrays.
        name: the graph's name (default ``synthetic-hetero-<num_nodes>``).
        params: the generator's knobs (default :data:`PARAMS`, what the dataset names use).

    Returns:
        A typed ``Graph`` (``schema``, ``edge_type``) with ``x`` padded to 64 columns, ``y`` and masks
        on the papers.

    Raises:
        ValueError: ``num_nodes`` not an integer in ``[100, 2**31)``, or a negative seed.

    Example:
        >>> g = synthetic_hetero(500, seed=3)
        >>> g.num_nodes, g.schema.featureless, int(g.train_mask.sum()) == round(0.6 * g.schema.num_nodes("paper"))
        (500, ('term',), True)
    """
    _check_args(num_nodes, seed)
    n, p = int(num_nodes), params
    rng = np.random.default_rng([int(seed), n])
    counts = type_counts(n, p)
    classes = {t: rng.permutation(np.arange(c) % NUM_CLASSES) for t, c in counts.items()}
    edges: dict[tuple[str, str, str], Any] = {}
    for (src_type, forward, backward, dst_type), src, dst in _relations(rng, counts, classes, p):
        pairs = _unique_pairs(src, dst, counts[dst_type])
        edges[(src_type, forward, dst_type)] = pairs
        edges[(dst_type, backward, src_type)] = pairs.flip(0)
    x = {}
    for t, width, signal in _featured(p):
        x[t] = torch.from_numpy(np.concatenate([c for _, c in _feature_chunks(rng, classes[t], width, signal)]))
    masks = _split(rng, counts[TARGET], p.train_frac, p.val_frac)
    graph = typed_graph(counts, edges, x=x, y=torch.from_numpy(classes[TARGET]), masks=masks, target=TARGET,
                        name=name or f"synthetic-hetero-{n}")
    logger.debug("generated %r", graph)
    return graph


def _relations(rng: np.random.Generator, counts: dict[str, int], classes: dict[str, np.ndarray],
               p: HeteroParams) -> Iterator[tuple[tuple[str, str, str, str], np.ndarray, np.ndarray]]:
    """``((src_type, relation, reverse, dst_type), src, dst)`` per relation, ids within types, repeats kept.

    Drawn lazily, one relation at a time, in one fixed order: the in-memory and the out-of-core
    generators consume the same stream and so build the same graph.
    """
    y = classes[TARGET]
    papers = np.arange(counts["paper"])
    yield ("venue", "publishes", "published_in", "paper"), _Choice(classes["venue"]).draw(
        rng, y, p.homophily_venue), papers
    author_of = np.repeat(papers, 1 + rng.poisson(p.extra_authors, papers.size))
    author = _Choice(classes["author"]).draw(rng, y[author_of], p.homophily_author)
    yield ("author", "writes", "written_by", "paper"), author, author_of
    del author, author_of
    citing = np.repeat(papers, rng.poisson(p.references, papers.size))
    cited = _Choice(y, _pareto(rng, papers.size, p.cites_exponent)).draw(rng, y[citing], p.homophily_cites)
    keep = citing != cited
    yield ("paper", "cites", "cited_by", "paper"), citing[keep], cited[keep]
    del citing, cited, keep
    term_of = np.repeat(papers, p.min_terms + rng.binomial(p.extra_terms, 0.5, papers.size))
    weights = _pareto(rng, counts["term"], p.term_exponent)
    yield ("term", "describes", "has_term", "paper"), _Choice(classes["term"], weights).draw(
        rng, y[term_of], p.homophily_term), term_of


def _featured(p: HeteroParams) -> list[tuple[str, int, float]]:
    """``(type, width, signal)`` of the featured types, in id-range (and draw) order; terms have none."""
    return [("paper", p.width_paper, p.signal_paper), ("author", p.width_author, p.signal_author),
            ("venue", p.width_venue, p.signal_venue)]


def _check_args(num_nodes: int, seed: int) -> None:
    if int(num_nodes) != num_nodes or not MIN_NODES <= num_nodes < 2**31:
        raise ValueError(f"num_nodes: expected an integer in [{MIN_NODES}, 2**31): at least {MIN_NODES} so every "
                         f"type holds every class, int32 ids (got {num_nodes!r})")
    if int(seed) != seed or seed < 0:
        raise ValueError(f"seed: expected an integer >= 0 (got {seed!r})")


def expected_bytes(num_nodes: int, params: HeteroParams = PARAMS) -> int:
    """Disk a :func:`synthetic_hetero_to_disk` directory takes while it is generated, in bytes (int32 ids, int8
    relations, and the edges' int64 bucket keys until each bucket is sorted).

    Example:
        >>> round(expected_bytes(3_000_000) / 2**30, 2)
        1.21
    """
    n, p = int(num_nodes), params
    edges = _expected_edges(n, p)
    return int(n * (8 + 8 + 3 + 4 * p.width_paper) + edges * (4 + 1 + 8))  # + 8: the bucket keys


def _expected_edges(n: int, p: HeteroParams) -> float:
    """Directed edges expected (both directions of every relation, before repeats are dropped)."""
    return 2 * type_counts(n, p)["paper"] * (2 + p.extra_authors + p.references + p.min_terms + p.extra_terms / 2)


def synthetic_hetero_to_disk(num_nodes: int, out: os.PathLike | str, seed: int = 0,
                             name: Optional[str] = None, progress: Optional[bool] = None) -> Graph:
    """Generates ``synthetic_hetero(num_nodes, seed)`` into ``out`` out of core (or reuses it); returns it
    memory-mapped.

    The same draws as in memory, the same arrays bit for bit, without holding the edges: each
    relation's pairs go to destination-range bucket files as drawn, each bucket is sorted into its
    rows (relations, then sources, repeats dropped: the typed CSR's order), features are drawn and
    written in row chunks. The directory is a generated-graph directory (the layout of
    ``graphdist/data/synthetic_disk.py`` plus ``edge_type.npy`` and a ``schema`` entry in ``meta.json``),
    staged and renamed. A directory written by this version for the same ``(num_nodes, seed)`` is
    reused without generating.

    Raises:
        ValueError: as :func:`synthetic_hetero`, or ``2**30`` nodes or more (:data:`OUT_OF_CORE_MAX_NODES`).
        OSError: not enough disk for the directory (refused before generating).

    Example:
        >>> import tempfile
        >>> g = synthetic_hetero_to_disk(300, tempfile.mkdtemp() + "/h")
        >>> g.schema.node_types, g.indices.dtype, g.edge_type.dtype
        (('paper', 'author', 'venue', 'term'), torch.int32, torch.int8)
    """
    from graphdist.data.memory import peak_rss_bytes
    from graphdist.data.staging import staged_directory
    from graphdist.data.synthetic_disk import FORMAT, FORMAT_VERSION, _check_disk, load_generated

    out = Path(out)
    name = name or f"synthetic-hetero-{int(num_nodes)}"
    args = {"generator": "synthetic_hetero", "version": GENERATOR_VERSION, "num_nodes": int(num_nodes),
            "seed": int(seed)}
    try:
        if json.loads((out / "meta.json").read_text()).get("args") == args:
            return load_generated(out, name)
    except (OSError, ValueError):
        pass
    _check_args(num_nodes, seed)
    if num_nodes >= OUT_OF_CORE_MAX_NODES:
        raise ValueError(f"num_nodes: the out-of-core generator takes fewer than {OUT_OF_CORE_MAX_NODES:,} nodes "
                         f"(its bucket keys (dst * 8 + relation) * N + src must fit int64; got {int(num_nodes):,})")
    _check_disk(out, expected_bytes(num_nodes))
    if progress is None:
        progress = sys.stderr.isatty()
    started = time.perf_counter()
    with staged_directory(out, force=out.exists(), what="generated graph") as tmp:
        schema, num_edges = _generate(tmp, int(num_nodes), int(seed), PARAMS, progress)
        meta = {"format": FORMAT, "format_version": FORMAT_VERSION, "name": name, "args": args,
                "num_nodes": int(num_nodes), "num_edges": num_edges, "schema": schema.to_dict(),
                "seconds": round(time.perf_counter() - started, 2), "peak_rss_bytes": peak_rss_bytes()}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    logger.info("generated %s: %s nodes, %s edges in %.1f s (peak RSS %.2f GiB) at %s", name,
                f"{meta['num_nodes']:,}", f"{meta['num_edges']:,}", meta["seconds"], meta["peak_rss_bytes"] / 2**30, out)
    return load_generated(out, name)


def _generate(root: Path, n: int, seed: int, p: HeteroParams, progress: bool) -> tuple[Schema, int]:
    """Writes the CSR, ``edge_type``, ``x``, ``y`` and masks of ``synthetic_hetero(n, seed)`` into ``root``;
    returns the schema and the edge count. Peak memory: one relation's draws, then one bucket's sort."""
    from graphdist.data.npy import NpyWriter
    from graphdist.data.synthetic_disk import _BUCKET_KEYS, _Buckets, _write_csr

    rng = np.random.default_rng([seed, n])
    counts = type_counts(n, p)
    classes = {t: rng.permutation(np.arange(c) % NUM_CLASSES) for t, c in counts.items()}
    offsets = dict(zip(counts, np.cumsum([0, *counts.values()]).tolist()))
    relations, widths = [], dict.fromkeys(counts, 0)
    # Most edges end at papers (the lowest ids): four times the even share of buckets bounds the largest.
    buckets = _Buckets(root / "buckets", n, max(1, math.ceil(4 * _expected_edges(n, p) / _BUCKET_KEYS)),
                       relations=8)
    try:
        for (src_type, forward, backward, dst_type), src, dst in _relations(rng, counts, classes, p):
            src, dst = src + offsets[src_type], dst + offsets[dst_type]
            buckets.add_directed(dst, src, len(relations))
            buckets.add_directed(src, dst, len(relations) + 1)
            relations += [Relation(src_type, forward, dst_type), Relation(dst_type, backward, src_type)]
    finally:
        buckets.close()  # the staging directory goes with a failure; its open files must not outlive it
    num_edges = _write_csr(root, buckets, n, progress)
    featured = _featured(p)
    widths.update({t: w for t, w, _ in featured})
    width = max(widths.values())
    if [t for t, _, _ in featured] != [t for t in counts if widths[t]]:
        raise AssertionError("the featured types must be drawn in id-range order")
    with NpyWriter(root / "x.npy", (n, width), np.float32) as x:
        for t, w, signal in featured:
            for _, chunk in _feature_chunks(rng, classes[t], w, signal):
                x.write(np.pad(chunk, ((0, 0), (0, width - w))))
        rest = n - x.rows
        for start in range(0, rest, _CHUNK_ROWS):  # featureless types: zero rows
            x.write(np.zeros((min(_CHUNK_ROWS, rest - start), width), dtype=np.float32))
    target = (offsets[TARGET], offsets[TARGET] + counts[TARGET])
    y = np.full(n, -1, dtype=np.int64)
    y[target[0]:target[1]] = classes[TARGET]
    np.save(root / "y.npy", y)
    for field, mask in _split(rng, counts[TARGET], p.train_frac, p.val_frac).items():
        full = np.zeros(n, dtype=bool)
        full[target[0]:target[1]] = mask.numpy()
        np.save(root / f"{field}.npy", full)
    schema = Schema(tuple(counts), tuple(np.cumsum([0, *counts.values()]).tolist()), tuple(relations),
                    tuple(widths.values()), TARGET)
    return schema, num_edges


class _Choice:
    """Draws nodes of one type, each with probability proportional to its weight, within a class or overall.

    The nodes are laid out class by class with the cumulative weights, so a draw is one uniform
    number and one binary search (no per-class loop).
    """

    def __init__(self, classes: np.ndarray, weights: Optional[np.ndarray] = None) -> None:
        self.order = np.argsort(classes, kind="stable")
        w = np.ones(classes.size) if weights is None else weights[self.order]
        self.cumulative = np.cumsum(w)
        ends = np.cumsum(np.bincount(classes, minlength=NUM_CLASSES))
        self.hi = self.cumulative[ends - 1]
        self.lo = np.concatenate(([0.0], self.hi[:-1]))

    def draw(self, rng: np.random.Generator, want: np.ndarray, homophily: float) -> np.ndarray:
        """One node per entry of ``want``: of class ``want[i]`` with probability ``homophily``, else any."""
        same = rng.random(want.size) < homophily
        u = rng.random(want.size)
        lo = np.where(same, self.lo[want], 0.0)
        hi = np.where(same, self.hi[want], self.cumulative[-1])
        pick = np.searchsorted(self.cumulative, lo + u * (hi - lo), side="right")
        return self.order[np.minimum(pick, self.order.size - 1)]


def _pareto(rng: np.random.Generator, n: int, exponent: float) -> np.ndarray:
    """Propensities ``u^(-1/(gamma-1))``, so degrees follow ``P(k) ~ k^-gamma``, capped at ``sqrt(n)`` times
    the minimum (the structural cutoff: hubs beyond it would need repeated pairs)."""
    theta = (1.0 - rng.random(n)) ** (-1.0 / (exponent - 1.0))
    return np.minimum(theta, math.sqrt(n))


def _unique_pairs(src: np.ndarray, dst: np.ndarray, num_dst: int) -> torch.Tensor:
    """``[2, E]`` int32 (ids within types) of the distinct (src, dst) pairs, sorted (a torch sort: numpy's
    unique is slower here). int32 halves what the caller holds while ``typed_graph`` builds the CSR."""
    keys = torch.unique(torch.from_numpy(src.astype(np.int64) * num_dst + dst))
    return torch.stack([torch.div(keys, num_dst, rounding_mode="floor"), keys % num_dst]).to(torch.int32)


def _feature_chunks(rng: np.random.Generator, classes: np.ndarray, width: int, signal: float
                    ) -> Iterator[tuple[int, np.ndarray]]:
    """``(first row, rows)`` of ``signal * W[class] + N(0, I)`` float32, ``W`` a random matrix with unit-norm
    rows (one per type), ``_CHUNK_ROWS`` rows at a time (numpy draws the same numbers in chunks as at once)."""
    centroids = rng.standard_normal((NUM_CLASSES, width))
    centroids *= signal / np.linalg.norm(centroids, axis=1, keepdims=True)
    centroids = centroids.astype(np.float32)
    for start in range(0, classes.size, _CHUNK_ROWS):
        stop = min(start + _CHUNK_ROWS, classes.size)
        x = rng.standard_normal((stop - start, width), dtype=np.float32)
        x += centroids[classes[start:stop]]
        yield start, x


def _split(rng: np.random.Generator, n: int, train_frac: float, val_frac: float) -> dict[str, torch.Tensor]:
    """Disjoint random train/val/test masks of sizes ``round(frac * n)`` over the target type."""
    perm = rng.permutation(n)
    n_train = int(round(train_frac * n))
    n_val = min(int(round(val_frac * n)), n - n_train)
    masks = {}
    for field, lo, hi in (("train_mask", 0, n_train), ("val_mask", n_train, n_train + n_val),
                          ("test_mask", n_train + n_val, n)):
        mask = np.zeros(n, dtype=bool)
        mask[perm[lo:hi]] = True
        masks[field] = torch.from_numpy(mask)
    return masks


__all__ = ["HeteroParams", "NUM_CLASSES", "OUT_OF_CORE_MAX_NODES", "PARAMS", "expected_bytes", "parse_hetero_name", "synthetic_hetero",
           "synthetic_hetero_to_disk", "type_counts"]
