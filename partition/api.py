"""Public partitioning API: ``partition`` a graph into a directory, ``load_partition`` a part back.

Example:
    >>> import tempfile
    >>> import graphdist as gd
    >>> graph = gd.synthetic(2000, avg_degree=8, num_features=16, num_classes=4, seed=0)  # or gd.load_graph("cora")
    >>> out = gd.partition(graph, num_parts=4, method="metis", out=tempfile.mkdtemp() + "/parts-4")
    >>> part = gd.load_partition(out, 0)
    >>> part.num_parts, part.x.shape[0] == part.num_inner
    (4, True)
    >>> print(partition_stats(out).table())  # doctest: +ELLIPSIS
    part ...
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import sys
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import numpy as np

from graphdist.data.graph import Graph
from partition.format import (
    FORMAT_VERSION,
    Partition,
    PartitionFormatError,
    content_checksum,
    load_partition,
    read_meta,
    staged_directory,
    verify_files,
    write_partition_files,
)
from partition.edges import DEFAULT_EVAL_NEGATIVES, DEFAULT_FRACTIONS, EdgeSplit, check_fractions, split_edges, write_split
from partition.methods import METHODS, PARTITIONERS
from partition.views import load_structure, part_edges
from partition.methods.metis import DEFAULT_BALANCE, validate_balance
from partition.stats import PartitionStats, format_table, partition_stats

logger = logging.getLogger(__name__)

__all__ = [
    "FORMAT_VERSION",
    "MemoryEstimate",
    "Partition",
    "PartitionConfig",
    "PartitionFormatError",
    "PartitionStats",
    "content_checksum",
    "default_output",
    "check_disk_fits",
    "check_memory_fits",
    "estimate_memory",
    "format_table",
    "load_partition",
    "load_structure",
    "part_edges",
    "partition",
    "partition_stats",
    "read_meta",
    "verify_files",
]


@dataclass(frozen=True)
class PartitionConfig:
    """A validated partitioning request.

    Attributes:
        num_parts: parts to make, 1 <= num_parts <= num_nodes.
        method: one of ``metis``, ``random``, ``super``, ``stream``; metis by default
            because it keeps the most edges local, which is what training pays for.
        seed: seeds every random choice; equal seeds give byte-identical files.
        halo_hops: 1 by default: every in-neighbour of an inner node is local, enough for
            one hop of sampling without a remote CSR lookup; each extra hop multiplies storage.
        balance: METIS constraints; all three by default since train-node imbalance
            directly becomes step-time imbalance in minibatch training.
        force: replace an existing partition directory.
        options: method-specific keyword arguments (e.g. ``num_clusters`` for super).
        task: ``node`` (default) or ``link``: link prediction splits the edges first
            (``partition/edges.py``): held-out edges leave the message-passing graph.
        edge_split: link only: train, val, test shares of the edges.
        eval_negatives: link only: seeded negatives stored per held-out edge.
    """

    num_parts: int
    method: str = "metis"
    seed: int = 0
    halo_hops: int = 1
    balance: tuple[str, ...] = DEFAULT_BALANCE
    force: bool = False
    options: dict[str, Any] = field(default_factory=dict)
    task: str = "node"
    edge_split: tuple[float, float, float] = DEFAULT_FRACTIONS
    eval_negatives: int = DEFAULT_EVAL_NEGATIVES

    def __post_init__(self) -> None:
        if isinstance(self.num_parts, bool) or not isinstance(self.num_parts, (int, np.integer)) or self.num_parts < 1:
            raise ValueError(f"--num-parts: expected an integer >= 1 (got {self.num_parts!r})")
        if self.method not in METHODS:
            raise ValueError(f"--method: expected one of {', '.join(METHODS)} (got {self.method!r})")
        if isinstance(self.halo_hops, bool) or not isinstance(self.halo_hops, (int, np.integer)) or self.halo_hops < 1:
            raise ValueError(f"--halo-hops: expected an integer >= 1 (got {self.halo_hops!r})")
        if not isinstance(self.seed, (int, np.integer)) or isinstance(self.seed, bool) or self.seed < 0:
            raise ValueError(f"--seed: expected an integer >= 0 (got {self.seed!r})")
        object.__setattr__(self, "balance", validate_balance(self.balance))
        if self.task not in ("node", "link"):
            raise ValueError(f"--task: expected node or link (got {self.task!r})")
        object.__setattr__(self, "edge_split", check_fractions(self.edge_split))
        if isinstance(self.eval_negatives, bool) or int(self.eval_negatives) < 1:
            raise ValueError(f"--eval-negatives: expected an integer >= 1 (got {self.eval_negatives!r})")

    def check_graph(self, graph: Graph) -> None:
        """Raises ``ValueError`` when the graph cannot be partitioned this way."""
        if graph.num_edges == 0:
            raise ValueError(
                f"--dataset: graph {graph.name!r} has no edges ({graph.num_nodes:,} nodes); "
                "there is nothing to partition, check the dataset"
            )
        if self.num_parts > graph.num_nodes:
            raise ValueError(
                f"--num-parts: expected at most the number of nodes, {graph.num_nodes:,} (got {self.num_parts:,})"
            )


def partition(
    graph: Union[Graph, str, os.PathLike],
    num_parts: int,
    method: str = "metis",
    out: Optional[Union[str, os.PathLike]] = None,
    seed: int = 0,
    halo_hops: int = 1,
    balance: Union[str, Sequence[str]] = DEFAULT_BALANCE,
    force: bool = False,
    *,
    progress: bool = False,
    command: Optional[Sequence[str]] = None,
    options: Optional[dict[str, Any]] = None,
    source: Optional[str] = None,
    task: str = "node",
    edge_split: Sequence[float] = DEFAULT_FRACTIONS,
    eval_negatives: int = DEFAULT_EVAL_NEGATIVES,
) -> Path:
    """Partitions ``graph`` and writes a checksummed partition directory.

    The output is staged in a hidden sibling directory and renamed into place
    only when complete; an error at any point leaves no ``out``.

    Args:
        graph: a `Graph`, or a dataset name/path for ``graphdist.data.load_graph``.
        num_parts: number of parts, 1 <= num_parts <= num_nodes.
        method: ``metis`` (default), ``random``, ``super`` or ``stream``.
        out: output directory; default
            ``$GRAPHDIST_CACHE/partitions/<dataset>-<method>-<parts>-s<seed>-h<halo>``.
        seed: random seed (default 0).
        halo_hops: halo depth (default 1).
        balance: METIS balance constraints (default ``("nodes", "train", "edges")``).
        force: replace an existing partition directory at ``out`` (default False).
        progress: show a tqdm bar per phase on stderr (default False).
        command: the command line to record in ``meta.json`` (default ``sys.argv``).
        options: method-specific keyword arguments.
        source: a key of the input's content (``graphdist.data.loaders.source_key``) recorded in
            ``meta.json`` as ``source``, so a cache of partitions can tell a stale one.
        task: ``node`` (default) or ``link``: link prediction splits the edges before partitioning
            (``partition/edges.py``); the parts hold the message-passing graph and the split.
        edge_split: link only: train, val, test shares of the edges (default 0.85, 0.05, 0.10).
        eval_negatives: link only: seeded negatives per held-out edge (default 100).

    Returns:
        The partition directory.

    Raises:
        ValueError: bad arguments or an unpartitionable graph (no edges, too few nodes).
        FileExistsError: ``out`` exists and ``force`` is False.
        PermissionError: ``out`` cannot be written.

    Example:
        >>> from graphdist.testing import tiny_graph
        >>> import tempfile
        >>> out = partition(tiny_graph(), 2, out=tempfile.mkdtemp() + "/tiny-2")
        >>> read_meta(out)["num_parts"]
        2
    """
    config = PartitionConfig(
        num_parts=num_parts, method=method, seed=seed, halo_hops=halo_hops, balance=balance, force=force,
        options=dict(options or {}), task=task, edge_split=tuple(edge_split), eval_negatives=eval_negatives,
    )
    graph = _as_graph(graph)
    config.check_graph(graph)
    check_memory_fits(graph, config)
    target = Path(out) if out is not None else default_output(graph.name, config, source)
    check_disk_fits(target, graph)
    split = None
    if config.task == "link":  # first: the parts are made of the message-passing graph
        graph, split = split_edges(graph, config.edge_split, config.seed, config.eval_negatives)
    with staged_directory(target, force=config.force) as tmp:
        parts, info = _run_partitioner(graph, config, progress)
        _refuse_empty_parts(parts, graph, config)
        _write(tmp, graph, parts, config, info, command, progress, source, split)
    logger.debug("wrote %s (%s, %d parts)", target, config.method, config.num_parts)
    return target


def _refuse_empty_parts(parts: np.ndarray, graph: Graph, config: PartitionConfig) -> None:
    """A part with no node is a worker with nothing to do: refuse, naming how many parts the graph can fill."""
    used = int(np.unique(parts).size)
    if used < config.num_parts:
        raise ValueError(
            f"--num-parts {config.num_parts}: {config.method} leaves {config.num_parts - used:,} of the parts empty "
            f"on {graph.name} ({graph.num_nodes:,} nodes); use at most {used:,} parts (far fewer for useful "
            f"training: each part should hold some train nodes)"
        )


def default_output(dataset: str, config: PartitionConfig, source: Optional[str] = None) -> Path:
    """``$GRAPHDIST_CACHE/partitions/<dataset>[-<source>]-<method>-<parts>-s<seed>-h<halo>`` (cache default
    ~/.cache/graphdist); ``source`` is the input's content key (none for generated graphs, which the name fixes)."""
    from graphdist.data.loaders import cache_dir

    cache = cache_dir()
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(str(dataset)).stem or "graph")
    if source and source != "gen":
        name = f"{name}-{source}"
    suffix = ""
    if config.task == "link":  # never the node-classification directory: its graph still holds the test edges
        suffix = "-link-" + "-".join(f"{f:g}" for f in config.edge_split) + f"-n{config.eval_negatives}"
    return cache / "partitions" / f"{name}-{config.method}-{config.num_parts}-s{config.seed}-h{config.halo_hops}{suffix}"


