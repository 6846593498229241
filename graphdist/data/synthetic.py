"""Synthetic node-classification graphs: a degree-corrected stochastic block model.

``synthetic(num_nodes, ...)`` builds an undirected graph (both directions
stored) whose communities are the classes, whose degrees follow a power law,
and whose features are noisy class centroids. The structure is what makes it a
fair stand-in for real benchmarks in tests and benchmarks:

* edge homophily (share of edges joining same-label nodes) is ``homophily``
  (0.7 by default), so neighbourhood aggregation helps;
* a node's own features carry a weak label signal (``feature_signal``), so a
  linear model on ``x`` alone gets roughly half of 16 classes right while one on
  ``[x, mean of neighbours' x]`` gets about 90%: a GNN beats an MLP by a wide margin;
* expected degrees are Pareto with exponent ``degree_exponent`` (2.5) capped at
  the structural cutoff ``sqrt(num_nodes * avg_degree)``, so a few hubs have
  dozens of times the median degree, as in citation and product graphs.

How it is drawn (all vectorised torch, one ``torch.Generator`` seeded by ``seed``):

1. labels uniform over classes; degree propensities ``theta ~ Pareto``;
2. node v is the first endpoint of ``Poisson(lambda_v)`` edges, ``lambda`` proportional
   to ``theta`` and summing to ``num_nodes * avg_degree / 2`` undirected edges;
   these "stubs" are laid out class by class;
3. each stub's partner is, with probability ``p_in``, a uniformly chosen stub of
   the same class, otherwise a uniformly chosen stub of any class: picking a
   stub picks a node with probability proportional to its propensity, which
   is the degree-corrected SBM, without any per-draw binary search;
4. both directions are keyed ``dst * N + src`` and sorted once; dropping self
   loops and repeated keys leaves the CSR rows directly.

Self loops and multi-edges are removed, so the directed edge count comes out
about 1% under ``num_nodes * avg_degree`` (more for small dense graphs).

Example:
    >>> from graphdist.data.synthetic import synthetic
    >>> g = synthetic(2000, avg_degree=10, num_features=16, num_classes=4, seed=0)
    >>> g.num_nodes, g.num_features, g.num_classes
    (2000, 16, 4)
"""

from __future__ import annotations

import logging
import math
import os
import re
import warnings
from typing import Optional

import torch

from graphdist.data.graph import Graph, counts_to_indptr
from graphdist.data.synthetic_args import check_args as _check_args

logger = logging.getLogger(__name__)

# Defaults shared with the `synthetic-<N>` dataset names (loaders.py) and the dataset card.
DEFAULT_AVG_DEGREE = 20.0  # directed edges per node, as ogbn-products (~50) and arxiv (~14) bracket
DEFAULT_NUM_FEATURES = 100  # ogbn-products has 100 features
DEFAULT_NUM_CLASSES = 16
DEFAULT_HOMOPHILY = 0.7  # cora 0.81, pubmed 0.80, ogbn-arxiv 0.65, ogbn-products 0.81
DEFAULT_DEGREE_EXPONENT = 2.5  # P(degree = k) ~ k^-2.5: scale-free, finite mean, heavy tail
# Norm of a class centroid against unit per-feature noise: x alone gives ~50% accuracy on
# 16 classes, so aggregation has something to add (at 4.0 an MLP would be near-perfect).
DEFAULT_FEATURE_SIGNAL = 2.0
DEFAULT_SPLIT = (0.6, 0.2)  # train, val fractions; the rest is test

# Rows per chunk when adding centroids to the noise: a bounded temporary
# (64 Ki rows x 100 floats = 25 MiB) instead of a second [N, F] matrix.
_CHUNK_ROWS = 1 << 16

_SIZE_RE = re.compile(r"^synthetic-(\d+(?:\.\d+)?)([kmb]?)(-multilabel)?$", re.IGNORECASE)
MULTILABEL_SUFFIX = "-multilabel"  # synthetic-<N>-multilabel: the same graph family, multi-label y
_SUFFIX = {"": 1, "k": 1_000, "m": 1_000_000, "b": 1_000_000_000}


def parse_synthetic_name(name: str) -> Optional[int]:
    """The node count of a ``synthetic-<N>`` dataset name, or ``None`` if it is not one.

    ``N`` is an integer with an optional ``k``/``m``/``b`` suffix (``_`` separators allowed);
    ``synthetic-<N>-multilabel`` names the multi-label variant (``synthetic(N, multilabel=True)``).

    Example:
        >>> parse_synthetic_name("synthetic-100k"), parse_synthetic_name("synthetic-2500-multilabel")
        (100000, 2500)
        >>> parse_synthetic_name("synthetic-1.5m"), parse_synthetic_name("cora")
        (1500000, None)
    """
    match = _SIZE_RE.match(name.replace("_", ""))
    if match is None:
        return None
    value = float(match.group(1)) * _SUFFIX[match.group(2).lower()]
    if value != int(value) or value < 1:
        return None
    return int(value)


