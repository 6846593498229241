"""The synthetic graph family written out of core: chunks of nodes in, memory-mapped ``.npy`` files out.

``synthetic(N, out=DIR)`` (and the dataset names ``synthetic-<N>`` from ``OUT_OF_CORE_NODES`` nodes
on) generate the same model as the in-memory generator — communities, power-law degrees,
homophily, label-dependent features — without ever holding the edges in memory:

1. per node (``N``-sized arrays only): community, degree propensity, stub count; each community's
   cumulative stub counts, so "a random stub of class c" is a binary search (the in-memory
   generator's stub array, 8 bytes per stub, is never built);
2. per chunk of source nodes: every stub picks a partner (its own class with probability
   ``p_in``, else any), both directions of each pair go to one of ``buckets`` files by destination
   range (an external bucket sort);
3. per bucket: sort, drop loops and repeats, append the rows to ``indices.npy`` (int32 when ids fit);
4. features ``centroid[y] + N(0, I)`` and the masks, chunk by chunk into ``x.npy``.

The directory is staged and renamed (``graphdist.data.staging``): an interrupted run leaves no
graph that looks complete; its ``meta.json`` records the arguments, and a directory written
with other arguments is regenerated. Peak memory is a few ``N``-sized arrays plus one chunk:
about ``60 B x N`` plus ``2 x 16 B x`` the edges of a bucket. The random draws follow their own
stream: the graph is of the same family as, not equal to, the in-memory one of the same size.

Layout::

    $GRAPHDIST_CACHE/graphs/<name>/
      meta.json                 arguments, counts, format
      indptr.npy  int64 [N+1]   CSR, rows = destinations (both directions stored)
      indices.npy int32|int64 [E]
      x.npy       float32 [N, F]
      y.npy       int64 [N]
      train_mask.npy val_mask.npy test_mask.npy   bool [N]
      edge_type.npy int8 [E]    typed graphs only (synthetic_hetero_to_disk), with a "schema" in meta.json

Example:
    >>> import tempfile
    >>> g = synthetic_to_disk(3000, tempfile.mkdtemp() + "/g", avg_degree=8, num_features=4, num_classes=3)
    >>> g.num_nodes, g.indices.dtype, g.num_edges <= 3000 * 8 * 1.2
    (3000, torch.int32, True)
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Optional

import numpy as np

from graphdist.data.graph import Graph, counts_to_indptr
from graphdist.data.memory import peak_rss_bytes
from graphdist.data.synthetic_args import check_args

logger = logging.getLogger(__name__)

FORMAT = "graphdist-generated-graph"
FORMAT_VERSION = 1
# Dataset names synthetic-<N> from this size on are generated out of core into the cache (the
# in-memory generator needs ~1.3 GB per million nodes at the default degree; 10M would be 13 GB).
OUT_OF_CORE_NODES = 2_000_000
_CHUNK_STUBS = 1 << 22  # stubs per chunk of source nodes: ~4M, ~400 MB of temporaries
_BUCKET_KEYS = 1 << 24  # directed edges per bucket: 16M keys, 128 MB to sort (twice that while sorting)


def expected_bytes(num_nodes: int, avg_degree: float, num_features: int) -> int:
    """Disk the generated directory needs (and its temporary bucket files beside it), in bytes.

    Example:
        >>> round(expected_bytes(10_000_000, 20, 100) / 2**30, 1)
        6.1
    """
    n, e = int(num_nodes), int(num_nodes * avg_degree)
    index_bytes = 4 if n < 2**31 else 8
    final = 8 * (n + 1) + index_bytes * e + 4 * n * int(num_features) + 8 * n + 3 * n
    buckets = 8 * e  # the directed keys, until each bucket is sorted into indices
    return final + buckets


def synthetic_to_disk(
    num_nodes: int,
    out: os.PathLike | str,
    avg_degree: float = 20.0,
    num_features: int = 100,
    num_classes: int = 16,
    seed: int = 0,
    homophily: float = 0.7,
    degree_exponent: float = 2.5,
    feature_signal: float = 2.0,
    train_frac: float = 0.6,
    val_frac: float = 0.2,
    max_degree: Optional[float] = None,
    name: Optional[str] = None,
    progress: Optional[bool] = None,
) -> Graph:
    """Generates the synthetic graph into ``out`` (or reuses it) and returns it memory-mapped.

    Arguments as ``graphdist.data.synthetic.synthetic``; ``progress`` shows a bar per phase (default:
    when stderr is a terminal).

    Raises:
        ValueError: an argument out of range (the in-memory generator's checks).
        OSError: not enough disk for the directory (refused before writing, with the estimate).
    """
    check_args(num_nodes, avg_degree, num_features, num_classes, homophily, degree_exponent, feature_signal,
                train_frac, val_frac, max_degree)
    out = Path(out)
    args = {"num_nodes": int(num_nodes), "avg_degree": float(avg_degree), "num_features": int(num_features),
            "num_classes": int(num_classes), "seed": int(seed), "homophily": float(homophily),
            "degree_exponent": float(degree_exponent), "feature_signal": float(feature_signal),
            "train_frac": float(train_frac), "val_frac": float(val_frac), "max_degree": max_degree}
    name = name or f"synthetic-{int(num_nodes)}"
    if _matches(out, args):
        return load_generated(out, name)
    _check_disk(out, expected_bytes(num_nodes, avg_degree, num_features))
    if progress is None:
        import sys

        progress = sys.stderr.isatty()
    from graphdist.data.staging import staged_directory

    started = time.perf_counter()
    with staged_directory(out, force=out.exists(), what="generated graph") as tmp:
        counts = _generate(tmp, args, progress)
        meta = {"format": FORMAT, "format_version": FORMAT_VERSION, "name": name, "args": args, **counts,
                "seconds": round(time.perf_counter() - started, 2), "peak_rss_bytes": peak_rss_bytes()}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    logger.info("generated %s: %s nodes, %s edges in %.1f s (peak RSS %.2f GiB) at %s", name, f"{counts['num_nodes']:,}",
                f"{counts['num_edges']:,}", meta["seconds"], meta["peak_rss_bytes"] / 2**30, out)
    return load_generated(out, name)


def _matches(out: Path, args: dict[str, Any]) -> bool:
    try:
        meta = json.loads((out / "meta.json").read_text())
    except (OSError, ValueError):
        return False
    return meta.get("format") == FORMAT and meta.get("format_version") == FORMAT_VERSION and meta.get("args") == args


def _check_disk(out: Path, needed: int) -> None:
    from graphdist.data.paths import free_bytes, human_bytes

    probe = out
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = free_bytes(probe)
    if free is not None and free < needed:
        raise OSError(f"{out}: generating this graph needs about {human_bytes(needed)} of disk and "
                      f"{human_bytes(free)} is free there; free space or point GRAPHDIST_CACHE elsewhere")


def load_generated(path: os.PathLike | str, name: Optional[str] = None) -> Graph:
    """A generated directory as a ``Graph`` whose arrays are memory maps (nothing large is read).

    Raises:
        ValueError: not a generated graph directory (no or foreign ``meta.json``).
    """
    path = Path(path)
    try:
        meta = json.loads((path / "meta.json").read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a generated graph directory ({exc})") from None
    if meta.get("format") != FORMAT:
        raise ValueError(f"{path}: not a generated graph directory (format {meta.get('format')!r})")

    def mapped(file: str) -> np.ndarray:
        return np.load(path / file, mmap_mode="r")

    masks = {m: mapped(f"{m}.npy") for m in ("train_mask", "val_mask", "test_mask")}
    typed: dict[str, Any] = {}
    if "schema" in meta:  # a typed graph (synthetic_hetero_to_disk): its node types and relations
        from graphdist.data.schema import Schema

        typed = {"schema": Schema.from_dict(meta["schema"]), "edge_type": mapped("edge_type.npy")}
    return Graph(indptr=mapped("indptr.npy"), indices=mapped("indices.npy"), x=mapped("x.npy"), y=mapped("y.npy"),
                 name=name or meta.get("name", path.name), validate_features=False, **masks, **typed)


# ------------------------------------------------------------------ generation


def _generate(root: Path, args: dict[str, Any], progress: bool) -> dict[str, int]:
    import torch
    from tqdm import tqdm

    n, c = args["num_nodes"], args["num_classes"]
    gen = torch.Generator().manual_seed(args["seed"])
    y = torch.randint(0, c, (n,), generator=gen)
    stubs = _stub_counts(n, args, gen)
    by_class = torch.argsort(y, stable=True)
    class_stubs = torch.zeros(c, dtype=torch.int64).index_add_(0, y, stubs)
    class_start = torch.cumsum(class_stubs, 0) - class_stubs
    cumulative = torch.cumsum(stubs[by_class], 0)  # stub j belongs to by_class[searchsorted(cumulative, j, right)]
    total = int(class_stubs.sum())
    share = class_stubs.double() / max(total, 1)
    q = float((share * share).sum())
    p_in = min(max((args["homophily"] - q) / (1.0 - q) if q < 1.0 else 1.0, 0.0), 1.0)
    buckets = _Buckets(root / "buckets", n, max(1, math.ceil(2 * total / _BUCKET_KEYS)))
    with tqdm(total=n, desc="edges", unit="node", unit_scale=True, disable=not progress) as bar:
        start = 0
        for stop in _chunk_bounds(stubs):
            src = torch.repeat_interleave(torch.arange(start, stop), stubs[start:stop])
            same = torch.rand(src.numel(), generator=gen) < p_in
            r = torch.rand(src.numel(), generator=gen, dtype=torch.float64)
            cls = y[src]
            pick = torch.where(same, class_start[cls] + (r * class_stubs[cls]).long(), (r * total).long())
            partner = by_class[torch.searchsorted(cumulative, pick.clamp_(max=max(total - 1, 0)), right=True)]
            buckets.add(src.numpy(), partner.numpy())
            bar.update(stop - start)
            start = stop
    del cumulative, by_class
    buckets.close()
    num_edges = _write_csr(root, buckets, n, progress)
    _write_features(root, y, args, gen, progress)
    _write_masks(root, n, args, gen)
    np.save(root / "y.npy", y.numpy())
    return {"num_nodes": n, "num_edges": num_edges}


def _stub_counts(n: int, args: dict[str, Any], gen: Any) -> Any:
    """Poisson stub counts from Pareto propensities capped at the structural cutoff (as in memory)."""
    import torch

    avg, gamma = args["avg_degree"], args["degree_exponent"]
    u = torch.rand(n, generator=gen, dtype=torch.float64).clamp_min_(1e-300)
    theta = u.pow_(-1.0 / (gamma - 1.0))
    if avg > 0:
        cap = math.sqrt(n * avg) if args["max_degree"] is None else float(args["max_degree"])
        theta.clamp_(max=cap * float(theta.mean()) / avg)
    rate = theta.mul_(n * avg / 2.0 / float(theta.sum()))
    return torch.poisson(rate, generator=gen).to(torch.int64)


def _chunk_bounds(stubs: Any) -> list[int]:
    """Node boundaries of chunks holding about ``_CHUNK_STUBS`` stubs each (the last chunk ends at N)."""
    ends = np.cumsum(stubs.numpy())
    cuts = np.searchsorted(ends, np.arange(_CHUNK_STUBS, int(ends[-1]) if ends.size else 0, _CHUNK_STUBS))
    bounds = sorted(set(int(b) + 1 for b in cuts) | {int(stubs.numel())})
    return [b for b in bounds if b > 0]


class _Buckets:
    """Directed keys ``(dst * R + relation) * N + src`` appended to one raw file per destination range.

    Sorting a bucket's keys orders its rows, each row's edges by relation (``R`` relations; 1 for an
    untyped graph), then by source: the typed CSR's order. ``R * N * N`` must fit int64.
    """

    def __init__(self, root: Path, n: int, count: int, relations: int = 1) -> None:
        if relations * n * n >= 2**63:
            raise ValueError(f"{n:,} nodes and {relations} relations: the bucket keys would overflow int64")
        root.mkdir(parents=True, exist_ok=True)
        self.root, self.n, self.count, self.relations = root, n, count, relations
        self.width = max(1, math.ceil(n / count))
        self.files = [open(root / f"{b}.bin", "wb") for b in range(count)]

    def add(self, src: np.ndarray, dst: np.ndarray) -> None:
        """Both directions of each pair, self loops dropped (the untyped generator's edges)."""
        keep = src != dst  # no self loops (as the in-memory generator)
        src, dst = src[keep], dst[keep]
        for rows, cols in ((dst, src), (src, dst)):
            self.add_directed(rows, cols)

    def add_directed(self, rows: np.ndarray, cols: np.ndarray, relation: int = 0) -> None:
        """Edges ``cols -> rows`` (global ids) of one relation."""
        keys = (rows.astype(np.int64) * self.relations + relation) * self.n + cols
        which = rows // self.width
        order = np.argsort(which, kind="stable")
        keys, which = keys[order], which[order]
        bounds = np.searchsorted(which, np.arange(self.count + 1))
        for b in range(self.count):
            if bounds[b + 1] > bounds[b]:
                keys[bounds[b] : bounds[b + 1]].tofile(self.files[b])

    def close(self) -> None:
        for fh in self.files:
            fh.close()

    def keys(self, b: int) -> np.ndarray:
        return np.fromfile(self.root / f"{b}.bin", dtype=np.int64)


def _write_csr(root: Path, buckets: _Buckets, n: int, progress: bool) -> int:
    """Sorts and de-duplicates each bucket into rows; writes ``indptr.npy`` and ``indices.npy`` (and
    ``edge_type.npy`` when the buckets hold several relations)."""
    import torch
    from tqdm import tqdm

    from graphdist.data.schema import edge_type_dtype

    dtype = np.int32 if n < 2**31 else np.int64
    typed = buckets.relations > 1
    rel_dtype = torch.empty(0, dtype=edge_type_dtype(buckets.relations)).numpy().dtype
    counts = np.zeros(n, dtype=np.int64)
    raw, raw_rel = root / "indices.raw", root / "edge_type.raw"
    written = 0
    with open(raw, "wb") as fh, open(raw_rel, "wb") if typed else nullcontext() as fh_rel, \
            tqdm(total=buckets.count, desc="csr", unit="bucket", disable=not progress) as bar:
        for b in range(buckets.count):
            keys = _sorted_unique(buckets.keys(b))  # rows, then relations, then sources; repeats gone
            (buckets.root / f"{b}.bin").unlink()
            span = n * buckets.relations
            rows = keys // span
            counts += np.bincount(rows, minlength=n)
            keys -= rows * span
            del rows
            if typed:
                relation = keys // n
                keys -= relation * n
                relation.astype(rel_dtype).tofile(fh_rel)
                del relation
            keys.astype(dtype).tofile(fh)
            written += keys.size
            del keys
            bar.update(1)
    buckets.root.rmdir()
    np.save(root / "indptr.npy", counts_to_indptr(counts))
    _raw_to_npy(raw, root / "indices.npy", written, dtype)
    if typed:
        _raw_to_npy(raw_rel, root / "edge_type.npy", written, rel_dtype)
    return written


def _raw_to_npy(raw: Path, out: Path, count: int, dtype: Any) -> None:
    """Copies ``count`` raw values behind a ``.npy`` header and removes the raw file: the count is known
    only once every bucket is de-duplicated (sequential reads and writes, one block of memory)."""
    from graphdist.data.npy import NpyWriter

    step = 1 << 24
    size = np.dtype(dtype).itemsize
    with NpyWriter(out, (count,), dtype) as dst:
        for start in range(0, count, step):
            dst.write(np.fromfile(raw, dtype=dtype, count=min(step, count - start), offset=start * size))
    raw.unlink()


def _sorted_unique(keys: np.ndarray) -> np.ndarray:
    """``keys`` sorted without repeats (torch's sort: numpy 2's hash-based unique is ~30x slower here)."""
    import torch

    ordered, _ = torch.sort(torch.from_numpy(keys))
    if ordered.numel() > 1:
        keep = torch.ones(ordered.numel(), dtype=torch.bool)
        torch.ne(ordered[1:], ordered[:-1], out=keep[1:])
        ordered = ordered[keep]
    return ordered.numpy()


def _write_features(root: Path, y: Any, args: dict[str, Any], gen: Any, progress: bool) -> None:
    """``x = centroid[y] + N(0, I)`` in row chunks into ``x.npy``."""
    import torch
    from tqdm import tqdm

    from graphdist.data.npy import NpyWriter

    n, f = args["num_nodes"], args["num_features"]
    centroids = torch.randn(args["num_classes"], max(f, 1), generator=gen) * (args["feature_signal"] / math.sqrt(max(f, 1)))
    rows = max(1, (1 << 24) // max(f, 1))
    with NpyWriter(root / "x.npy", (n, f), np.float32) as x, \
            tqdm(total=n, desc="features", unit="node", unit_scale=True, disable=not progress) as bar:
        for start in range(0, n, rows):
            stop = min(start + rows, n)
            x.write((torch.randn(stop - start, f, generator=gen) + centroids[y[start:stop], :f]).numpy())
            bar.update(stop - start)


def _write_masks(root: Path, n: int, args: dict[str, Any], gen: Any) -> None:
    import torch

    perm = torch.randperm(n, generator=gen).numpy()
    n_train = int(round(args["train_frac"] * n))
    n_val = min(int(round(args["val_frac"] * n)), n - n_train)
    for name, lo, hi in (("train_mask", 0, n_train), ("val_mask", n_train, n_train + n_val),
                         ("test_mask", n_train + n_val, n)):
        mask = np.zeros(n, dtype=bool)
        mask[perm[lo:hi]] = True
        np.save(root / f"{name}.npy", mask)


__all__ = ["OUT_OF_CORE_NODES", "expected_bytes", "load_generated", "synthetic_to_disk"]
