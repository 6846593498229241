"""Dataset loaders: one entry point, ``load_graph``, for every input format graphdist reads.

Accepted inputs (the first that applies wins):

==============================  =====================================================
``Graph``                       returned as is
PyG ``Data``                    converted with ``Graph.from_pyg``
``"cora"``, ``"citeseer"``,     ``<name>.npz`` looked up in each ``GRAPHDIST_DATA``
``"pubmed"``                    directory, then in ``GRAPHDIST_CACHE``; if absent and
                                online, fetched with torch_geometric's ``Planetoid``
                                into the cache and converted once
``"synthetic-<N>"``             ``synthetic(N)`` with the documented defaults (e.g.
                                ``synthetic-100k``, ``synthetic-1m``, ``synthetic-2500``)
``*.npz`` file                  the graphdist format of ``datasets/README.md``: ``edge_index``,
                                dense ``x`` or CSR ``x_indptr/x_indices/x_data/x_shape``,
                                ``y``, masks
OGB node-property directory     ``raw/edge.csv.gz`` + ``num-node-list.csv.gz`` (+ ``node-feat``,
                                ``node-label``) or binary ``raw/data.npz`` + ``node-label.npz``;
                                ``split/<type>/{train,valid,test}.csv.gz``; no ``ogb`` import
saved PyG dataset directory     ``processed/*.pt`` of an ``InMemoryDataset``, or a Planetoid
                                ``raw/ind.<name>.*`` folder (best effort, offline)
edge list (``.csv``, ``.tsv``,  ``src,dst`` per line (comma, tab, space or ``;``), optional
``.txt``, ``.edges``, ``.gz``)  header, ``#`` comments; ``features=``/``labels=`` files
==============================  =====================================================

Environment:

* ``GRAPHDIST_DATA``: ``:``-separated read-only dataset directories (tests and CI point it
  at ``../shared/datasets``). graphdist never writes there.
* ``GRAPHDIST_CACHE``: where graphdist writes downloads and derived files (default
  ``~/.cache/graphdist``); nothing else is ever written.
* ``GRAPHDIST_OFFLINE=1``: never try the network.

Memory: arrays are read one at a time and intermediates freed; a ``.npz`` member stored
uncompressed (``np.savez``, as ogbn-papers100M's ``data.npz``) is memory-mapped rather than
read; a ``.npy`` feature file is memory-mapped. A mapped ``x`` is scanned for NaN/inf once,
here, in chunks, and the ``Graph`` is built with ``validate_features=False``.

Example:
    >>> from graphdist.data import load_graph
    >>> g = load_graph("synthetic-2500")
    >>> g.num_nodes, g.num_features
    (2500, 100)
"""

from __future__ import annotations

import gzip
import logging
import os
import re
import socket
import threading
import warnings
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Optional, Union

import numpy as np
import torch

from graphdist.data.graph import MASK_NAMES, Graph, as_tensor, check_finite_features, edges_to_csr

if TYPE_CHECKING:  # torch_geometric is imported lazily: spawned workers start fast.
    from torch_geometric.data import Data

logger = logging.getLogger(__name__)

PathLike = Union[str, "os.PathLike[str]"]

#: Named real datasets and their torch_geometric ``Planetoid`` names.
PLANETOID_NAMES = {"cora": "Cora", "citeseer": "CiteSeer", "pubmed": "PubMed"}
KNOWN_NAMES = tuple(PLANETOID_NAMES)
EDGE_LIST_SUFFIXES = (".csv", ".tsv", ".txt", ".edges", ".el")
_PATH_FORMATS = (
    "a .npz file in the graphdist format (datasets/README.md), an OGB node-property directory "
    "(raw/edge.csv.gz or raw/data.npz), a saved PyG dataset directory (processed/*.pt), "
    "or an edge-list file (.csv/.tsv/.txt/.edges/.el, optionally .gz)"
)
ACCEPTED_FORMATS = (
    f"a dataset name ({', '.join(KNOWN_NAMES)}, synthetic-<N> such as synthetic-100k), {_PATH_FORMATS}, "
    "or a torch_geometric Data object"
)

