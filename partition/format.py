"""The on-disk partition directory: writer (staged, checksummed) and reader (memory-mapped, verified).

Layout (``FORMAT_VERSION`` 3; versions 1 and 2, which have no typed graphs, and 1 neither multi-label
``y`` nor link splits, still read)::

    parts/pubmed-4/
    ├── meta.json          format_version, command + args, dataset, method, seed, halo_hops,
    │                      num_nodes, num_edges, num_parts, feature_dim, num_classes, masks,
    │                      part_offsets, per-part counts, edge_cut, {file: sha256, bytes}
    ├── node_map.npy       int64 [N]  new global id -> part
    ├── orig_ids.npy       int64 [N]  new global id -> original id
    ├── part-0/
    │   ├── indptr.npy     int64 [num_rows + 1]  rows: inner nodes, then (h >= 2) halo rows
    │   ├── indices.npy    int64 [nnz]           in-neighbours as local ids (inner + halo)
    │   ├── edge_type.npy  int8 [nnz]            typed graphs: each edge's relation (meta "schema")
    │   ├── global_ids.npy int64 [num_local]     local -> new global id (inner first)
    │   ├── halo_owner.npy int64 [num_halo]      part owning each halo node
    │   ├── x.npy          float32 [num_inner, F]   inner nodes only, if the graph has x
    │   ├── y.npy          int64 [num_inner]        if the graph has y (uint8 [num_inner, C] multi-label)
    │   ├── masks.npy      bool [3, num_inner]      train, val, test rows (absent ones all False)
    │   └── link_*.npy     link prediction only (partition/edges.py): the supervision edges whose
    │                      source is an inner node, and the val/test edges with their negatives
    └── part-1/ ...

The writer fills a hidden temporary sibling (``.<name>.tmp-<pid>-<rand>``, locked
with ``flock`` while it writes) and renames it into place last, so a run that
raises leaves no output directory and one that is killed leaves only a hidden
temporary directory, never something that looks complete; the next writer of
the same ``<name>`` removes what a dead writer left. The reader maps every array copy-on-write
(``np.load(mmap_mode="c")``): opening a part reads nothing large.

Example:
    >>> from graphdist.testing import tiny_graph, tiny_partition
    >>> import tempfile, pathlib
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "tiny-2"
    >>> with staged_directory(out) as tmp:
    ...     _ = write_partition_files(tmp, tiny_graph(), tiny_partition().numpy(), 2)
    >>> load_partition(out, 1).num_inner
    5
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import torch

from graphdist.data.graph import MASK_NAMES, Graph
from partition.csr import graph_arrays
from partition.files import save_array  # read here at each call: a test that replaces it fails any write
from partition.halo import PartArrays, Relabel, build_part, edges_by_source_part
from partition.scan import write_one_hop_parts
from partition.part import Partition
from graphdist.data.staging import META, PathLike, clean_stale_siblings, staged_directory  # noqa: F401 - re-exported

FORMAT_VERSION = 3
# What the reader accepts: version 2 added multi-label y (uint8 [N, C], meta "multilabel") and the
# link-prediction split (meta "task": "link", part-*/link_*.npy); version 1 has neither. Version 3 added
# typed graphs (meta "schema", each part's "type_counts", part-*/edge_type.npy); a directory of an
# untyped graph differs from version 2 in nothing else.
READABLE_VERSIONS = (1, 2, 3)
_HASH_BLOCK = 1 << 22  # 4 MiB reads when verifying: bounded memory on large files



class PartitionFormatError(ValueError):
    """A partition directory is missing, from another format version, or corrupted; names the file."""


# ================================================================== writing
def write_partition_files(
    root: Path,
    graph: Graph,
    parts: np.ndarray,
    num_parts: int,
    halo_hops: int = 1,
    meta_extra: Optional[dict[str, Any]] = None,
    on_relabel: Optional[Callable[[int], None]] = None,
    on_write: Optional[Callable[[int], None]] = None,
    extras: Optional[Callable[[Path, Relabel, list[dict[str, Any]], dict[str, dict[str, Any]]], dict[str, Any]]] = None,
    on_rows: Optional[Callable[[int], None]] = None,
) -> dict[str, Any]:
    """Writes every array and ``meta.json`` of a partition into ``root``; returns the meta.

    Halo depth 1 (the default): every part at once by sequential scans of the graph
    (``partition/scan.py``: bounded memory, graphs larger than RAM, memory maps released as
    read). Deeper halos: parts are built and written one at a time, so memory holds one part's
    arrays at once, never the whole relabelled graph.

    Args:
        root: an empty directory (normally from `staged_directory`).
        graph: the partitioned graph.
        parts: int ``[N]`` part of every node (original ids).
        num_parts: number of parts (parts may be empty).
        halo_hops: halo depth h >= 1.
        meta_extra: entries merged into ``meta.json`` (command, args, dataset, method, seed...).
        on_relabel, on_write: progress callbacks, called with the part id after it is built / written.
        extras: writes more files once the parts are written (``extras(root, relabel, part_meta,
            files)``, e.g. the link split of ``partition/edges.py``), adding to the parts' counts and the
            checksummed file list; returns entries for ``meta.json``.
        on_rows: progress of the one-hop scan, called with the rows of each block it wrote.
    """
    parts = _check_parts(parts, graph.num_nodes, num_parts)
    relabel = Relabel.from_parts(parts, num_parts)
    files: dict[str, dict[str, Any]] = {}
    part_meta = []
    structure = (write_one_hop_parts(root, graph, parts, num_parts, relabel, files, on_block=on_rows,
                                     save=save_array) if halo_hops == 1 else None)
    if structure is None:
        indptr, indices = graph_arrays(graph)
        scratch = np.full(graph.num_nodes, -1, dtype=np.int64)
    for p in range(num_parts):
        inner = relabel.orig_ids[relabel.part_offsets[p] : relabel.part_offsets[p + 1]]
        if structure is None:
            arrays = build_part(indptr, indices, relabel, p, halo_hops, scratch)
            _write_structure(root, p, arrays, graph, inner, files)
            counts = _structure_counts(arrays, num_parts, p)
            del arrays
        else:
            counts = structure[p]
        if on_relabel:
            on_relabel(p)
        _write_labels(root, p, graph, inner, files)
        part_meta.append({**counts, **_label_counts(graph, inner)})
        if on_write:
            on_write(p)
    save_array(root, "node_map.npy", relabel.node_map(), files)
    save_array(root, "orig_ids.npy", relabel.orig_ids, files)
    meta_extra = dict(meta_extra or {})
    if graph.typed:
        meta_extra["schema"] = _write_edge_types(root, graph, relabel, part_meta, files)
    if extras is not None:
        meta_extra.update(extras(root, relabel, part_meta, files))
    meta = _meta(graph, num_parts, halo_hops, relabel, part_meta, files, meta_extra)
    with open(root / META, "w") as fh:
        json.dump(meta, fh, indent=1)
        fh.write("\n")
    return meta


def _write_edge_types(root: Path, graph: Graph, relabel: Relabel, part_meta: list[dict[str, Any]],
                      files: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each part's ``edge_type.npy`` (its rows' edges keep their order in the graph's CSR, so the relations
    are gathered at the same positions) and node counts per type; returns the schema for ``meta.json``.

    One-hop parts have their relations already: the scan (``partition/scan.py``) writes them with the
    indices; this gathers them for deeper halos.
    """
    from partition.csr import ranges as np_ranges

    indptr = graph.indptr.numpy()
    edge_type = graph.edge_type.numpy()
    node_type = graph.schema.node_type(torch.from_numpy(relabel.orig_ids)).numpy()
    for p, counts in enumerate(part_meta):
        lo, hi = relabel.part_offsets[p], relabel.part_offsets[p + 1]
        counts["type_counts"] = np.bincount(node_type[lo:hi], minlength=graph.schema.num_types).tolist()
        if "relation_edges" in counts:
            continue
        local = np.load(root / f"part-{p}" / "global_ids.npy", mmap_mode="r")[: counts["num_rows"]]
        rows = relabel.orig_ids[local]
        save_array(root, f"part-{p}/edge_type.npy", edge_type[np_ranges(indptr[rows], indptr[rows + 1] - indptr[rows])],
                   files)
        # the inner rows' in-edges by relation, and those from another part's node (the stats' cut per relation)
        inner_edges = int(counts["num_inner_edges"])
        rel = edge_type[np_ranges(indptr[rows[: counts["num_inner"]]], indptr[rows[: counts["num_inner"]] + 1]
                                  - indptr[rows[: counts["num_inner"]]])]
        cut = np.load(root / f"part-{p}" / "indices.npy", mmap_mode="r")[:inner_edges] >= counts["num_inner"]
        r = graph.schema.num_relations
        counts["relation_edges"] = np.bincount(rel, minlength=r).tolist()
        counts["relation_cut"] = np.bincount(rel[cut], minlength=r).tolist()
    return graph.schema.to_dict()