def synthetic(
    num_nodes: int,
    avg_degree: float = DEFAULT_AVG_DEGREE,
    num_features: int = DEFAULT_NUM_FEATURES,
    num_classes: int = DEFAULT_NUM_CLASSES,
    seed: int = 0,
    homophily: float = DEFAULT_HOMOPHILY,
    degree_exponent: float = DEFAULT_DEGREE_EXPONENT,
    feature_signal: float = DEFAULT_FEATURE_SIGNAL,
    train_frac: float = DEFAULT_SPLIT[0],
    val_frac: float = DEFAULT_SPLIT[1],
    max_degree: Optional[float] = None,
    name: Optional[str] = None,
    multilabel: bool = False,
    out: Optional[str | os.PathLike] = None,
) -> Graph:
    """Generates a community-structured, power-law graph with label-dependent features.

    Args:
        num_nodes: number of nodes (>= 2).
        avg_degree: directed edges per node before removing self loops and
            duplicates (default 20); the graph is undirected, so this is also
            the mean degree.
        num_features: feature dimension (default 100; 0 leaves ``x`` unset).
        num_classes: number of classes = communities (default 16).
        seed: seeds every random draw; the same seed gives the same graph (on the
            same torch version).
        homophily: expected share of edges joining same-label nodes, in
            ``[1/num_classes, 1]`` (default 0.7). Lower values are clipped to what
            random mixing gives, with a warning.
        degree_exponent: ``gamma`` of the degree tail ``P(k) ~ k^-gamma`` (> 1; default 2.5).
        feature_signal: Euclidean norm of a class centroid, against unit Gaussian noise per
            feature (default 2.0); larger makes ``x`` alone more predictive.
        train_frac: share of nodes in ``train_mask`` (default 0.6).
        val_frac: share in ``val_mask`` (default 0.2); the remaining nodes form ``test_mask``.
        max_degree: cap on a node's expected degree (default ``sqrt(num_nodes * avg_degree)``,
            the structural cutoff beyond which hub pairs would need multi-edges).
        name: graph name (default ``synthetic-<num_nodes>``).
        multilabel: ``y`` becomes a ``[N, C]`` 0/1 matrix: each node keeps its community's
            label and, with probability 1/2, a second label drawn uniformly, which also adds
            that label's own centroid to its features (so both are learnable). The graph,
            the masks and the single-label draws are the same as without it.
        out: generate out of core into this directory (``graphdist/data/synthetic_disk.py``: chunked,
            memory-mapped ``.npy`` files, reused when the arguments match) and return the graph
            memory-mapped; the same model, drawn in another order (not the in-memory graph).

    Returns:
        A ``Graph`` with ``x`` (float32), ``y`` (int64, or uint8 ``[N, C]`` multi-label) and the three masks.

    Raises:
        ValueError: on an out-of-range argument, naming it.

    Example:
        >>> g = synthetic(1000, avg_degree=8, num_features=8, num_classes=4, seed=1)
        >>> bool(g.train_mask.sum() == 600), g.num_edges <= 8000
        (True, True)
    """
    _check_args(num_nodes, avg_degree, num_features, num_classes, homophily, degree_exponent,
                feature_signal, train_frac, val_frac, max_degree)
    if out is not None:
        if multilabel:
            raise ValueError("multilabel: not available out of core (out=); generate it in memory")
        from graphdist.data.synthetic_disk import synthetic_to_disk

        return synthetic_to_disk(num_nodes, out, avg_degree, num_features, num_classes, seed, homophily,
                                 degree_exponent, feature_signal, train_frac, val_frac, max_degree, name)
    n = int(num_nodes)
    gen = torch.Generator().manual_seed(int(seed))

    y = torch.randint(0, num_classes, (n,), generator=gen)

    # Pareto propensities by inverse transform: theta = u^(-1/(gamma-1)) >= 1.
    u = torch.rand(n, generator=gen, dtype=torch.float64).clamp_min_(1e-300)
    theta = u.pow_(-1.0 / (degree_exponent - 1.0))
    # Expected degree is avg_degree * theta / mean(theta); cap it at max_degree.
    if avg_degree > 0:
        cap = math.sqrt(n * avg_degree) if max_degree is None else float(max_degree)
        theta.clamp_(max=cap * float(theta.mean()) / avg_degree)
    num_pairs = n * avg_degree / 2.0
    rate = theta.mul_(num_pairs / float(theta.sum()))
    stubs_per_node = torch.poisson(rate, generator=gen).to(torch.int64)
    del u, theta, rate

    # Stubs laid out class by class, so "a random stub of class c" is one index draw.
    by_class = torch.argsort(y, stable=True)
    stubs = torch.repeat_interleave(by_class, stubs_per_node[by_class])
    del by_class
    num_stubs = stubs.numel()
    class_stubs = torch.zeros(num_classes, dtype=torch.int64).index_add_(0, y, stubs_per_node)
    class_start = torch.cumsum(class_stubs, 0) - class_stubs
    del stubs_per_node

    # A random partner lands in the source's class with probability q = sum_c share_c^2;
    # p_in tops that up to the requested homophily: h = p_in + (1 - p_in) q.
    share = class_stubs.double() / max(num_stubs, 1)
    q = float((share * share).sum())
    p_in = (homophily - q) / (1.0 - q) if q < 1.0 else 1.0
    if p_in < 0.0:
        warnings.warn(
            f"homophily={homophily} is below what random mixing gives ({q:.3f}) for "
            f"num_classes={num_classes}; using {q:.3f}",
            stacklevel=2,
        )
    p_in = min(max(p_in, 0.0), 1.0)

    same = torch.rand(num_stubs, generator=gen) < p_in
    r = torch.rand(num_stubs, generator=gen, dtype=torch.float64)
    src_class = y[stubs]
    # float64 draws times counts below 2^53 give every stub an equal chance (up to rounding).
    pick = torch.where(same, class_start[src_class] + (r * class_stubs[src_class]).long(), (r * num_stubs).long())
    del same, r, src_class
    partners = stubs[pick.clamp_(max=max(num_stubs - 1, 0))]
    del pick

    indptr, indices = _symmetric_csr(stubs, partners, n)
    del stubs, partners

    x = _features(y, num_features, num_classes, feature_signal, gen) if num_features > 0 else None
    train_mask, val_mask, test_mask = _split(n, train_frac, val_frac, gen)
    if multilabel:  # drawn last: the single-label graph's draws are unchanged
        y = _second_labels(y, x, num_classes, feature_signal, gen)
    graph = Graph(
        indptr=indptr,
        indices=indices,
        x=x,
        y=y,
        train_mask=train_mask,
        val_mask=val_mask,
        test_mask=test_mask,
        name=name or f"synthetic-{n}",
        validate_features=False,  # Gaussian draws are finite; a scan of 400 MB would cost ~0.3 s
    )
    logger.debug("generated %r", graph)
    return graph