# ogb's master.csv: datasets whose edge.csv.gz stores one direction of an undirected graph.
_OGB_ADD_INVERSE = {"ogbn-proteins": True, "ogbn-products": True, "ogbn-arxiv": False, "ogbn-papers100M": False}
# Bytes of text parsed per chunk: bounds the temporary memory of the text parser.
_TEXT_CHUNK = 64 << 20
# A download probe must answer within this many seconds; no network means a fast, clear error.
_PROBE_TIMEOUT_S = 3.0
_DOWNLOAD_TIMEOUT_S = 60.0
_DOWNLOAD_HOST = ("raw.githubusercontent.com", 443)  # where Planetoid's files live
# Whitespace and the usual CSV separators all become spaces before numpy parses the text.
_SEPARATORS = bytes.maketrans(b",;\t\r\n", b"     ")
_COMMENT_LINES = re.compile(rb"(?m)^[ \t]*#[^\n]*$")


# ------------------------------------------------------------------ locations
def dataset_dirs() -> list[Path]:
    """The read-only dataset directories from ``GRAPHDIST_DATA`` (``:``-separated), in order.

    Example:
        >>> [str(p) for p in dataset_dirs()]  # GRAPHDIST_DATA=/data/a:/data/b  # doctest: +SKIP
        ['/data/a', '/data/b']
    """
    value = os.environ.get("GRAPHDIST_DATA", "")
    return [Path(p).expanduser() for p in value.split(os.pathsep) if p]


def cache_dir(create: bool = False) -> Path:
    """The one directory graphdist writes to: ``GRAPHDIST_CACHE``, default ``~/.cache/graphdist``.

    Args:
        create: make the directory (and parents) if missing (default False).

    Example:
        >>> str(cache_dir())  # GRAPHDIST_CACHE unset  # doctest: +SKIP
        '/home/me/.cache/graphdist'
    """
    path = Path(os.environ.get("GRAPHDIST_CACHE") or Path.home() / ".cache" / "graphdist").expanduser()
    if create:
        path.mkdir(parents=True, exist_ok=True)
    return path


def find_dataset(name: str) -> Optional[Path]:
    """``<name>.npz`` in the first ``GRAPHDIST_DATA`` directory holding it, else in the cache.

    Example:
        >>> find_dataset("no-such-dataset") is None
        True
    """
    for directory in [*dataset_dirs(), cache_dir()]:
        candidate = directory / f"{name}.npz"
        if candidate.is_file():
            return candidate
    return None