def _check_parts(parts: Any, num_nodes: int, num_parts: int) -> np.ndarray:
    parts = parts.numpy() if isinstance(parts, torch.Tensor) else np.asarray(parts)
    if parts.shape != (num_nodes,):
        raise ValueError(f"parts: expected shape [{num_nodes}] (got {tuple(parts.shape)})")
    if not np.issubdtype(parts.dtype, np.integer):
        raise ValueError(f"parts: expected an integer array (got {parts.dtype})")
    if parts.size and (int(parts.min()) < 0 or int(parts.max()) >= num_parts):
        raise ValueError(f"parts: ids must lie in [0, {num_parts}) (got {int(parts.min())}..{int(parts.max())})")
    return parts.astype(np.int64, copy=False)


def _write_structure(
    root: Path, p: int, arrays: PartArrays, graph: Graph, inner: np.ndarray, files: dict[str, dict[str, Any]]
) -> None:
    d = f"part-{p}"
    save_array(root, f"{d}/indptr.npy", arrays.indptr, files)
    save_array(root, f"{d}/indices.npy", arrays.indices, files)
    save_array(root, f"{d}/global_ids.npy", arrays.global_ids, files)
    save_array(root, f"{d}/halo_owner.npy", arrays.halo_owner, files)
    # Inner rows only: halo features live on their owner and are fetched at run time.
    if graph.x is not None:
        save_array(root, f"{d}/x.npy", graph.x.numpy()[inner], files)


