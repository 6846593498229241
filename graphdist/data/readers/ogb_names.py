"""The OGB node-property datasets by name: ``ogbn-arxiv``, ``ogbn-products``, ``ogbn-papers100M``.

A name resolves to the first of:

1. ``<dir>/ogbn_arxiv`` in each ``GRAPHDIST_DATA`` directory: the folder ogb's own library leaves
   (``dataset/ogbn_arxiv``), holding ``raw/`` and ``split/``;
2. ``<GRAPHDIST_CACHE>/ogbn_arxiv``;
3. a download of OGB's archive (``OGB_URL``/``arxiv.zip``; ``GRAPHDIST_OGB_URL`` overrides the base,
   ``GRAPHDIST_OFFLINE=1`` forbids it) into the cache, unpacked aside and renamed into place
   (``graphdist.data.download``);
4. else one line saying where it looked, why the download failed, and which file to put where.

The folder is read by ``load_ogb`` with OGB's own split (``split/time`` for arxiv and papers100M,
``split/sales_ranking`` for products). The graph is made undirected as OGB's own arxiv example
(``adj_t.to_symmetric()``), PyG's ``ToUndirected`` and DGL's ``to_bidirected`` make it: every reverse
edge is added and duplicates are dropped. Before reading, the memory the load needs is estimated
from the files' headers and checked against what this process may take (:class:`NotEnoughMemory`,
not an OOM kill).

Example:
    >>> ogb_dataset("OGBN-Arxiv").folder, ogb_dataset("ogbn-papers100m").archive
    ('ogbn_arxiv', 'papers100M-bin.zip')
"""

from __future__ import annotations

import gzip
import logging
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from graphdist.data.download import DownloadError, fetch_zip_folder
from graphdist.data.graph import Graph
from graphdist.data.memory import available_bytes
from graphdist.data.paths import cache_dir, dataset_dirs, human_bytes
from graphdist.data.readers.ogb import is_ogb_directory, load_ogb
from graphdist.data.readers.text import read_table

logger = logging.getLogger(__name__)

#: OGB's download folder (ogb/nodeproppred/master.csv, row ``url``); ``GRAPHDIST_OGB_URL`` replaces it.
OGB_URL = "http://snap.stanford.edu/ogb/data/nodeproppred"
OGB_URL_ENV = "GRAPHDIST_OGB_URL"


@dataclass(frozen=True)
class OgbDataset:
    """One named OGB node-property dataset, as ogb's ``master.csv`` describes it.

    Attributes:
        name: the name users type (``ogbn-arxiv``).
        download_name: the archive's stem and the folder it unpacks to (``arxiv``).
        split: the ``split/<split>`` folder that is OGB's own split.
        num_nodes, num_edges, num_features: the published sizes; ``num_edges`` as stored, one
            direction per edge. The memory estimate reads the files' headers instead where it can.
        archive_bytes: the archive's size when known; None lets the server's ``Content-Length`` decide.
    """

    name: str
    download_name: str
    split: str
    num_nodes: int
    num_edges: int
    num_features: int
    archive_bytes: Optional[int] = None

    @property
    def folder(self) -> str:
        """``ogbn_arxiv``: the folder name ogb's library gives the dataset."""
        return self.name.replace("-", "_")

    @property
    def archive(self) -> str:
        return f"{self.download_name}.zip"

    def url(self) -> str:
        """The archive's URL: ``GRAPHDIST_OGB_URL`` (a base URL) if set, else OGB's."""
        base = os.environ.get(OGB_URL_ENV) or OGB_URL
        return f"{base.rstrip('/')}/{self.archive}"


# papers100M ships in OGB's binary format (master.csv: binary True): raw/data.npz + raw/node-label.npz.
OGB_DATASETS: dict[str, OgbDataset] = {
    d.name: d
    for d in (
        OgbDataset("ogbn-arxiv", "arxiv", "time", 169_343, 1_166_243, 128),
        OgbDataset("ogbn-products", "products", "sales_ranking", 2_449_029, 61_859_140, 100),
        OgbDataset("ogbn-papers100M", "papers100M-bin", "time", 111_059_956, 1_615_685_872, 128),
    )
}