# ------------------------------------------------------------------ entry point
def load_graph(
    name_or_path: Union[PathLike, "Data", Graph],
    *,
    features: Optional[Union[PathLike, np.ndarray, torch.Tensor]] = None,
    labels: Optional[Union[PathLike, np.ndarray, torch.Tensor]] = None,
    num_nodes: Optional[int] = None,
    split: Optional[str] = None,
    add_inverse_edge: Optional[bool] = None,
    download: bool = True,
) -> Graph:
    """Loads a graph from a dataset name, a file or directory, or a PyG ``Data`` object.

    Names take precedence over same-named paths in the working directory; write
    ``./cora`` to mean the path. Undirected datasets keep both directions as stored.

    Args:
        name_or_path: what to load (see the module docstring for the formats).
        features: edge lists only: a feature matrix, or its file (``.npy`` is memory-mapped;
            ``.npz`` with one array or key ``x``; text with one row per node).
        labels: edge lists only: labels, or their file (``.npy``, ``.npz`` or one per line).
        num_nodes: edge lists only: node count (default: from the features or labels,
            else the largest id + 1).
        split: OGB only: the ``split/<split>`` folder to use when there are several.
        add_inverse_edge: OGB only: add the reverse of every edge. Default: ogb's own
            flag for the known datasets (products, proteins: True), else False.
        download: for a named Planetoid dataset missing locally, try to download it
            into the cache (default True; ``GRAPHDIST_OFFLINE=1`` disables it).

    Returns:
        The validated ``Graph``.

    Raises:
        ValueError: an unknown name, an unrecognised file or directory, or malformed
            contents (the message names the file and the field).
        FileNotFoundError: a path or a named dataset that does not exist (the message
            says where it looked and how to point elsewhere).

    Example:
        >>> g = load_graph("synthetic-2k")
        >>> g.num_nodes
        2000
    """
    source = name_or_path
    edge_list_args = {"features": features, "labels": labels, "num_nodes": num_nodes}
    ogb_args = {"split": split, "add_inverse_edge": add_inverse_edge}
    if isinstance(source, Graph):
        _warn_ignored("a Graph", **edge_list_args, **ogb_args)
        return source
    if _is_from_pyg(source):
        if type(source).__name__ != "Data":
            raise ValueError(f"name_or_path: expected a homogeneous torch_geometric Data (got {type(source).__name__})")
        _warn_ignored("a PyG Data object", **edge_list_args, **ogb_args)
        return Graph.from_pyg(source, name=str(getattr(source, "name", None) or "pyg"))
    if not isinstance(source, (str, os.PathLike)):
        raise ValueError(f"name_or_path: expected a str, path, Graph or torch_geometric Data (got {type(source).__name__})")

    text = os.fspath(source)
    if isinstance(source, str):
        key = text.strip().lower()
        if key in PLANETOID_NAMES:
            _warn_ignored(f"dataset {key!r}", **edge_list_args, **ogb_args)
            return _load_named(key, download=download)
        from graphdist.data.synthetic import parse_synthetic_name

        size = parse_synthetic_name(key)
        if size is not None:
            from graphdist.data.synthetic import synthetic

            _warn_ignored(f"dataset {key!r}", **edge_list_args, **ogb_args)
            return synthetic(size, name=key)

    path = Path(text).expanduser()
    if path.is_dir():
        _warn_ignored(f"directory {path}", **edge_list_args)
        return _load_directory(path, split=split, add_inverse_edge=add_inverse_edge)
    if path.is_file():
        suffixes = [s.lower() for s in path.suffixes]
        if suffixes and suffixes[-1] == ".npz":
            _warn_ignored(f"{path}", **edge_list_args, **ogb_args)
            return load_npz(path)
        base = suffixes[-2] if len(suffixes) >= 2 and suffixes[-1] == ".gz" else (suffixes[-1] if suffixes else "")
        if base in EDGE_LIST_SUFFIXES:
            _warn_ignored(f"edge list {path}", **ogb_args)
            return load_edge_list(path, features=features, labels=labels, num_nodes=num_nodes)
        raise ValueError(f"{path}: expected one of {ACCEPTED_FORMATS} (got an unrecognised file type {path.suffix!r})")
    if isinstance(source, str) and os.sep not in text and not Path(text).suffix:
        raise ValueError(
            f"Unknown dataset {text!r}: expected a known name ({', '.join(KNOWN_NAMES)}, or synthetic-<N> such "
            f"as synthetic-100k, synthetic-1m, synthetic-2500) or an existing path: {_PATH_FORMATS}"
        )
    raise FileNotFoundError(f"{path}: no such file or directory (expected {ACCEPTED_FORMATS})")


def _is_from_pyg(obj: Any) -> bool:
    # Checked by module name, so that no torch_geometric import happens for paths and names.
    return (type(obj).__module__ or "").startswith("torch_geometric")


def _warn_ignored(what: str, **given: Any) -> None:
    """A legal but pointless argument: say it is ignored, and why, rather than drop it silently."""
    ignored = sorted(k for k, v in given.items() if v is not None)
    if ignored:
        warnings.warn(f"{', '.join(ignored)} ignored: they apply to edge lists (features, labels, num_nodes) "
                      f"or OGB directories (split, add_inverse_edge), not to {what}", stacklevel=3)


# ------------------------------------------------------------------ named datasets
def _load_named(name: str, download: bool) -> Graph:
    path = find_dataset(name)
    if path is None:
        path = _fetch_planetoid(name, allowed=download)
    graph = load_npz(path)
    graph.name = name
    return graph


def _not_found_message(name: str, reason: str) -> str:
    searched = [str(d) for d in dataset_dirs()]
    where = f"GRAPHDIST_DATA ({', '.join(searched)})" if searched else "GRAPHDIST_DATA (unset)"
    return (
        f"Dataset {name!r} not found: looked for {name}.npz in {where} and in the cache "
        f"GRAPHDIST_CACHE ({cache_dir()}), and {reason}. Set GRAPHDIST_DATA to a folder holding "
        f"{name}.npz (e.g. export GRAPHDIST_DATA=/path/to/shared/datasets), or run once with "
        f"network access to download it into the cache."
    )