def _write_labels(root: Path, p: int, graph: Graph, inner: np.ndarray, files: dict[str, dict[str, Any]]) -> None:
    d = f"part-{p}"
    if graph.y is not None:
        y_dtype = np.uint8 if graph.multilabel else np.int64
        save_array(root, f"{d}/y.npy", graph.y.numpy()[inner].astype(y_dtype, copy=False), files)
    masks = [getattr(graph, m) for m in MASK_NAMES]
    if any(m is not None for m in masks):
        # One contiguous row per mask, so each maps to a dense tensor.
        stacked = np.zeros((len(MASK_NAMES), inner.size), dtype=bool)
        for j, m in enumerate(masks):
            if m is not None:
                stacked[j] = m.numpy()[inner]
        save_array(root, f"{d}/masks.npy", stacked, files)


def _structure_counts(arrays: PartArrays, num_parts: int, part_id: int) -> dict[str, Any]:
    inner_edges = int(arrays.indptr[arrays.num_inner])
    counts: dict[str, Any] = {
        "num_inner": arrays.num_inner,
        "num_halo": arrays.num_halo,
        "halo_by_hop": arrays.halo_by_hop,
        "num_rows": arrays.num_rows,
        "num_edges": int(arrays.indices.size),
        "num_inner_edges": inner_edges,
        # In-edges of inner nodes whose source is another part's node.
        "num_cut_edges": int(np.count_nonzero(arrays.indices[:inner_edges] >= arrays.num_inner)),
        # Row q: in-edges of this part's inner nodes whose source lies in part q (the placement's
        # part adjacency: remote traffic between parts, and which parts to keep together).
        "edges_from_parts": edges_by_source_part(arrays.indptr, arrays.indices, arrays.halo_owner,
                                                 arrays.num_inner, num_parts, part_id),
    }
    return counts


def _label_counts(graph: Graph, inner: np.ndarray) -> dict[str, Any]:
    """A part's train/val/test node counts and its label histogram (per-label carriers when multi-label)."""
    counts: dict[str, Any] = {}
    for name in MASK_NAMES:
        mask = getattr(graph, name)
        counts[f"num_{name.split('_')[0]}"] = None if mask is None else int(mask.numpy()[inner].sum())
    if graph.y is not None:
        y = graph.y.numpy()[inner]
        # Multi-label: how many of the part's nodes carry each label (the statistics' label mix).
        counts["label_counts"] = (y.sum(axis=0, dtype=np.int64).tolist() if graph.multilabel
                                  else np.bincount(y[y >= 0], minlength=graph.num_classes).tolist())
    return counts