# Peak bytes held while reading, per edge as stored, measured with /proc's VmHWM on random graphs
# of 4-8 M stored edges (2026-12-06, 2-core EPYC, torch's CPU sort): 129 in the binary layout, 146 in
# the text one (whose parsed [E, 2] table is alive while the reverse edges are added). The peak is
# the CSR sort of the doubled edge list: the list itself, the keys, their sorted copy and the sort's
# permutation, all int64. The per-node arrays (labels, masks, indptr) were too small to see; 64 bytes a
# node bounds them. The margin covers a sort that takes more working space on other builds.
_PEAK_BYTES_PER_EDGE = {"binary": 130, "text": 150}
_PEAK_BYTES_PER_NODE = 64
_MARGIN = 1.15


class NotEnoughMemory(MemoryError, ValueError):
    """A dataset that would not fit in memory, refused before reading it.

    A ``ValueError`` too, so that the CLI reports it as one line, as it does any bad ``--dataset``.
    """


@dataclass(frozen=True)
class MemoryEstimate:
    """What reading an OGB folder takes.

    Attributes:
        needed_bytes: anonymous memory held at the peak of loading (edges, CSR, labels, features read into memory).
        mapped_bytes: features read through a memory map: page cache, which the kernel can drop and read again.
    """

    needed_bytes: int
    mapped_bytes: int = 0

    def describe(self) -> str:
        mapped = f" (+ {human_bytes(self.mapped_bytes)} of features memory-mapped)" if self.mapped_bytes else ""
        return f"about {human_bytes(self.needed_bytes)} of memory{mapped}"


def ogb_dataset(name: str) -> Optional[OgbDataset]:
    """The dataset a name means, case-insensitively; None for any other name.

    Example:
        >>> ogb_dataset("ogbn-products").split, ogb_dataset("ogbn-mag") is None
        ('sales_ranking', True)
    """
    key = name.strip().lower()
    return next((d for d in OGB_DATASETS.values() if d.name.lower() == key), None)


def find_ogb(name: str) -> Optional[Path]:
    """The dataset's folder in the first ``GRAPHDIST_DATA`` directory holding it, else in the cache.

    A folder counts only with its graph file (``raw/edge.csv.gz`` or ``raw/data.npz``) in it.

    Example:
        >>> find_ogb("ogbn-arxiv") is None or find_ogb("ogbn-arxiv").name == "ogbn_arxiv"
        True
    """
    spec = _spec(name)
    for directory in (*dataset_dirs(), cache_dir()):
        if is_ogb_directory(directory / spec.folder):
            return directory / spec.folder
    return None


def load_ogb_named(name: str, download: bool = True, split: Optional[str] = None) -> Graph:
    """Loads ``ogbn-arxiv``, ``ogbn-products`` or ``ogbn-papers100M``, undirected, with OGB's split.

    Args:
        name: the dataset's name (case-insensitive).
        download: fetch it into the cache when no folder holds it (default True;
            ``GRAPHDIST_OFFLINE=1`` forbids it as well).
        split: the ``split/`` folder to use (default OGB's own: ``time`` or ``sales_ranking``).

    Returns:
        The graph, named ``name``, with every reverse edge added and duplicate edges dropped.

    Raises:
        FileNotFoundError: no folder holds it and it could not be downloaded (one line: where
            it looked, why, and what to put where).
        NotEnoughMemory: the estimated memory exceeds what is available.
        ValueError: malformed files (named in the message).

    Example:
        >>> import os
        >>> from unittest import mock
        >>> with mock.patch.dict(os.environ, {"GRAPHDIST_DATA": "", "GRAPHDIST_OFFLINE": "1",
        ...                                   "GRAPHDIST_CACHE": "/nonexistent/cache"}):
        ...     try:
        ...         load_ogb_named("ogbn-arxiv")
        ...     except FileNotFoundError as exc:
        ...         print(exc)
        ogbn-arxiv: not found in $GRAPHDIST_DATA (unset) or /nonexistent/cache/ogbn_arxiv, and downloading ...
    """
    spec = _spec(name)
    path = find_ogb(spec.name) or _fetch(spec, allowed=download)
    check_memory(spec.name, path)
    graph = drop_duplicate_edges(load_ogb(path, split=split or spec.split, add_inverse_edge=True))
    graph.name = spec.name
    return graph