def _as_graph(graph: Union[Graph, str, os.PathLike]) -> Graph:
    if isinstance(graph, Graph):
        return graph
    from graphdist.data import load_graph  # loaders pull in more; only needed for names

    return load_graph(str(graph))


def _run_partitioner(graph: Graph, config: PartitionConfig, progress: bool) -> tuple[np.ndarray, dict[str, Any]]:
    from tqdm import tqdm

    info: dict[str, Any] = {}
    kwargs = dict(config.options)
    if config.method == "metis":
        kwargs.update(balance=config.balance, info=info)
    if config.method == "stream":  # the one method long enough to need its own rate and ETA
        with tqdm(total=graph.num_nodes, desc="partition (stream)", unit="node", unit_scale=True,
                  disable=not progress) as bar:
            parts = PARTITIONERS["stream"](graph, config.num_parts, seed=config.seed, on_block=bar.update, **kwargs)
        return np.asarray(parts, dtype=np.int64), info
    with tqdm(total=1, desc=f"partition ({config.method})", unit="step", disable=not progress, leave=True) as bar:
        parts = PARTITIONERS[config.method](graph, config.num_parts, seed=config.seed, **kwargs)
        bar.update(1)
    return np.asarray(parts, dtype=np.int64), info


def _write(
    root: Path,
    graph: Graph,
    parts: np.ndarray,
    config: PartitionConfig,
    info: dict[str, Any],
    command: Optional[Sequence[str]],
    progress: bool,
    source: Optional[str] = None,
    split: Optional[EdgeSplit] = None,
) -> dict[str, Any]:
    from tqdm import tqdm

    argv = list(command) if command is not None else list(sys.argv)
    args = asdict(config)
    args["balance"] = list(config.balance)
    args["edge_split"] = list(config.edge_split)
    extra = {
        "command": shlex.join(argv),
        "args": args,
        "method": config.method,
        "seed": config.seed,
        "balance": list(config.balance) if config.method == "metis" else None,
        "method_info": info,
        "source": source,
    }
    with ExitStack() as stack:
        # Halo depth 1: the two scans over every row (rows/s, ETA); deeper: one bar per phase,
        # advancing together because parts are built and written one at a time.
        scan = stack.enter_context(tqdm(total=2 * graph.num_nodes, desc="scan (halo, rows)", unit="row",
                                        unit_scale=True, disable=not progress or config.halo_hops != 1))
        relabel = stack.enter_context(tqdm(total=config.num_parts, desc="relabel", unit="part",
                                           disable=not progress or config.halo_hops == 1))
        write = stack.enter_context(tqdm(total=config.num_parts, desc="write", unit="part",
                                         disable=not progress or config.halo_hops == 1))

        def link_split(tmp: Path, ids: Any, part_meta: list[dict[str, Any]], files: dict[str, Any]) -> dict[str, Any]:
            return write_split(tmp, split, ids.new_ids, ids.part_offsets, part_meta, files)

        return write_partition_files(
            root, graph, parts, config.num_parts, config.halo_hops, meta_extra=extra,
            on_relabel=lambda _: relabel.update(1), on_write=lambda _: write.update(1),
            extras=link_split if split is not None else None, on_rows=scan.update,
        )


