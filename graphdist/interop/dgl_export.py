"""Exports a DGL graph or a DistDGL partition directory as plain arrays; run it with a python that has dgl.

graphdist never imports dgl (DGL 2.1 needs torch <= 2.2), so this file is a plain script: it
imports dgl, torch and numpy (plus the standard library), never graphdist, and runs in an
environment with DGL, e.g. the peer venv that ``bench/peers/env.py`` builds. It writes ``.npy``
arrays and a ``manifest.json`` that ``graphdist import-dgl`` turns into a graphdist ``.npz``
dataset or partition directory.

Run book (``PEER_PY`` is any python with dgl; ``python bench/peers/env.py`` prints one)::

    $PEER_PY graphdist/interop/dgl_export.py graph data/graph.bin --out export/graph
    $PEER_PY graphdist/interop/dgl_export.py partitions parts/mygraph.json --orig-nids orig_nids.pt \\
        --out export/parts
    graphdist import-dgl export/graph --as graph --out graph.npz
    graphdist import-dgl export/parts --as partitions --out parts/mygraph-4

Output directory (``FORMAT`` version ``VERSION``)::

    manifest.json      format, version, kind (graph | partitions), num_nodes, num_edges, homogeneous,
                       keys (array -> the ndata key it came from), missing_keys, node_ids, arrays
    src.npy dst.npy    int64 [E]     edges, in DGL's edge id order
    x.npy              float32 [N, F]   from --feat-key, if the graph has it
    y.npy              int64 [N] (class ids) or uint8 [N, C] (0/1 multi-label), from --label-key
    train_mask.npy ... bool [N]         from --train-mask-key, --val-mask-key, --test-mask-key
    node_parts.npy     int64 [N]     (partitions) DistDGL's part of every node
    orig_nids.npy      int64 [N]     (partitions, with --orig-nids) DistDGL id -> original id

A partition export is in DistDGL's shuffled node id space (each part's nodes one contiguous
range): DistDGL does not store the original ids in its directory, only
``partition_graph(..., return_mapping=True)`` returns them; pass what you saved as ``--orig-nids``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

import numpy as np

FORMAT = "graphdist-dgl-export"
VERSION = 1
MANIFEST = "manifest.json"
PROG = "dgl_export"
# output array -> (flag, DGL's usual ndata key)
ROLES = {
    "x": ("--feat-key", "feat"),
    "y": ("--label-key", "label"),
    "train_mask": ("--train-mask-key", "train_mask"),
    "val_mask": ("--val-mask-key", "val_mask"),
    "test_mask": ("--test-mask-key", "test_mask"),
}
SHUFFLED = "distdgl-shuffled"


class ExportError(Exception):
    """Bad input: one line on stderr, exit status 2."""


# ------------------------------------------------------------------ node data
def _resolve_keys(args: argparse.Namespace) -> dict[str, tuple[str, bool]]:
    """array -> (ndata key, whether the user named it: a named key that is absent is an error)."""
    out = {}
    for role, (flag, default) in ROLES.items():
        given = getattr(args, flag[2:].replace("-", "_"))
        out[role] = (given or default, given is not None)
    return out


def _convert(role: str, value, num_nodes: int, where: str) -> np.ndarray:
    import torch

    t = value.detach().cpu()
    if t.shape[0] != num_nodes:
        raise ExportError(f"{where}: expected {num_nodes} rows, one per node (got shape {tuple(t.shape)})")
    if role == "x":
        t = t.reshape(num_nodes, -1) if t.dim() != 2 else t
        return t.to(torch.float32).numpy()
    if role == "y":
        if t.dim() == 2 and t.shape[1] == 1:
            t = t.reshape(-1)
        if t.dim() == 2 and bool(((t == 0) | (t == 1)).all()):
            return t.to(torch.uint8).numpy()  # [N, C] 0/1: multi-label
        if t.dim() != 1 or t.is_floating_point() or t.is_complex():
            raise ExportError(f"{where}: expected integer class ids [N] or a 0/1 multi-label matrix [N, C] "
                              f"(got {t.dtype} {tuple(t.shape)})")
        return t.to(torch.int64).numpy()
    if t.dim() != 1:
        raise ExportError(f"{where}: expected a mask of shape [N] (got {tuple(t.shape)})")
    return (t != 0).numpy()


def _node_arrays(data: dict, keys: dict[str, tuple[str, bool]], num_nodes: int, where: str,
                 prefix: str = "") -> tuple[dict[str, np.ndarray], dict[str, str], dict[str, str]]:
    """``(arrays, found role -> key, missing role -> key)`` from a name -> tensor dict."""
    arrays, found, missing = {}, {}, {}
    for role, (key, named) in keys.items():
        stored = prefix + key
        if stored in data:
            arrays[role] = _convert(role, data[stored], num_nodes, f"{where}: {key!r}")
            found[role] = key
        elif named:
            have = sorted(k[len(prefix):] for k in data if k.startswith(prefix))
            raise ExportError(f"{where}: no node data {key!r} (has {', '.join(have) or 'none'}); "
                              f"fix {ROLES[role][0]}")
        else:
            missing[role] = key
    return arrays, found, missing


# ------------------------------------------------------------------ graph
def export_graph(path: str, out: str, index: int, keys: dict[str, tuple[str, bool]], force: bool) -> dict:
    """Writes the arrays of graph ``index`` of a ``dgl.save_graphs`` file; returns the manifest."""
    import dgl

    if not os.path.isfile(path):
        raise ExportError(f"{path}: no such file (expected a .bin written by dgl.save_graphs)")
    if index < 0:
        raise ExportError(f"--graph-index: expected an integer >= 0 (got {index})")
    try:
        graphs, _ = dgl.load_graphs(path, [index])
    except Exception as exc:  # noqa: BLE001 - DGL raises DGLError with a C++ stack trace
        if "out of bound" in str(exc):
            count = len(dgl.load_graphs(path)[0])
            raise ExportError(f"--graph-index {index}: {path} holds {count} graph(s); use 0..{count - 1}") from None
        raise ExportError(f"{path}: dgl.load_graphs cannot read it ({str(exc).splitlines()[0]})") from None
    g = graphs[0]
    where = f"{path} graph {index}"
    if len(g.ntypes) > 1 or len(g.canonical_etypes) > 1:
        raise ExportError(_hetero_message(where, g.ntypes, [str(e) for e in g.canonical_etypes]))
    src, dst = g.edges(order="eid")
    n = int(g.num_nodes())
    arrays, found, missing = _node_arrays(dict(g.ndata), keys, n, where)
    arrays["src"], arrays["dst"] = src.numpy().astype(np.int64), dst.numpy().astype(np.int64)
    manifest = _manifest("graph", path, n, int(g.num_edges()), found, missing,
                         unused=sorted(set(g.ndata) - set(found.values())), graph_index=index, node_ids="original")
    _write(out, arrays, manifest, force)
    return manifest


def _hetero_message(where: str, ntypes, etypes) -> str:
    return (f"{where} is a heterograph (node types: {', '.join(map(str, ntypes))}; edge types: {'; '.join(etypes)}); "
            "graphdist takes one node and one edge type: export dgl.to_homogeneous(g, ndata=[...]) instead")


# ------------------------------------------------------------------ partitions
def _read_config(path: str) -> tuple[str, dict]:
    if os.path.isdir(path):
        found = sorted(f for f in os.listdir(path) if f.endswith(".json") and f != MANIFEST)
        if len(found) != 1:
            raise ExportError(f"{path}: expected one DistDGL config <graph_name>.json in it (found "
                              f"{', '.join(found) or 'none'}); pass the .json itself")
        path = os.path.join(path, found[0])
    try:
        with open(path) as fh:
            config = json.load(fh)
    except (OSError, ValueError) as exc:
        raise ExportError(f"{path}: not a readable DistDGL partition config ({exc})") from None
    needed = [k for k in ("num_parts", "node_map", "edge_map") if not isinstance(config, dict) or k not in config]
    if needed:
        raise ExportError(f"{path}: not a DistDGL partition config (no {', '.join(needed)}); "
                          "pass the <graph_name>.json that dgl.distributed.partition_graph wrote")
    return path, config


def _part_file(config_path: str, entry: dict, key: str, part: int) -> str:
    if key not in entry:
        extra = " (this directory holds GraphBolt graphs only: keep graph.dgl)" if key == "part_graph" else ""
        raise ExportError(f"{config_path}: part-{part} has no {key!r}{extra}")
    file = entry[key]
    base = os.path.dirname(os.path.abspath(config_path))
    candidates = [file] if os.path.isabs(file) else [os.path.join(base, file)]
    # DGL before 1.0 wrote absolute paths: a moved directory still has the file beside the config
    candidates.append(os.path.join(base, os.path.basename(os.path.dirname(file)), os.path.basename(file)))
    for candidate in candidates:
        if os.path.isfile(candidate):
            return candidate
    raise ExportError(f"{config_path}: part-{part} {key} {file!r} not found (looked in {base})")


def _ranges(config_path: str, config: dict, ntype: str, num_parts: int) -> np.ndarray:
    ranges = np.asarray(config["node_map"][ntype], dtype=np.int64)
    if ranges.shape != (num_parts, 2) or ranges[0, 0] != 0 or np.any(ranges[1:, 0] != ranges[:-1, 1]):
        raise ExportError(f"{config_path}: node_map[{ntype!r}] is not {num_parts} contiguous [start, end) ranges "
                          f"from 0 (got {ranges.tolist()}); only reshuffled partitions (DGL >= 0.8) are supported")
    return ranges


def export_partitions(path: str, out: str, orig_nids: str | None, keys: dict[str, tuple[str, bool]],
                      force: bool) -> dict:
    """Writes the arrays of a DistDGL partition directory, in its shuffled id space; returns the manifest."""
    import dgl
    from dgl.data.utils import load_tensors

    path, config = _read_config(path)
    node_types, edge_types = list(config["node_map"]), list(config["edge_map"])
    if len(node_types) != 1 or len(edge_types) != 1:
        raise ExportError(_hetero_message(path, node_types, edge_types))
    ntype, num_parts = node_types[0], int(config["num_parts"])
    ranges = _ranges(path, config, ntype, num_parts)
    n = int(ranges[-1, 1])
    e = int(np.asarray(config["edge_map"][edge_types[0]], dtype=np.int64)[-1, 1])
    src, dst = np.full(e, -1, dtype=np.int64), np.full(e, -1, dtype=np.int64)
    arrays: dict[str, np.ndarray] = {}
    found: dict[str, str] = {}
    missing: dict[str, str] = {}
    unused: set[str] = set()
    for p in range(num_parts):
        entry = config.get(f"part-{p}", {})
        g = dgl.load_graphs(_part_file(path, entry, "part_graph", p))[0][0]
        nid, inner = g.ndata[dgl.NID].numpy(), g.ndata["inner_node"].numpy() != 0
        start, end = ranges[p]
        if not np.array_equal(nid[inner], np.arange(start, end)):
            raise ExportError(f"{path}: part-{p}'s inner nodes are not node_map's range [{start}, {end})")
        inner_edge = g.edata["inner_edge"].numpy() != 0
        eid = g.edata[dgl.EID].numpy()[inner_edge]
        s, d = (t.numpy()[inner_edge] for t in g.edges(order="eid"))
        src[eid], dst[eid] = nid[s], nid[d]
        feats = load_tensors(_part_file(path, entry, "node_feats", p))
        part_arrays, found, missing = _node_arrays(feats, keys, int(end - start), f"{path} part-{p} node_feats",
                                                   prefix=f"{ntype}/")
        unused |= {k.split("/", 1)[-1] for k in feats} - set(found.values())
        for role, value in part_arrays.items():
            if role not in arrays:
                arrays[role] = np.zeros((n, *value.shape[1:]), dtype=value.dtype)
            arrays[role][start:end] = value
    if np.any(src < 0):
        raise ExportError(f"{path}: {int(np.count_nonzero(src < 0))} of {e} edges are in no part's inner edges")
    arrays["src"], arrays["dst"] = src, dst
    arrays["node_parts"] = np.repeat(np.arange(num_parts, dtype=np.int64), ranges[:, 1] - ranges[:, 0])
    if orig_nids is not None:
        arrays["orig_nids"] = _load_orig_nids(orig_nids, n, ntype)
    manifest = _manifest(
        "partitions", path, n, e, found, missing, unused=sorted(unused), node_ids="original" if orig_nids else SHUFFLED,
        graph_name=config.get("graph_name"), num_parts=num_parts, part_method=config.get("part_method"),
        halo_hops=config.get("halo_hops"),
    )
    _write(out, arrays, manifest, force)
    return manifest


def _load_orig_nids(file: str, num_nodes: int, ntype: str) -> np.ndarray:
    if not os.path.isfile(file):
        raise ExportError(f"--orig-nids: {file}: no such file")
    try:
        if file.endswith(".npy"):
            value = np.load(file, allow_pickle=False)
        else:
            import torch

            value = torch.load(file, map_location="cpu")
    except Exception as exc:  # noqa: BLE001 - np.load and torch.load raise many kinds
        raise ExportError(f"--orig-nids: {file}: unreadable as .npy or torch.save ({exc})") from None
    if isinstance(value, dict):  # partition_graph returns {ntype: ids} for heterographs
        value = value.get(ntype, next(iter(value.values())) if len(value) == 1 else None)
    ids = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
    if ids.shape != (num_nodes,) or not np.issubdtype(ids.dtype, np.integer):
        raise ExportError(f"--orig-nids: {file}: expected {num_nodes} integer ids (got {ids.dtype} {ids.shape})")
    ids = ids.astype(np.int64)
    if ids.min() < 0 or ids.max() >= num_nodes or np.any(np.bincount(ids, minlength=num_nodes) != 1):
        raise ExportError(f"--orig-nids: {file}: expected a permutation of 0..{num_nodes - 1}, as partition_graph's "
                          "orig_nids")
    return ids


# ------------------------------------------------------------------ output
def _manifest(kind: str, source: str, n: int, e: int, found: dict, missing: dict, unused: list, node_ids: str,
              **extra) -> dict:
    import dgl

    return {
        "format": FORMAT, "version": VERSION, "kind": kind, "source": source,
        "dgl_version": dgl.__version__, "num_nodes": n, "num_edges": e, "homogeneous": True,
        "keys": found, "missing_keys": missing, "unused_ndata": unused, "node_ids": node_ids, **extra,
    }


def _write(out: str, arrays: dict[str, np.ndarray], manifest: dict, force: bool) -> None:
    """Writes into a hidden sibling and renames it: an interrupted export leaves nothing that looks complete."""
    if os.path.exists(out):
        ours = os.path.isdir(out) and (os.path.exists(os.path.join(out, MANIFEST)) or not os.listdir(out))
        if not force or not ours:
            what = "pass --force to replace it" if ours else "it is not an export directory; choose another --out"
            raise ExportError(f"--out: {out} already exists; {what}")
    tmp = os.path.join(os.path.dirname(os.path.abspath(out)), f".{os.path.basename(out)}.tmp-{os.getpid()}")
    os.makedirs(tmp)
    try:
        manifest["arrays"] = {}
        for name, value in arrays.items():
            np.save(os.path.join(tmp, f"{name}.npy"), np.ascontiguousarray(value), allow_pickle=False)
            manifest["arrays"][name] = {"file": f"{name}.npy", "dtype": str(value.dtype), "shape": list(value.shape)}
        with open(os.path.join(tmp, MANIFEST), "w") as fh:
            json.dump(manifest, fh, indent=1)
            fh.write("\n")
        if os.path.exists(out):
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _report(out: str, manifest: dict) -> str:
    arrays = manifest["arrays"]
    lines = [f"wrote {out}: {manifest['kind']}, {manifest['num_nodes']:,} nodes, {manifest['num_edges']:,} edges"
             + (f", {manifest['num_parts']} parts ({manifest['part_method']})" if "num_parts" in manifest else "")]
    for role, key in manifest["keys"].items():
        lines.append(f"  {role:<10} {arrays[role]['dtype']} {arrays[role]['shape']} from {key!r}")
    for role, key in manifest["missing_keys"].items():
        lines.append(f"  {role:<10} absent (no {key!r}; name it with {ROLES[role][0]})")
    if manifest["unused_ndata"]:
        lines.append(f"  not exported: {', '.join(manifest['unused_ndata'])}")
    if manifest["node_ids"] == SHUFFLED:
        lines.append("  node ids: DistDGL's shuffled ids (no --orig-nids given; partition_graph(..., "
                     "return_mapping=True) returns orig_nids: torch.save them and pass --orig-nids)")
    as_kind = "partitions --out parts/<name>" if manifest["kind"] == "partitions" else "graph --out <name>.npz"
    lines.append(f"next: graphdist import-dgl {out} --as {as_kind}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="mode", required=True)
    graph = sub.add_parser("graph", help="a DGLGraph saved with dgl.save_graphs (.bin)")
    graph.add_argument("source", help="the .bin file")
    graph.add_argument("--graph-index", "--graph_index", dest="graph_index", type=int, default=0,
                       help="which graph of the file (default: 0)")
    parts = sub.add_parser("partitions", help="a directory written by dgl.distributed.partition_graph")
    parts.add_argument("source", help="its <graph_name>.json, or the directory holding it")
    parts.add_argument("--orig-nids", "--orig_nids", dest="orig_nids", metavar="FILE",
                       help="partition_graph(..., return_mapping=True)'s orig_nids, saved as .npy or with torch.save")
    for p in (graph, parts):
        p.add_argument("--out", required=True, help="output directory (must not exist, unless --force)")
        p.add_argument("--force", action="store_true", help="replace an existing export directory")
        for role, (flag, default) in ROLES.items():
            p.add_argument(flag, "--" + flag[2:].replace("-", "_"), dest=flag[2:].replace("-", "_"), metavar="KEY",
                           help=f"ndata key of {role} (default: {default!r}, skipped when absent)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    keys = _resolve_keys(args)
    try:
        if args.mode == "graph":
            manifest = export_graph(args.source, args.out, args.graph_index, keys, args.force)
        else:
            manifest = export_partitions(args.source, args.out, args.orig_nids, keys, args.force)
    except ExportError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    print(_report(args.out, manifest))
    return 0


if __name__ == "__main__":
    # Run as a script, python puts this file's folder first on sys.path, and that folder holds
    # graphdist's importer, graphdist/interop/dgl.py: `import dgl` would find it, not DGL.
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]
    sys.exit(main())