def _fetch_planetoid(name: str, allowed: bool) -> Path:
    """Downloads ``name`` with PyG's Planetoid into the cache and converts it to ``<name>.npz``."""
    if not allowed or os.environ.get("GRAPHDIST_OFFLINE", "").lower() in ("1", "true", "yes"):
        raise FileNotFoundError(_not_found_message(name, "downloading is disabled (download=False or GRAPHDIST_OFFLINE)"))
    if not _network_reachable(*_DOWNLOAD_HOST, timeout=_PROBE_TIMEOUT_S):
        raise FileNotFoundError(
            _not_found_message(name, f"the network is unreachable ({_DOWNLOAD_HOST[0]} did not answer in "
                                     f"{_PROBE_TIMEOUT_S:.0f} s), so it could not be downloaded")
        )
    cache = cache_dir(create=True)
    try:
        data = _download_planetoid(name, cache / "pyg")
    except Exception as exc:  # noqa: BLE001 - any failure here means "not available"; say why
        raise FileNotFoundError(_not_found_message(name, f"downloading it failed ({type(exc).__name__}: {exc})")) from exc
    out = cache / f"{name}.npz"
    arrays: dict[str, np.ndarray] = {"edge_index": data.edge_index.numpy(), "x": data.x.float().numpy(),
                                     "y": data.y.numpy()}
    for mask in MASK_NAMES:
        arrays[mask] = getattr(data, mask).numpy()
    _atomic_savez(out, arrays)
    logger.info("downloaded %s into %s", name, out)
    return out


def _download_planetoid(name: str, root: Path) -> "Data":
    # Sockets without a timeout could hang a half-open connection forever; bound every read.
    from torch_geometric.datasets import Planetoid

    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(_DOWNLOAD_TIMEOUT_S)
    try:
        return Planetoid(str(root), PLANETOID_NAMES[name])[0]
    finally:
        socket.setdefaulttimeout(previous)