def _symmetric_csr(src: torch.Tensor, dst: torch.Tensor, num_nodes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """CSR of the undirected simple graph on the given pairs (both directions, no loops, no repeats).

    One sort of the 2E keys ``dst * N + src`` orders rows and their sources at
    once; since both directions are present, dropping equal neighbours removes
    duplicates symmetrically. (torch.sort: np.unique is 40-60x slower here.)
    """
    n = num_nodes
    loops = src == dst
    if bool(loops.any()):
        src, dst = src[~loops], dst[~loops]
    del loops
    keys = torch.cat([dst * n + src, src * n + dst])
    keys, _ = torch.sort(keys)
    if keys.numel():
        keep = torch.ones(keys.numel(), dtype=torch.bool)
        torch.ne(keys[1:], keys[:-1], out=keep[1:])
        keys = keys[keep]
        del keep
    rows = torch.div(keys, n, rounding_mode="floor")
    indices = keys.sub_(rows * n)  # in place: the keys are not needed afterwards
    indptr = counts_to_indptr(torch.bincount(rows, minlength=n))
    return indptr, indices


def _features(
    y: torch.Tensor, num_features: int, num_classes: int, signal: float, gen: torch.Generator
) -> torch.Tensor:
    """``x = centroid[y] + N(0, I)``, centroids ``N(0, signal^2 / F * I)``; float32."""
    n = y.numel()
    x = torch.randn(n, num_features, generator=gen)
    centroids = torch.randn(num_classes, num_features, generator=gen) * (signal / math.sqrt(num_features))
    for start in range(0, n, _CHUNK_ROWS):
        stop = min(start + _CHUNK_ROWS, n)
        x[start:stop] += centroids[y[start:stop]]
    return x


def _second_labels(y: torch.Tensor, x: Optional[torch.Tensor], num_classes: int, signal: float,
                   gen: torch.Generator) -> torch.Tensor:
    """Multi-label ``[N, C]`` uint8: the community label, plus a uniform second label for half the nodes,
    whose own centroid (independent of the communities') is added to ``x`` in place."""
    n = y.numel()
    labels = torch.zeros(n, num_classes, dtype=torch.uint8)
    labels[torch.arange(n), y] = 1
    has_second = torch.rand(n, generator=gen) < 0.5
    second = torch.randint(0, num_classes, (n,), generator=gen)
    labels[torch.arange(n)[has_second], second[has_second]] = 1
    if x is not None:
        centroids = torch.randn(num_classes, x.shape[1], generator=gen) * (signal / math.sqrt(x.shape[1]))
        x[has_second] += centroids[second[has_second]]
    return labels


def _split(
    n: int, train_frac: float, val_frac: float, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Disjoint random train/val/test masks of exact sizes ``round(frac * n)``."""
    perm = torch.randperm(n, generator=gen)
    n_train = int(round(train_frac * n))
    n_val = min(int(round(val_frac * n)), n - n_train)
    masks = []
    for lo, hi in ((0, n_train), (n_train, n_train + n_val), (n_train + n_val, n)):
        mask = torch.zeros(n, dtype=torch.bool)
        mask[perm[lo:hi]] = True
        masks.append(mask)
    return masks[0], masks[1], masks[2]


__all__ = ["synthetic", "parse_synthetic_name"]