# ------------------------------------------------------------------ memory
@dataclass
class MemoryEstimate:
    """Rough peak resident memory per phase, in bytes (graph held throughout)."""

    graph: int
    partition: int
    write: int

    @property
    def peak(self) -> int:
        return self.graph + max(self.partition, self.write)

    def describe(self) -> str:
        gib = 1 << 30
        return (
            f"memory estimate: peak {self.peak / gib:.2f} GiB "
            f"(graph {self.graph / gib:.2f} + partition {self.partition / gib:.2f} | write {self.write / gib:.2f})"
        )


def estimate_memory(
    num_nodes: int, num_edges: int, num_parts: int, method: str = "metis", feature_dim: int = 0, halo_hops: int = 1
) -> MemoryEstimate:
    """Estimates peak memory of partitioning a graph of this size.

    Per-element costs were fitted to ``bench/bench_partition.py`` (1M nodes,
    ~20M directed edges, 8 parts: metis peaked at ~3.1 GiB including the
    generator and ~0.35 GiB of interpreter and torch). METIS's working set
    dominates, roughly ``80 B/edge + 300 B/node`` beyond the input CSR. Deeper
    halos multiply the write phase by the neighbourhood growth, unknown before
    partitioning, so ``halo_hops > 1`` uses a conservative factor.

    Example:
        >>> est = estimate_memory(1_000_000, 20_000_000, 8)
        >>> 1 < est.peak / 2**30 < 4
        True
    """
    n, e = int(num_nodes), int(num_edges)
    runtime = 350 << 20  # interpreter, torch, numpy
    graph = runtime + 8 * (n + 1) + 8 * e + 4 * n * int(feature_dim) + 12 * n  # CSR + x + labels/masks
    symmetrise = 24 * e  # destination ids, forward and reverse keys while checking symmetry
    metis_work = 80 * e + 300 * n
    by_method = {
        "metis": max(symmetrise, metis_work) + 16 * n,
        "super": max(symmetrise, metis_work) + 16 * n,
        "random": 16 * n,
        "stream": 32 * n,
    }
    if halo_hops == 1:
        # partition/scan.py: id maps and halo marks (~40 B/node), one block of edges and of features.
        from partition.scan import BLOCK_BYTES, BLOCK_EDGES

        write = int(40 * n + 48 * min(e, BLOCK_EDGES) + min(BLOCK_BYTES, 4 * n * int(feature_dim)))
    else:
        part_edges = e / max(num_parts, 1) * 4 * (halo_hops - 1)
        write = int(32 * n + 40 * part_edges + 4 * (n / max(num_parts, 1)) * int(feature_dim))
    return MemoryEstimate(graph=graph, partition=int(by_method.get(method, metis_work)), write=write)