def _network_reachable(host: str, port: int, timeout: float) -> bool:
    """True if a TCP connection to ``host:port`` opens within ``timeout`` seconds.

    Runs in a daemon thread because name resolution (getaddrinfo) ignores socket
    timeouts and can block for much longer on a machine without DNS.
    """
    result: list[bool] = []

    def probe() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                result.append(True)
        except OSError:
            result.append(False)

    thread = threading.Thread(target=probe, name="graphdist-net-probe", daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(result and result[0])


def _atomic_savez(path: Path, arrays: dict[str, np.ndarray]) -> None:
    # Uncompressed, so that a later load can memory-map x; written aside and renamed so an
    # interrupted run never leaves a truncated file that looks complete.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


# ------------------------------------------------------------------ .npz
def load_npz(path: PathLike, name: Optional[str] = None) -> Graph:
    """Loads a graph stored in the graphdist ``.npz`` format (``datasets/README.md``).

    Keys: ``edge_index`` int ``[2, E]`` (source, target); ``x`` float ``[N, F]`` or CSR
    ``x_indptr``, ``x_indices``, ``x_data``, ``x_shape``; optional ``y`` and masks.
    Members stored uncompressed are memory-mapped instead of read.

    Raises:
        ValueError: a missing or malformed key (the message names the file and key).
        FileNotFoundError: no such file.

    Example:
        >>> g = load_npz("/path/to/cora.npz")  # doctest: +SKIP
        >>> g.num_nodes, g.num_edges  # doctest: +SKIP
        (2708, 10556)
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    try:
        archive = np.load(path, allow_pickle=False)
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise ValueError(f"{path}: expected a numpy .npz archive (got an unreadable file: {exc})") from exc
    with archive:
        keys = set(archive.files)
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


def _npz_member_memmap(path: Path, key: str) -> Optional[np.ndarray]:
    """A read-only memory map of ``key`` if the archive stores it uncompressed, else None.

    ``np.load`` ignores ``mmap_mode`` for archives and would read a 56 GB feature
    matrix (ogbn-papers100M) into memory; an uncompressed member is a plain ``.npy``
    at a fixed offset, so it can be mapped like one.
    """
    try:
        with zipfile.ZipFile(path) as zf:
            info = zf.getinfo(f"{key}.npy")
            if info.compress_type != zipfile.ZIP_STORED:
                return None
            with open(path, "rb") as f:
                f.seek(info.header_offset)
                header = f.read(30)
                if header[:4] != b"PK\x03\x04":
                    return None
                name_len = int.from_bytes(header[26:28], "little")
                extra_len = int.from_bytes(header[28:30], "little")
                f.seek(info.header_offset + 30 + name_len + extra_len)
                version = np.lib.format.read_magic(f)
                if version == (1, 0):
                    shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
                elif version == (2, 0):
                    shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
                else:
                    return None
                offset = f.tell()
    except (KeyError, zipfile.BadZipFile, ValueError, OSError):
        return None
    if dtype.hasobject or int(np.prod(shape)) == 0:
        return None
    return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=tuple(shape), order="F" if fortran else "C")


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


# ------------------------------------------------------------------ OGB directories
def _load_directory(path: Path, split: Optional[str], add_inverse_edge: Optional[bool]) -> Graph:
    raw = path / "raw"
    if (raw / "edge.csv.gz").is_file() or (raw / "data.npz").is_file():
        return load_ogb(path, split=split, add_inverse_edge=add_inverse_edge)
    if (raw / "num-node-dict.csv.gz").is_file() or (raw / "relations").is_dir():
        raise ValueError(f"{path}: heterogeneous OGB datasets (e.g. ogbn-mag) are not supported; "
                         "expected a homogeneous node-property dataset (raw/edge.csv.gz or raw/data.npz)")
    if _pyg_processed_files(path) or _planetoid_raw_name(path):
        return load_pyg_dataset(path)
    raise ValueError(f"{path}: expected {ACCEPTED_FORMATS} (got a directory with none of raw/edge.csv.gz, "
                     f"raw/data.npz, processed/*.pt)")


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
        >>> g = load_ogb("dataset/ogbn_arxiv")  # doctest: +SKIP
        >>> g.num_nodes  # doctest: +SKIP
        169343
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


# ------------------------------------------------------------------ PyG dataset directories
def _pyg_processed_files(path: Path) -> list[Path]:
    # PyG writes pre_transform.pt / pre_filter.pt next to the data; they hold no graph.
    found: list[Path] = []
    for folder in (path / "processed", *(p / "processed" for p in sorted(path.glob("*")) if p.is_dir())):
        if folder.is_dir():
            found += [p for p in sorted(folder.glob("*.pt")) if p.name not in ("pre_transform.pt", "pre_filter.pt")]
        if found:
            break
    return found


def _planetoid_raw_name(path: Path) -> Optional[str]:
    for graph_file in sorted((path / "raw").glob("ind.*.graph")):
        name = graph_file.name.split(".")[1].lower()
        if name in PLANETOID_NAMES:
            return name
    return None


def load_pyg_dataset(path: PathLike) -> Graph:
    """Best effort: opens a saved torch_geometric dataset directory offline.

    Handles an ``InMemoryDataset``'s ``processed/*.pt`` (one graph) and a Planetoid
    folder holding only ``raw/ind.<name>.*`` (processed in the cache, since graphdist
    writes nowhere else).

    Raises:
        ValueError: when torch_geometric cannot open it (the cause is in the message).

    Example:
        >>> g = load_pyg_dataset("data/Planetoid/Cora")  # doctest: +SKIP
    """
    root = Path(path)
    processed = _pyg_processed_files(root)
    try:
        if processed:
            data = _read_pyg_processed(processed[0])
        else:
            name = _planetoid_raw_name(root)
            if name is None:
                raise ValueError("no processed/*.pt and no raw/ind.<name>.graph")
            data = _process_planetoid_raw(root, name)
    except ValueError as exc:
        raise ValueError(f"{root}: expected a saved PyG dataset that torch_geometric can open offline ({exc})") from exc
    except Exception as exc:  # noqa: BLE001 - PyG raises many kinds; report the cause
        raise ValueError(f"{root}: torch_geometric could not open this directory offline "
                         f"({type(exc).__name__}: {exc})") from exc
    try:
        return Graph.from_pyg(data, name=root.name.lower())
    except ValueError as exc:
        raise ValueError(f"{root}: {exc}") from exc


def _read_pyg_processed(file: Path) -> "Data":
    # Mirrors InMemoryDataset.load: (data or its dict, slices[, sizes][, data_cls]).
    from torch_geometric.data import Data
    from torch_geometric.io import fs

    out = fs.torch_load(str(file))
    if not isinstance(out, tuple) or len(out) not in (2, 3, 4):
        raise ValueError(f"{file.name} is not an InMemoryDataset file (got {type(out).__name__})")
    data, slices = out[0], out[1]
    data_cls = out[-1] if len(out) >= 3 and isinstance(out[-1], type) else Data
    if isinstance(data, dict):
        data = data_cls.from_dict(data)
    if not hasattr(data, "edge_index") or getattr(data, "edge_index", None) is None:
        raise ValueError(f"{file.name} holds a {type(data).__name__} without edge_index (heterogeneous?)")
    if isinstance(slices, dict) and "edge_index" in slices and len(slices["edge_index"]) > 2:
        raise ValueError(f"{file.name} holds {len(slices['edge_index']) - 1} graphs; expected one node-property graph")
    return data


def _process_planetoid_raw(root: Path, name: str) -> "Data":
    # Planetoid writes processed/ next to raw/; the user's folder may be read-only and
    # graphdist writes only into its cache, so the raw files are processed in a copy there,
    # keyed by the source path so two different folders never share a result.
    import hashlib
    import shutil

    from torch_geometric.datasets import Planetoid

    key = hashlib.sha1(str(root.resolve()).encode()).hexdigest()[:12]
    work = cache_dir(create=True) / "pyg-local" / key
    raw = work / PLANETOID_NAMES[name] / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for file in (root / "raw").glob("ind.*"):
        target = raw / file.name
        if not target.exists():
            shutil.copyfile(file, target)
    return Planetoid(str(work), PLANETOID_NAMES[name])[0]


# ------------------------------------------------------------------ edge lists
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


# ------------------------------------------------------------------ text parsing
def read_table(
    path: PathLike,
    dtype: type = np.float64,
    columns: Optional[int] = None,
    allow_header: bool = False,
) -> np.ndarray:
    """Parses a numeric text table (``.gz`` or plain) into a ``[rows, columns]`` array.

    Fast and memory-bounded: the text is read in 64 MiB chunks cut at line ends,
    separators (comma, tab, space, semicolon) become spaces and numpy's C parser
    reads each chunk. ``#`` comment lines are skipped.

    Args:
        path: the file.
        dtype: numpy dtype of the result (default float64).
        columns: expected column count (default: that of the first data line).
        allow_header: skip a first data line that is not numeric (default False).

    Raises:
        ValueError: a non-numeric value or a ragged row, naming the file.

    Example:
        >>> import pathlib, tempfile
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "t.csv"
        >>> _ = p.write_text("# c\\n1,2\\n3,4\\n")
        >>> read_table(p, np.int64).tolist()
        [[1, 2], [3, 4]]
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    parts: list[np.ndarray] = []
    ncols = columns
    seen_first_line = False
    header_checked = not allow_header
    for chunk in _text_chunks(path):
        if b"#" in chunk:
            chunk = _COMMENT_LINES.sub(b"", chunk)
        if not seen_first_line:
            # The first data line decides the header question and the column count.
            chunk = chunk.lstrip()
            if not header_checked and chunk:
                first_line = chunk.split(b"\n", 1)[0]
                header_checked = True
                if not _is_numeric_line(first_line):
                    chunk = chunk[len(first_line) :].lstrip()
            if not chunk:
                continue
            found = len(chunk.split(b"\n", 1)[0].translate(_SEPARATORS).split())
            if ncols is None:
                ncols = found
            elif found != ncols:
                raise ValueError(f"{path}: expected {ncols} columns per line (got {found} in the first data line)")
            seen_first_line = True
        values = _parse_numbers(chunk, dtype, path)
        if values.size % ncols:
            raise ValueError(f"{path}: expected {ncols} columns on every line (got a ragged row)")
        parts.append(values)
    if not parts or not ncols:
        return np.zeros((0, columns or 0), dtype=dtype)
    values = parts[0] if len(parts) == 1 else np.concatenate(parts)
    return values.reshape(-1, ncols)


def _text_chunks(path: Path) -> Iterator[bytes]:
    """The file's bytes in ~64 MiB pieces, each ending at a line break.

    Files above 64 MiB on disk show a progress bar (in bytes read from disk; tqdm hides
    it when stderr is not a terminal).
    """
    from tqdm import tqdm

    size = path.stat().st_size
    with open(path, "rb") as raw, tqdm(total=size, unit="B", unit_scale=True, desc=f"reading {path.name}",
                                        disable=None if size > _TEXT_CHUNK else True, leave=False) as bar:
        reader: Any = gzip.GzipFile(fileobj=raw) if path.suffix == ".gz" else raw
        carry = b""
        while True:
            block = reader.read(_TEXT_CHUNK)
            bar.update(raw.tell() - bar.n)
            if not block:
                break
            block = carry + block
            cut = block.rfind(b"\n")
            if cut < 0:
                carry = block
                continue
            carry = block[cut + 1 :]
            yield block[: cut + 1]
        if carry:
            yield carry


def _is_numeric_line(line: bytes) -> bool:
    try:
        [float(tok) for tok in line.translate(_SEPARATORS).split()]
    except ValueError:
        return False
    return True


def _parse_numbers(chunk: bytes, dtype: type, path: Path) -> np.ndarray:
    text = chunk.translate(_SEPARATORS)
    if not text.strip():
        return np.zeros(0, dtype=dtype)
    # numpy reports a half-parsed string with a DeprecationWarning (older releases) or a
    # ValueError (2.x); both mean a token that is not a number.
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        try:
            return np.fromstring(text, dtype=dtype, sep=" ")
        except (ValueError, DeprecationWarning):
            pass
    bad = next((tok for tok in text.split() if not _parses(tok, dtype)), b"?")
    kind = "integers" if np.issubdtype(np.dtype(dtype), np.integer) else "numbers"
    raise ValueError(f"{path}: expected {kind} separated by commas, tabs or spaces (got {bad.decode(errors='replace')!r})")


def _parses(token: bytes, dtype: type) -> bool:
    try:
        (int if np.issubdtype(np.dtype(dtype), np.integer) else float)(token)
    except ValueError:
        return False
    return True


# ------------------------------------------------------------------ shared checks
def _edge_index_array(value: Any, where: str) -> np.ndarray:
    arr = np.asarray(value)
    if arr.ndim != 2 or arr.shape[0] != 2:
        raise ValueError(f"{where}: expected shape [2, E] (got {arr.shape})")
    if not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{where}: expected integer node ids (got dtype {arr.dtype})")
    if arr.size and arr.min() < 0:
        raise ValueError(f"{where}: expected node ids >= 0 (got {arr.min()})")
    return arr


def _as_float32(value: Any, where: str) -> np.ndarray:
    arr = value if isinstance(value, np.ndarray) else np.asarray(value)
    if arr.dtype == np.float32:
        return arr
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer) or arr.dtype == bool):
        raise ValueError(f"{where}: expected numeric features (got dtype {arr.dtype})")
    return arr.astype(np.float32)