# ------------------------------------------------------------------ the download
def _fetch(spec: OgbDataset, allowed: bool) -> Path:
    url = spec.url()
    if not allowed:
        raise FileNotFoundError(_not_found(spec, url, "downloading is disabled (download=False)"))
    if os.environ.get("GRAPHDIST_OFFLINE", "").lower() in ("1", "true", "yes"):
        raise FileNotFoundError(_not_found(spec, url, "downloading is disabled (GRAPHDIST_OFFLINE)"))
    out = cache_dir() / spec.folder
    logger.info("%s: not found locally; downloading %s into %s", spec.name, url, out.parent)
    try:
        fetch_zip_folder(url, out, member=spec.download_name, expected_bytes=spec.archive_bytes,
                         expect_any=("raw/edge.csv.gz", "raw/data.npz"))
    except DownloadError as exc:
        raise FileNotFoundError(_not_found(spec, url, f"the download from {url} failed ({exc})")) from None
    return out


def _not_found(spec: OgbDataset, url: str, reason: str) -> str:
    dirs = dataset_dirs()
    data = ", ".join(str(d / spec.folder) for d in dirs) if dirs else "$GRAPHDIST_DATA (unset)"
    return (f"{spec.name}: not found in {data} or {cache_dir() / spec.folder}, and {reason}; download "
            f"{spec.archive} from {url}, unzip it into a GRAPHDIST_DATA folder and rename {spec.download_name}/ "
            f"to {spec.folder}/")


# ------------------------------------------------------------------ memory
def estimate_memory(path: Path) -> MemoryEstimate:
    """The memory reading the OGB folder ``path`` takes, from its files' headers and counts (nothing big is read).

    Example:
        >>> import pathlib, tempfile
        >>> raw = pathlib.Path(tempfile.mkdtemp()) / "ogbn_tiny" / "raw"
        >>> raw.mkdir(parents=True)
        >>> np.savez(raw / "data.npz", edge_index=np.zeros((2, 1000), np.int64), num_nodes_list=np.array([10]),
        ...          node_feat=np.zeros((10, 4), np.float32))
        >>> e = estimate_memory(raw.parent)
        >>> e.needed_bytes > 1000 * 2 * 8, e.mapped_bytes  # x is stored uncompressed: mapped, not read
        (True, 160)
    """
    raw = Path(path) / "raw"
    mapped = 0
    layout = "binary" if (raw / "data.npz").is_file() else "text"
    if layout == "binary":
        data = raw / "data.npz"
        with np.load(data, allow_pickle=False) as archive:
            n = int(np.asarray(archive["num_nodes_list"]).reshape(-1)[0])
        edge_shape = _npz_header(data, "edge_index")
        e = int(edge_shape[0][1]) if edge_shape and len(edge_shape[0]) == 2 else 0
        feat = _npz_header(data, "node_feat")
        features = 0
        if feat is not None:
            shape, dtype, stored = feat
            values = int(np.prod(shape))
            if stored and dtype == np.float32:
                mapped = values * 4
            else:  # read (and converted to float32): the archive's copy and the converted one
                features = values * (dtype.itemsize + (4 if dtype != np.float32 else 0))
    else:
        n = int(read_table(raw / "num-node-list.csv.gz", np.int64).reshape(-1)[0])
        count_file = raw / "num-edge-list.csv.gz"
        e = int(read_table(count_file, np.int64).reshape(-1)[0]) if count_file.is_file() else _edges_from_size(raw)
        # the parsed chunks and their concatenation are alive together for a moment
        features = 2 * n * _text_columns(raw / "node-feat.csv.gz") * 4
    needed = int(_MARGIN * (_PEAK_BYTES_PER_EDGE[layout] * e + _PEAK_BYTES_PER_NODE * n + features))
    return MemoryEstimate(needed, mapped)


