"""Reads a DGL export (``dgl_export.py``'s output) into a `Graph` or a graphdist partition directory.

graphdist never imports dgl: the exporter, ``graphdist/interop/dgl_export.py``, runs with a
python that has DGL and writes plain ``.npy`` arrays and a ``manifest.json``; this module
validates them (every problem is one ``ValueError`` line naming the file) and builds graphdist's
objects. A DistDGL partition keeps exactly DistDGL's part of every node; when the export holds
the original node ids (``--orig-nids``), the graph is built in them, so graphdist's
``orig_ids.npy`` maps back to the user's ids; otherwise node ids are DistDGL's shuffled ids.

Example:
    >>> import tempfile
    >>> from graphdist.testing import tiny_graph, tiny_partition
    >>> root = write_test_export(tiny_graph(), tempfile.mkdtemp() + "/export", parts=tiny_partition().numpy())
    >>> read_dgl_export(root).num_edges
    24
    >>> out = import_dgl_partitions(root, tempfile.mkdtemp() + "/tiny-2")
    >>> from partition.format import read_meta
    >>> read_meta(out)["method"], read_meta(out)["num_parts"]
    ('distdgl', 2)
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import numpy as np

from graphdist.data.graph import MASK_NAMES, Graph

PathLike = Union[str, os.PathLike]
FORMAT = "graphdist-dgl-export"  # the exporter's FORMAT and VERSION: the two files change together
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
KINDS = ("graph", "partitions")
SHUFFLED = "distdgl-shuffled"


@dataclass(frozen=True)
class DglExport:
    """An export, read and checked.

    Attributes:
        path: the export directory.
        manifest: its ``manifest.json``.
        graph: the graph, in the original node ids when the export has them, else in DistDGL's.
        parts: int64 ``[num_nodes]``, DistDGL's part of each of ``graph``'s nodes (partition exports only).
        num_parts: DistDGL's number of parts (partition exports only).
        node_ids: ``"original"`` or ``"distdgl-shuffled"``.
    """

    path: Path
    manifest: dict
    graph: Graph
    parts: Optional[np.ndarray]
    num_parts: Optional[int]
    node_ids: str


def exporter_path() -> Path:
    """Where the exporter script lives (run it with a python that has dgl)."""
    return Path(__file__).parent / "dgl_export.py"


def exporter_usage(python: str = "$PEER_PY") -> str:
    """How to run the exporter and then the importer, as shell commands.

    Example:
        >>> print(exporter_usage().splitlines()[0])
        Export with a python that has dgl (graphdist never imports it; `python bench/peers/env.py` builds one):
    """
    script = exporter_path()
    return "\n".join([
        "Export with a python that has dgl (graphdist never imports it; `python bench/peers/env.py` builds one):",
        f"  {python} {script} graph GRAPH.bin --out EXPORT_DIR        # a dgl.save_graphs file",
        f"  {python} {script} partitions PART_DIR/NAME.json --orig-nids orig_nids.pt --out EXPORT_DIR  # DistDGL",
        "then import it:",
        "  graphdist import-dgl EXPORT_DIR --as graph --out GRAPH.npz",
        "  graphdist import-dgl EXPORT_DIR --as partitions --out PARTS_DIR",
    ])


def print_exporter_usage(python: str = "$PEER_PY") -> None:
    """Prints `exporter_usage`."""
    print(exporter_usage(python))


# ------------------------------------------------------------------ reading
def read_manifest(path: PathLike) -> dict:
    """Reads and checks an export's ``manifest.json``.

    Raises:
        ValueError: one line naming the file: missing, unreadable, another format or version,
            or a field of the wrong kind.
    """
    root = Path(path)
    file = root / MANIFEST
    if not root.is_dir():
        raise ValueError(f"{root}: not a directory (expected a DGL export with {MANIFEST}, written by {exporter_path()})")
    if not file.is_file():
        raise ValueError(f"{file}: missing; {root} is not a DGL export (write one with {exporter_path()})")
    try:
        manifest = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{file}: unreadable ({' '.join(str(exc).split())}); re-run the exporter") from None
    got = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
    if got != FORMAT:
        raise ValueError(f"{file}: format {got!r} is not {FORMAT!r}; write the export with {exporter_path().name}")
    if manifest.get("version") != FORMAT_VERSION:
        raise ValueError(f"{file}: version {manifest.get('version')!r} is not supported (expected {FORMAT_VERSION}); "
                         f"re-export with this graphdist's {exporter_path().name}")
    if manifest.get("kind") not in KINDS:
        raise ValueError(f"{file}: kind must be one of {', '.join(KINDS)} (got {manifest.get('kind')!r})")
    if manifest.get("homogeneous") is not True:
        raise ValueError(f"{file}: homogeneous is {manifest.get('homogeneous')!r}; graphdist takes one node and edge type")
    for key in ("num_nodes", "num_edges") + (("num_parts",) if manifest["kind"] == "partitions" else ()):
        value = manifest.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < (1 if key == "num_parts" else 0):
            raise ValueError(f"{file}: {key} must be an integer >= {1 if key == 'num_parts' else 0} (got {value!r})")
    needed = ["src", "dst"] + (["node_parts"] if manifest["kind"] == "partitions" else [])
    arrays = manifest.get("arrays")
    if not isinstance(arrays, dict) or any(name not in arrays for name in needed):
        raise ValueError(f"{file}: arrays must list {', '.join(needed)} (got {sorted(arrays) if isinstance(arrays, dict) else arrays!r})")
    return manifest


def _load(root: Path, manifest: dict, name: str) -> Optional[np.ndarray]:
    entry = manifest["arrays"].get(name)
    if entry is None:
        return None
    relpath = entry.get("file") if isinstance(entry, dict) else None
    if not isinstance(relpath, str) or Path(relpath).name != relpath:
        raise ValueError(f"{root / MANIFEST}: arrays.{name}.file must be a file name in the export (got {relpath!r})")
    file = root / relpath
    if not file.is_file():
        raise ValueError(f"{file}: missing (listed in {MANIFEST}); re-run the exporter")
    try:
        # copy-on-write map: a large feature matrix is not read until used
        return np.load(file, mmap_mode="c", allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise ValueError(f"{file}: not a readable .npy ({' '.join(str(exc).split())})") from None


def _vector(root: Path, manifest: dict, name: str, length: int, what: str) -> Optional[np.ndarray]:
    """A 1-D array of ``length`` entries (``[length, 1]`` accepted), or None when the export has none."""
    arr = _load(root, manifest, name)
    if arr is None:
        return None
    file = root / manifest["arrays"][name]["file"]
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr.reshape(-1)
    if arr.shape != (length,):
        raise ValueError(f"{file}: expected {length} entries, {what} as manifest.json says (got shape {arr.shape})")
    return arr


def _ints(root: Path, manifest: dict, name: str, length: int, what: str, upper: Optional[int],
          lower: int = 0, kind: str = "ids") -> Optional[np.ndarray]:
    arr = _vector(root, manifest, name, length, what)
    if arr is None:
        return None
    file = root / manifest["arrays"][name]["file"]
    if not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{file}: expected integer {kind} (got dtype {arr.dtype})")
    arr = np.asarray(arr, dtype=np.int64)
    if arr.size and (int(arr.min()) < lower or (upper is not None and int(arr.max()) >= upper)):
        raise ValueError(f"{file}: {kind} must lie in [{lower}, {upper if upper is not None else 'inf'}) "
                         f"(got {int(arr.min())}..{int(arr.max())})")
    return arr


def _node_data(root: Path, manifest: dict, n: int) -> dict[str, np.ndarray]:
    data: dict[str, np.ndarray] = {}
    x = _load(root, manifest, "x")
    if x is not None:
        file = root / manifest["arrays"]["x"]["file"]
        if x.ndim != 2 or x.shape[0] != n:
            raise ValueError(f"{file}: expected features of shape [{n}, F], one row per node (got {x.shape})")
        if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer) or x.dtype == bool):
            raise ValueError(f"{file}: expected numeric features (got dtype {x.dtype})")
        data["x"] = x if x.dtype == np.float32 else x.astype(np.float32)
    y = _load(root, manifest, "y")
    if y is not None and y.ndim == 2 and y.shape[1] > 1:  # [N, C] 0/1: multi-label
        from graphdist.data.readers.common import _labels_array  # the data layer's one label check

        file = root / manifest["arrays"]["y"]["file"]
        if y.shape[0] != n:
            raise ValueError(f"{file}: expected {n} rows, one per node as manifest.json says (got shape {y.shape})")
        data["y"] = _labels_array(y, str(file))
    elif y is not None:
        data["y"] = _ints(root, manifest, "y", n, "one label per node", upper=None, lower=-1, kind="labels")
    for name in MASK_NAMES:
        mask = _vector(root, manifest, name, n, "one flag per node")
        if mask is None:
            continue
        if mask.dtype != bool and not (np.issubdtype(mask.dtype, np.integer) and np.isin(mask, (0, 1)).all()):
            raise ValueError(f"{root / manifest['arrays'][name]['file']}: expected a bool mask (got dtype {mask.dtype})")
        data[name] = np.asarray(mask, dtype=bool)
    return data


def load_dgl_export(path: PathLike) -> DglExport:
    """Reads and checks every array of an export; see `DglExport`.

    Raises:
        ValueError: one line naming the file and the problem (missing manifest or array, another
            format version, inconsistent lengths, ids out of range, features that are not finite).
    """
    root = Path(path)
    manifest = read_manifest(root)
    n, e = manifest["num_nodes"], manifest["num_edges"]
    src = _ints(root, manifest, "src", e, "one per edge", upper=n, kind="node ids")
    dst = _ints(root, manifest, "dst", e, "one per edge", upper=n, kind="node ids")
    data = _node_data(root, manifest, n)
    parts = num_parts = None
    if manifest["kind"] == "partitions":
        num_parts = manifest["num_parts"]
        parts = _ints(root, manifest, "node_parts", n, "one part per node", upper=num_parts, kind="part ids")
    orig = _ints(root, manifest, "orig_nids", n, "one original id per node", upper=n, kind="original ids")
    if orig is not None:
        if np.bincount(orig, minlength=n).max(initial=1) != 1:
            raise ValueError(f"{root / manifest['arrays']['orig_nids']['file']}: expected a permutation of 0..{n - 1} "
                             "(got repeated ids)")
        # the export is in DistDGL's ids: renumber everything into the user's original ones
        src, dst = orig[src], orig[dst]
        shuffled = np.empty(n, dtype=np.int64)
        shuffled[orig] = np.arange(n, dtype=np.int64)
        data = {k: v[shuffled] for k, v in data.items()}
        parts = None if parts is None else parts[shuffled]
    name = manifest.get("graph_name") or Path(str(manifest.get("source") or root.name)).stem
    try:
        graph = Graph.from_edge_index(np.stack([src, dst]), num_nodes=n, name=str(name), **data)
    except ValueError as exc:
        field = str(exc).split(":", 1)[0]
        where = root / manifest["arrays"][field]["file"] if field in manifest["arrays"] else root
        raise ValueError(f"{where}: {exc}") from None
    node_ids = "original" if orig is not None or manifest["kind"] == "graph" else SHUFFLED
    return DglExport(path=root, manifest=manifest, graph=graph, parts=parts, num_parts=num_parts, node_ids=node_ids)


def read_dgl_export(path: PathLike) -> Graph:
    """The `Graph` of an export: features float32, labels int64 (a 0/1 multi-label matrix: uint8), masks bool.

    A partition export's graph is in the original node ids when the export has them, else in
    DistDGL's shuffled ids.

    Raises:
        ValueError: one line naming the file and the problem.

    Example:
        >>> import tempfile
        >>> from graphdist.testing import tiny_graph
        >>> g = read_dgl_export(write_test_export(tiny_graph(), tempfile.mkdtemp() + "/e"))
        >>> g.x.dtype, g.y.dtype, g.train_mask.dtype
        (torch.float32, torch.int64, torch.bool)
    """
    return load_dgl_export(path).graph


# ------------------------------------------------------------------ writing
def import_dgl_partitions(
    path: PathLike,
    out: PathLike,
    halo_hops: int = 1,
    force: bool = False,
    *,
    command: Optional[Sequence[str]] = None,
) -> Path:
    """Writes a graphdist partition directory with exactly DistDGL's part of every node.

    ``meta.json`` records ``method: "distdgl"`` and, under ``distdgl``, DistDGL's graph name,
    part method and halo, and which node ids ``orig_ids.npy`` holds (the original ones when the
    export has them, else DistDGL's shuffled ones). The halo is graphdist's (``halo_hops``).

    Args:
        path: a partition export (``dgl_export.py partitions``).
        out: the partition directory to write.
        halo_hops: graphdist's halo depth (default 1).
        force: replace an existing partition directory (default False).
        command: the command line recorded in ``meta.json`` (default ``sys.argv``).

    Returns:
        The partition directory.

    Raises:
        ValueError: a bad export (one line naming the file), or a whole-graph export (no parts).
        FileExistsError: ``out`` exists and ``force`` is False.
    """
    from graphdist.data.loaders import source_key
    from partition.assigned import write_assigned

    export = load_dgl_export(path)
    if export.parts is None:
        raise ValueError(f"{export.path / MANIFEST}: kind 'graph' has no part assignment; import it with --as graph and "
                         "partition it with graphdist-partition, or export the DistDGL partition directory")
    m = export.manifest
    extra: dict[str, Any] = {"distdgl": {
        "graph_name": m.get("graph_name"), "part_method": m.get("part_method"), "num_parts": export.num_parts,
        "halo_hops": m.get("halo_hops"), "node_ids": export.node_ids, "export": str(export.path),
        "source": m.get("source"), "dgl_version": m.get("dgl_version"),
    }}
    return write_assigned(export.graph, export.parts, out, halo_hops=halo_hops, method_label="distdgl", force=force,
                          source=source_key(str(export.path)), num_parts=export.num_parts, meta_extra=extra,
                          command=command)


def write_npz(graph: Graph, out: PathLike, force: bool = False) -> Path:
    """Saves ``graph`` in graphdist's ``.npz`` dataset format (``datasets/README.md``), written aside and renamed.

    Raises:
        ValueError: ``out`` does not end in ``.npz``.
        FileExistsError: ``out`` exists and ``force`` is False.
    """
    from graphdist.data.readers.common import _atomic_savez  # the data layer's one .npz writer

    out = Path(out)
    if out.suffix != ".npz":
        raise ValueError(f"--out: expected a path ending in .npz (got {out})")
    if out.exists() and not force:
        raise FileExistsError(f"--out: {out} already exists; pass --force to replace it or choose another --out")
    arrays = {"edge_index": graph.edge_index().numpy()}
    arrays.update({k: v.numpy() for k, v in graph.node_data().items()})
    out.parent.mkdir(parents=True, exist_ok=True)
    _atomic_savez(out, arrays)
    return out


def write_test_export(graph: Graph, out: PathLike, parts: Optional[np.ndarray] = None,
                      orig_nids: Optional[np.ndarray] = None) -> Path:
    """Writes ``graph`` as the exporter would (a partition export when ``parts`` is given): for tests and
    docs, without dgl. With ``orig_nids`` the arrays are renumbered into "DistDGL" ids ``s`` where
    ``orig_nids[s]`` is the node of ``graph``, as a real partition export is.
    """
    n = graph.num_nodes
    src, dst = (a.numpy() for a in graph.edge_index())
    data = {k: v.numpy() for k, v in graph.node_data().items()}
    if orig_nids is not None:
        shuffled = np.empty(n, dtype=np.int64)
        shuffled[orig_nids] = np.arange(n)
        src, dst = shuffled[src], shuffled[dst]
        data = {k: v[orig_nids] for k, v in data.items()}
        parts = None if parts is None else np.asarray(parts)[orig_nids]
    data.update(src=src, dst=dst)
    manifest: dict[str, Any] = {"format": FORMAT, "version": FORMAT_VERSION, "kind": "graph", "source": graph.name,
                                "num_nodes": n, "num_edges": int(src.size), "homogeneous": True, "node_ids": "original"}
    if parts is not None:
        data["node_parts"] = np.asarray(parts, dtype=np.int64)
        manifest.update(kind="partitions", graph_name=graph.name, num_parts=int(np.max(parts)) + 1,
                        part_method="test", node_ids="original" if orig_nids is not None else SHUFFLED)
        if orig_nids is not None:
            data["orig_nids"] = np.asarray(orig_nids, dtype=np.int64)
    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    manifest["arrays"] = {}
    for name, value in data.items():
        np.save(root / f"{name}.npy", value, allow_pickle=False)
        manifest["arrays"][name] = {"file": f"{name}.npy", "dtype": str(value.dtype), "shape": list(value.shape)}
    (root / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return root


__all__ = [
    "DglExport", "FORMAT", "FORMAT_VERSION", "MANIFEST", "exporter_path", "exporter_usage", "import_dgl_partitions",
    "load_dgl_export", "print_exporter_usage", "read_dgl_export", "read_manifest", "write_npz", "write_test_export",
]
