"""``graphdist import-dgl``: a DGL graph or DistDGL partition export in, a graphdist dataset or partition directory out.

Run book (``$PEER_PY`` is a python with dgl; ``python bench/peers/env.py`` builds one and prints it)::

    $PEER_PY graphdist/interop/dgl_export.py partitions parts/mygraph.json --orig-nids orig_nids.pt --out export/p
    graphdist import-dgl export/p --out parts/mygraph-4            # DistDGL's parts, kept as they are
    graphdist-train --partitions parts/mygraph-4 ...

    $PEER_PY graphdist/interop/dgl_export.py graph graph.bin --out export/g
    graphdist import-dgl export/g --as graph --out data/mygraph.npz
    graphdist import-dgl --exporter                                # prints how to run the exporter

Bad input exits 2 with one line on stderr, never a traceback (``GRAPHDIST_DEBUG=1`` shows it).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Optional, Sequence

from graphdist.cli.args import OneLineParser, UsageError

PROG = "graphdist import-dgl"

EXAMPLES = """\
examples:
  graphdist import-dgl export/parts --out parts/mygraph-4
  graphdist import-dgl export/parts --as partitions --halo-hops 2 --force --out parts/mygraph-4
  graphdist import-dgl export/graph --as graph --out data/mygraph.npz
  graphdist import-dgl --exporter

exit status: 0 ok, 1 failed while running, 2 bad arguments or input.
"""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (dashed flags, underscore aliases)."""
    parser = OneLineParser(
        prog=PROG, epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Turn the output of graphdist/interop/dgl_export.py (a DGL graph or a DistDGL partition "
                    "directory, exported with DGL's python) into a graphdist .npz dataset or partition directory.",
    )
    parser.add_argument("export", nargs="?", type=Path, metavar="EXPORT_DIR", help="the exporter's --out directory")
    parser.add_argument("--out", type=Path, metavar="PATH",
                        help="a .npz file (--as graph) or a partition directory (--as partitions)")
    parser.add_argument("--as", dest="kind", choices=("graph", "partitions"),
                        help="what to write (default: partitions for a DistDGL export, graph for a graph export)")
    parser.add_argument("--halo-hops", "--halo_hops", dest="halo_hops", type=int, default=1, metavar="H",
                        help="graphdist's halo depth for --as partitions (default: 1)")
    parser.add_argument("--force", action="store_true", help="replace an existing --out")
    parser.add_argument("--exporter", action="store_true", help="print how to run the exporter and exit")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point; returns the exit status."""
    try:
        args = build_parser().parse_args(argv)
        if args.exporter:
            from graphdist.interop.dgl import print_exporter_usage

            print_exporter_usage()
            return 0
        if args.export is None or args.out is None:
            raise UsageError("EXPORT_DIR and --out are required, e.g. graphdist import-dgl export/p --out parts/p-4 "
                             "(graphdist import-dgl --exporter shows how to make EXPORT_DIR)")
        if args.halo_hops < 1:
            raise UsageError(f"--halo-hops: expected an integer >= 1 (got {args.halo_hops})")
        return _run(args, [PROG, *(sys.argv[1:] if argv is None else argv)])
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    except UsageError as exc:
        return _fail(str(exc), 2)
    except (ValueError, FileExistsError, FileNotFoundError, PermissionError) as exc:
        if os.environ.get("GRAPHDIST_DEBUG"):
            raise
        return _fail(" ".join(str(exc).split()), 2)
    except OSError as exc:
        if os.environ.get("GRAPHDIST_DEBUG"):
            raise
        return _fail(" ".join(str(exc).split()), 1)
    except Exception as exc:  # noqa: BLE001 - never a traceback at the CLI
        if os.environ.get("GRAPHDIST_DEBUG"):
            raise
        return _fail(f"{type(exc).__name__}: {' '.join(str(exc).split())} (set GRAPHDIST_DEBUG=1 for the traceback)", 1)


def _fail(message: str, status: int) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return status


def _run(args: argparse.Namespace, argv: list[str]) -> int:
    from graphdist.interop.dgl import SHUFFLED, import_dgl_partitions, load_dgl_export, read_manifest, write_npz

    manifest = read_manifest(args.export)  # before anything is read: a bad export is one line
    kind = args.kind or manifest["kind"]
    if kind == "partitions" and manifest["kind"] != "partitions":
        raise UsageError(f"--as partitions: {args.export} is a whole-graph export with no part assignment; use "
                         "--as graph, then graphdist-partition (or export the DistDGL partition directory)")
    if (args.out.exists() or args.out.is_symlink()) and not args.force:
        raise UsageError(f"--out: {args.out} already exists; pass --force to replace it or choose another --out")
    if kind == "graph":
        if args.out.suffix != ".npz":
            raise UsageError(f"--out: expected a path ending in .npz for --as graph (got {args.out})")
        export = load_dgl_export(args.export)
        out = write_npz(export.graph, args.out, force=args.force)
        print(f"{export.graph!r}")
        print(f"wrote {out} (node ids: {export.node_ids}); train on it with --dataset {out}")
        return 0
    from partition.stats import partition_stats

    out = import_dgl_partitions(args.export, args.out, halo_hops=args.halo_hops, force=args.force, command=argv)
    print(partition_stats(out).table())
    ids = ("DistDGL's shuffled ids (the export has no --orig-nids)" if manifest.get("node_ids") == SHUFFLED
           else "the original ids")
    print(f"wrote {out}: {manifest['num_parts']} parts, DistDGL's assignment ({manifest.get('part_method')}); "
          f"orig_ids.npy holds {ids}")
    return 0


__all__ = ["build_parser", "main"]