def check_memory(name: str, path: Path) -> MemoryEstimate:
    """Estimates what reading ``path`` takes, says it, and refuses before reading when it would not fit.

    Raises:
        NotEnoughMemory: the estimate exceeds :func:`graphdist.data.memory.available_bytes`.
    """
    estimate = estimate_memory(path)
    available = available_bytes()
    has = f"{human_bytes(available)} available" if available is not None else "available memory unknown"
    logger.info("%s: loading %s needs %s; %s", name, path, estimate.describe(), has)
    if available is not None and estimate.needed_bytes > available:
        raise NotEnoughMemory(
            f"{name}: loading needs {estimate.describe()} but only {human_bytes(available)} is available; "
            f"load it on a machine with at least {human_bytes(estimate.needed_bytes)} free (graphdist-partition "
            f"there, then graphdist-train --partitions on smaller ones)")
    return estimate


def _npz_header(path: Path, key: str) -> Optional[tuple[tuple[int, ...], np.dtype, bool]]:
    """``(shape, dtype, stored uncompressed)`` of an ``.npz`` member, from its header alone; None if absent."""
    try:
        with zipfile.ZipFile(path) as zf:
            info = zf.getinfo(f"{key}.npy")
            with zf.open(info) as fh:
                version = np.lib.format.read_magic(fh)
                shape, _, dtype = (np.lib.format.read_array_header_1_0(fh) if version == (1, 0)
                                   else np.lib.format.read_array_header_2_0(fh))
    except (KeyError, zipfile.BadZipFile, ValueError, OSError):
        return None
    return tuple(shape), dtype, info.compress_type == zipfile.ZIP_STORED


def _text_columns(path: Path) -> int:
    if not path.is_file():
        return 0
    with gzip.open(path, "rt") as fh:
        return len(fh.readline().replace(",", " ").split())


def _edges_from_size(raw: Path) -> int:
    # No num-edge-list file: a gzipped "src,dst" line is ~6 bytes on OGB's files; rather high than low.
    return (raw / "edge.csv.gz").stat().st_size // 4


# ------------------------------------------------------------------ undirected
def drop_duplicate_edges(graph: Graph) -> Graph:
    """The graph without repeated ``(source, destination)`` pairs; ``graph`` itself when it has none.

    Sources are sorted within each CSR row, so a duplicate sits next to its twin: one pass of
    booleans finds them, without ``Graph.to_undirected``'s second sort of every edge (its result
    is the same; the tests check that).

    Example:
        >>> g = Graph.from_edge_index([[0, 0, 1, 1], [1, 1, 0, 1]], num_nodes=2)
        >>> drop_duplicate_edges(g).edge_index().tolist()
        [[1, 0, 1], [0, 1, 1]]
    """
    indptr, indices = graph.indptr, graph.indices
    if indices.numel() < 2:
        return graph
    keep = torch.ones(indices.numel(), dtype=torch.bool)
    keep[1:] = indices[1:] != indices[:-1]
    starts = indptr[1:-1]
    keep[starts[starts < indices.numel()]] = True  # the first edge of a row repeats nothing
    if bool(keep.all()):
        return graph
    dropped = torch.nonzero(~keep).flatten()
    rows = torch.searchsorted(indptr, dropped, right=True) - 1
    removed = torch.zeros(indptr.numel(), dtype=torch.int64)
    removed[1:] = torch.cumsum(torch.bincount(rows, minlength=graph.num_nodes), 0)
    return Graph(indptr=indptr - removed, indices=indices[keep], name=graph.name, validate_features=False,
                 **graph.node_data())


def _spec(name: str) -> OgbDataset:
    spec = ogb_dataset(name)
    if spec is None:
        raise ValueError(f"Unknown OGB dataset {name!r}: expected one of {', '.join(OGB_DATASETS)}")
    return spec


__all__ = ["OGB_DATASETS", "OGB_URL", "OGB_URL_ENV", "MemoryEstimate", "NotEnoughMemory", "OgbDataset",
           "check_memory", "drop_duplicate_edges", "estimate_memory", "find_ogb", "load_ogb_named", "ogb_dataset"]