def check_disk_fits(out: Path, graph: Graph) -> None:
    """Refuses before partitioning when the output cannot fit: features and edge lists are written once
    whatever the method (local column ids as int64), so their size is a lower bound of the directory's
    (10M nodes, 200M edges, 100 features: 5.6 GB of the 6.1 GB written).

    Raises:
        ValueError: naming the directory, the bytes needed and the bytes free (nothing written).
    """
    from graphdist.data.paths import free_bytes, human_bytes

    needed = graph.num_edges * 8 + (graph.x.numel() * graph.x.element_size() if graph.x is not None else 0)
    free = free_bytes(out)
    if free is not None and free < needed:
        raise ValueError(f"--out {out}: the partition directory needs at least {human_bytes(needed)} and "
                         f"{human_bytes(free)} is free there; free space or choose another --out")


def check_memory_fits(graph: Graph, config: PartitionConfig) -> None:
    """Refuses, before any work, a METIS-based partitioning whose working set exceeds the memory available.

    METIS holds its own copy of the symmetric graph plus its coarsening levels
    (:func:`estimate_memory`); the streaming methods need O(N) beside one block of edges and fit.
    A memory-mapped graph's arrays are not counted: they page in as read.

    Raises:
        ValueError: naming the estimate, what is available, and the methods that fit (before any work).
    """
    if config.method not in ("metis", "super"):
        return
    import psutil

    est = estimate_memory(graph.num_nodes, graph.num_edges, config.num_parts, config.method, graph.num_features,
                          config.halo_hops)
    needed = est.partition + 8 * (graph.num_nodes + 1) + 8 * graph.num_edges  # METIS's int64 copy of the CSR
    available = psutil.virtual_memory().available
    if needed > available:
        raise ValueError(
            f"--method {config.method}: METIS needs about {needed / 2**30:.1f} GiB for {graph.num_nodes:,} nodes and "
            f"{graph.num_edges:,} edges and {available / 2**30:.1f} GiB is available; use --method stream (one-pass, "
            f"O(N) memory) or random, or a machine with more memory")