def _meta(
    graph: Graph,
    num_parts: int,
    halo_hops: int,
    relabel: Relabel,
    part_meta: list[dict[str, Any]],
    files: dict[str, dict[str, Any]],
    extra: dict[str, Any],
) -> dict[str, Any]:
    cut = sum(p["num_cut_edges"] for p in part_meta)
    meta: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "dataset": graph.name,
        "num_nodes": graph.num_nodes,
        "num_edges": graph.num_edges,
        "num_parts": num_parts,
        "halo_hops": halo_hops,
        "feature_dim": graph.num_features,
        "num_classes": graph.num_classes,
        "multilabel": graph.multilabel,
        "masks": [m for m in MASK_NAMES if getattr(graph, m) is not None],
        "edge_cut": cut / max(graph.num_edges, 1),
        "part_offsets": relabel.part_offsets.tolist(),
        # part_edges[p][q]: in-edges of part p's inner nodes from part q's nodes (diagonal: internal).
        "part_edges": [p["edges_from_parts"] for p in part_meta],
    }
    meta.update(extra)
    meta["parts"] = part_meta
    meta["files"] = files
    return meta


# ================================================================== reading
def read_meta(path: PathLike) -> dict:
    """Reads and checks ``meta.json`` of a partition directory.

    Raises:
        PartitionFormatError: missing or unreadable ``meta.json``, or another format version.

    Example:
        >>> import tempfile
        >>> from graphdist.testing import tiny_graph
        >>> from partition.api import partition
        >>> read_meta(partition(tiny_graph(), 2, method="random", out=tempfile.mkdtemp() + "/p"))["num_parts"]
        2
    """
    root = Path(path)
    file = root / META
    if not root.is_dir():
        raise PartitionFormatError(f"{root}: not a directory (expected a partition directory with {META})")
    if not file.exists():
        raise PartitionFormatError(f"{file}: missing; {root} is not a partition directory (or its write was interrupted)")
    try:
        meta = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PartitionFormatError(f"{file}: unreadable ({exc}); rewrite the partition with --force") from None
    version = meta.get("format_version") if isinstance(meta, dict) else None
    if version not in READABLE_VERSIONS:
        raise PartitionFormatError(
            f"{file}: format_version {version!r} is not supported (expected one of "
            f"{', '.join(map(str, READABLE_VERSIONS))}); re-run graphdist-partition with this version"
        )
    return meta


def content_checksum(meta: dict) -> str:
    """One checksum of a partition directory's contents (its files' sha256s), whatever its path or
    creation time: two directories with equal checksums hold the same parts.

    Example:
        >>> content_checksum({"files": {"a.npy": {"sha256": "00"}}}) == content_checksum({"files": {"a.npy": {"sha256": "00"}}, "created": "now"})
        True
    """
    import hashlib

    digest = hashlib.sha256()
    for name in sorted(meta.get("files", {})):
        digest.update(f"{name}:{meta['files'][name].get('sha256')};".encode())
    return digest.hexdigest()


def verify_files(path: PathLike, meta: dict, names: Optional[list[str]] = None) -> None:
    """Checks size and sha256 of ``names`` (default: every file in ``meta``) against ``meta.json``.

    Raises:
        PartitionFormatError: naming the first missing or mismatching file.
    """
    root = Path(path)
    files = meta.get("files", {})
    for name in names if names is not None else sorted(files):
        if name not in files:
            raise PartitionFormatError(f"{root / name}: not listed in {META}; the directory is inconsistent")
        _verify_one(root / name, files[name])


def _verify_one(file: Path, expected: dict[str, Any]) -> None:
    if not file.exists():
        raise PartitionFormatError(f"{file}: missing (listed in {META}); rewrite the partition with --force")
    size = file.stat().st_size
    if size != expected.get("bytes"):
        raise PartitionFormatError(f"{file}: size {size} differs from {expected.get('bytes')} in {META}; file is corrupted")
    digest = hashlib.sha256()
    with open(file, "rb") as fh:
        while block := fh.read(_HASH_BLOCK):
            digest.update(block)
    if digest.hexdigest() != expected.get("sha256"):
        raise PartitionFormatError(f"{file}: sha256 mismatch with {META}; file is corrupted, rewrite the partition")