def _labels_array(value: Any, where: str) -> np.ndarray:
    arr = np.asarray(value).reshape(-1) if np.ndim(value) == 2 and np.shape(value)[1] == 1 else np.asarray(value)
    if not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{where}: expected integer labels (-1 = unlabelled) (got dtype {arr.dtype})")
    return arr.astype(np.int64, copy=False)


def _mask_array(value: Any, where: str) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype != bool and np.issubdtype(arr.dtype, np.integer) and arr.size and set(np.unique(arr).tolist()) <= {0, 1}:
        return arr.astype(bool)
    return arr


def _check_finite(x: np.ndarray, where: Any, field: str) -> None:
    # The single NaN/inf scan of a (possibly memory-mapped) feature matrix: chunked, once.
    try:
        check_finite_features(as_tensor(x, field), name=field)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from exc


def _build(where: Any, edge_index: np.ndarray, n: int, name: str, node_data: dict[str, Any]) -> Graph:
    """CSR from (source, target) pairs plus node data; Graph errors are prefixed with the file."""
    node_data = {k: v for k, v in node_data.items() if v is not None}
    try:
        ei = as_tensor(np.ascontiguousarray(edge_index, dtype=np.int64), "edge_index")
        if ei.numel() and int(ei.max()) >= n:
            raise ValueError(f"edge_index: node ids must lie in [0, {n}) (got {int(ei.max())})")
        indptr, indices = edges_to_csr(ei[0], ei[1], n)
        del ei
        return Graph(indptr=indptr, indices=indices, name=name, validate_features=False, **node_data)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from exc


__all__ = [
    "ACCEPTED_FORMATS",
    "KNOWN_NAMES",
    "cache_dir",
    "dataset_dirs",
    "find_dataset",
    "load_edge_list",
    "load_graph",
    "load_npz",
    "load_ogb",
    "load_pyg_dataset",
    "read_table",
]