def part_files(meta: dict, part_id: int) -> list[str]:
    """The files ``load_partition`` reads for ``part_id`` (relative paths)."""
    prefix = f"part-{part_id}/"
    return sorted(f for f in meta.get("files", {}) if f.startswith(prefix)) + ["orig_ids.npy"]


def load_partition(path: PathLike, part_id: int, verify: bool = True, meta: Optional[dict] = None) -> Partition:
    """Opens part ``part_id`` of a partition directory, memory-mapped.

    Args:
        path: the partition directory.
        part_id: which part, ``0 <= part_id < num_parts``.
        verify: check sha256 of the files this part reads (default True; False for speed).
        meta: the directory's ``meta.json`` when the caller has read it (``partition.handle.PartitionDir``).

    Returns:
        The `Partition`; arrays are copy-on-write memory maps (nothing large read eagerly).

    Raises:
        PartitionFormatError: naming the missing, unreadable or corrupted file.
        ValueError: ``part_id`` out of range.

    Example:
        >>> import tempfile
        >>> from graphdist.testing import tiny_graph
        >>> from partition.api import partition
        >>> part = load_partition(partition(tiny_graph(), 2, method="random", out=tempfile.mkdtemp() + "/p"), 0)
        >>> part.x.shape[0] == part.num_inner, part.num_halo > 0
        (True, True)
    """
    root = Path(path)
    meta = meta if meta is not None else read_meta(root)
    num_parts = int(meta["num_parts"])
    if not 0 <= int(part_id) < num_parts:
        raise ValueError(f"part_id: expected 0 <= part_id < {num_parts} (got {part_id})")
    if verify:
        verify_files(root, meta, part_files(meta, part_id))
    d = f"part-{part_id}"
    files = meta.get("files", {})
    masks = _load(root, f"{d}/masks.npy") if f"{d}/masks.npy" in files else None
    present = set(meta.get("masks", []))
    mask = {
        name: (torch.from_numpy(masks[j]) if masks is not None and name in present else None)
        for j, name in enumerate(MASK_NAMES)
    }
    return Partition(
        part_id=int(part_id),
        num_parts=num_parts,
        meta=meta,
        indptr=torch.from_numpy(_load(root, f"{d}/indptr.npy")),
        indices=torch.from_numpy(_load(root, f"{d}/indices.npy")),
        global_ids=torch.from_numpy(_load(root, f"{d}/global_ids.npy")),
        num_inner=int(meta["parts"][part_id]["num_inner"]),
        halo_owner=torch.from_numpy(_load(root, f"{d}/halo_owner.npy")),
        part_offsets=torch.tensor(meta["part_offsets"], dtype=torch.int64),
        x=torch.from_numpy(_load(root, f"{d}/x.npy")) if f"{d}/x.npy" in files else None,
        y=torch.from_numpy(_load(root, f"{d}/y.npy")) if f"{d}/y.npy" in files else None,
        train_mask=mask["train_mask"],
        val_mask=mask["val_mask"],
        test_mask=mask["test_mask"],
        orig_ids=(orig_ids := torch.from_numpy(_load(root, "orig_ids.npy"))),
        edge_type=torch.from_numpy(_load(root, f"{d}/edge_type.npy")) if f"{d}/edge_type.npy" in files else None,
        schema=partition_schema(meta, orig_ids),
    )


def partition_schema(meta: dict, orig_ids: Optional[torch.Tensor] = None) -> Optional[Any]:
    """A typed graph's ``Schema`` over a partition directory's ids (None: the graph has no types).

    ``orig_ids`` (``orig_ids.npy``): rows within a type are the original graph's, so an embedding row is the
    same node whatever the partition; without, the types and counts alone (what the model's shape needs).
    """
    if "schema" not in meta:
        return None
    from graphdist.data.schema import Schema

    return Schema.from_dict(meta["schema"]).relabelled(meta["part_offsets"], [p["type_counts"] for p in meta["parts"]],
                                                       orig_ids)


def _load(root: Path, relpath: str) -> np.ndarray:
    """Copy-on-write memory map of one array; errors name the file."""
    file = root / relpath
    try:
        return np.load(file, mmap_mode="c", allow_pickle=False)
    except FileNotFoundError:
        raise PartitionFormatError(f"{file}: missing; rewrite the partition with --force") from None
    except (OSError, ValueError) as exc:
        raise PartitionFormatError(f"{file}: unreadable as .npy ({exc}); file is corrupted") from None
