"""``graphdist-partition``: partition a graph once into a checksummed directory, train many times.

Run book::

    graphdist-partition --dataset cora --num-parts 4 --out parts/cora-4
    graphdist-partition --dataset synthetic-1m --num-parts 8 --method stream --out parts/s1m-8
    graphdist-partition --dataset edges.npz --num-parts 2 --method random --seed 3 --force --out parts/e-2
    graphdist-partition --dataset cora --num-parts 2 --task link --out parts/cora-link-2
  graphdist-partition --stats parts/cora-4

Prints a memory estimate before partitioning, a progress bar per phase (load,
partition, relabel, write) on stderr, and the statistics table at the end. Bad
input exits non-zero with one line on stderr, never a traceback
(``GRAPHDIST_DEBUG=1`` shows it).
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from graphdist.cli.args import OneLineParser, UsageError
from partition.methods import METHODS  # the registry alone: imports neither torch nor pymetis

PROG = "graphdist-partition"

EXAMPLES = """\
examples:
  graphdist-partition --dataset cora --num-parts 4 --out parts/cora-4
  graphdist-partition --dataset pubmed --num-parts 8 --method super --seed 1 --out parts/pubmed-8
  graphdist-partition --dataset synthetic-1m --num-parts 8 --method stream --out parts/s1m-8
  graphdist-partition --dataset cora --num-parts 4 --halo-hops 2 --balance nodes,train --force --out parts/cora-4
  graphdist-partition --stats parts/cora-4

methods:
  metis   pymetis k-way, fewest cut edges, balanced on --balance, then a train-balance refinement
  super   METIS into many mini-clusters shuffled into equal parts (SuperTMA): label mix closer to global
  stream  one-pass LDG over the nodes (low memory: no symmetrised copy, no METIS)
  random  uniform over parts (RandomTMA): global label mix in every part, most edges cut

exit status: 0 ok, 1 failed while running, 2 bad arguments or input.
"""


@dataclass(frozen=True)
class CliArgs:
    """The parsed, validated command line."""

    dataset: Optional[str]
    num_parts: Optional[int]
    method: str
    halo_hops: int
    balance: str
    seed: int
    out: Optional[Path]
    force: bool
    stats: Optional[Path]
    verify: bool
    progress: bool
    task: str = "node"
    edge_split: tuple[float, ...] = (0.85, 0.05, 0.10)
    eval_negatives: int = 100


def build_parser() -> argparse.ArgumentParser:
    """The argument parser, flags grouped by concern (dashed names, underscore aliases)."""
    parser = OneLineParser(
        prog=PROG,
        description="Partition a graph into a checksummed partition directory (docs/design.md#the-partition-directory).",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    data = parser.add_argument_group("Data")
    data.add_argument(
        "--dataset", metavar="NAME|PATH",
        help="cora, citeseer, pubmed (from GRAPHDIST_DATA), synthetic-<N> (e.g. synthetic-1m), or a file/directory",
    )
    part = parser.add_argument_group("Partition")
    part.add_argument("--num-parts", "--num_parts", dest="num_parts", type=int, metavar="P",
                      help="number of parts, 1 <= P <= number of nodes")
    part.add_argument("--method", default="metis", choices=METHODS, help="partitioner (default: metis)")
    part.add_argument("--halo-hops", "--halo_hops", dest="halo_hops", type=int, default=1, metavar="H",
                      help="halo depth: 1 = all in-neighbours of inner nodes; H >= 2 adds halo rows (default: 1)")
    part.add_argument("--balance", default="nodes,train,edges", metavar="LIST",
                      help="metis balance constraints, a subset of nodes,train,edges (default: all three)")
    part.add_argument("--seed", type=int, default=0, help="random seed; equal seeds give identical files (default: 0)")
    link = parser.add_argument_group("Link prediction")
    link.add_argument("--task", default="node", choices=("node", "link"),
                      help="link: split the edges first (val and test edges leave the message-passing graph) "
                           "and store the split (default: node)")
    link.add_argument("--edge-split", "--edge_split", dest="edge_split", default="0.85,0.05,0.10",
                      metavar="TRAIN,VAL,TEST", help="link: shares of the edges (default: 0.85,0.05,0.10)")
    link.add_argument("--eval-negatives", "--eval_negatives", dest="eval_negatives", type=int, default=100,
                      metavar="K", help="link: seeded negatives stored per val/test edge (default: 100)")
    out = parser.add_argument_group("Output")
    out.add_argument("--out", type=Path, metavar="DIR",
                     help="output directory (default: $GRAPHDIST_CACHE/partitions/<dataset>-<method>-<P>-s<seed>-h<H>)")
    out.add_argument("--force", action="store_true", help="replace an existing partition directory at --out")
    out.add_argument("--stats", type=Path, metavar="DIR",
                     help="print the statistics of an existing partition directory and exit")
    out.add_argument("--no-verify", "--no_verify", dest="verify", action="store_false",
                     help="skip sha256 verification (of --stats DIR, or of the written output)")
    out.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                     help="progress bars per phase on stderr (default: only when stderr is a terminal)")
    return parser


def parse_args(argv: Optional[Sequence[str]]) -> CliArgs:
    """Parses and validates; raises `UsageError` with one clear line."""
    ns = build_parser().parse_args(argv)
    if ns.stats is not None:
        if ns.dataset or ns.num_parts is not None:
            raise UsageError("--stats DIR reads an existing directory; drop --dataset/--num-parts, or drop --stats")
    else:
        if not ns.dataset:
            raise UsageError("--dataset is required (e.g. --dataset cora), or use --stats DIR")
        if ns.num_parts is None:
            raise UsageError("--num-parts is required (e.g. --num-parts 4)")
        if ns.num_parts < 1:
            raise UsageError(f"--num-parts: expected an integer >= 1 (got {ns.num_parts})")
        if ns.halo_hops < 1:
            raise UsageError(f"--halo-hops: expected an integer >= 1 (got {ns.halo_hops})")
        if ns.seed < 0:
            raise UsageError(f"--seed: expected an integer >= 0 (got {ns.seed})")
        from partition.methods.metis import validate_balance

        try:
            validate_balance(ns.balance)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        if ns.out is not None:
            _check_out(ns.out, ns.force)
    edge_split = _edge_split(ns.edge_split)
    if ns.eval_negatives < 1:
        raise UsageError(f"--eval-negatives: expected an integer >= 1 (got {ns.eval_negatives})")
    return CliArgs(
        dataset=ns.dataset, num_parts=ns.num_parts, method=ns.method, halo_hops=ns.halo_hops, balance=ns.balance,
        seed=ns.seed, out=ns.out, force=ns.force, stats=ns.stats, verify=ns.verify,
        # Bars only on a terminal by default: in logs they would bury the one-line error.
        progress=sys.stderr.isatty() if ns.progress is None else ns.progress,
        task=ns.task, edge_split=edge_split, eval_negatives=ns.eval_negatives,
    )


def _edge_split(text: str) -> tuple[float, ...]:
    """``--edge-split`` as three checked shares (``partition.edges.check_fractions``)."""
    from partition.edges import check_fractions

    try:
        return check_fractions([float(v) for v in text.split(",")])
    except ValueError as exc:
        if "--edge-split" in str(exc):
            raise UsageError(str(exc)) from None
        raise UsageError(f"--edge-split: expected three comma-separated shares, e.g. 0.85,0.05,0.10 "
                         f"(got {text!r})") from None


def _check_out(out: Path, force: bool) -> None:
    """Fails before loading anything when --out can never be written."""
    if (out.exists() or out.is_symlink()) and not force:
        raise UsageError(f"--out: {out} already exists; pass --force to replace it or choose another --out")
    parent = out.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"--out: cannot create {out}: {parent} is not a writable directory; choose another --out")


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``graphdist-partition``; returns the exit status."""
    try:
        args = parse_args(argv)
        if args.stats is not None:
            return _print_stats(args.stats, args.verify)
        return _run(args, list(sys.argv if argv is None else [PROG, *argv]))
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2), already printed
        return int(exc.code or 0)
    except UsageError as exc:
        return _fail(str(exc), 2)
    except KeyboardInterrupt:
        return _fail("interrupted; no output directory was written", 130)
    except (ValueError, FileExistsError, FileNotFoundError, PermissionError, KeyError) as exc:
        if os.environ.get("GRAPHDIST_DEBUG"):
            raise
        return _fail(_message(exc), 2)
    except OSError as exc:  # a full disk, an I/O error: the message names the path and what is intact
        if os.environ.get("GRAPHDIST_DEBUG"):
            raise
        return _fail(_message(exc), 1)
    except Exception as exc:  # noqa: BLE001 - never a traceback at the CLI; GRAPHDIST_DEBUG=1 shows it
        if os.environ.get("GRAPHDIST_DEBUG"):
            raise
        return _fail(f"{type(exc).__name__}: {_message(exc)} (set GRAPHDIST_DEBUG=1 for the traceback)", 1)


def _message(exc: BaseException) -> str:
    text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    if isinstance(exc, OSError) and exc.filename and str(exc.filename) not in text:
        text = f"{exc.filename}: {exc.strerror or text}"
    return " ".join(text.split())  # one line


def _fail(message: str, status: int) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return status


def _run(args: CliArgs, argv: list[str]) -> int:
    import time

    from tqdm import tqdm

    from partition.api import PartitionConfig, estimate_memory, partition, partition_stats, verify_files, read_meta

    config = PartitionConfig(
        num_parts=args.num_parts, method=args.method, seed=args.seed, halo_hops=args.halo_hops,
        balance=args.balance, force=args.force, task=args.task, edge_split=args.edge_split,
        eval_negatives=args.eval_negatives,
    )
    # leave=False: a load that fails clears its bar, so the error stays the only line.
    with tqdm(total=1, desc="load", unit="graph", disable=not args.progress, leave=False) as bar:
        graph = _load(args.dataset)
        bar.update(1)
    config.check_graph(graph)
    estimate = estimate_memory(
        graph.num_nodes, graph.num_edges, config.num_parts, config.method, graph.num_features, config.halo_hops
    )
    print(f"{graph!r}", file=sys.stderr)
    print(estimate.describe(), file=sys.stderr)
    started = time.perf_counter()
    out = partition(
        graph, config.num_parts, config.method, args.out, config.seed, config.halo_hops, config.balance,
        config.force, progress=args.progress, command=argv, task=config.task, edge_split=config.edge_split,
        eval_negatives=config.eval_negatives,
    )
    if args.verify:
        verify_files(out, read_meta(out))
    print(partition_stats(out).table())
    from graphdist.console import shown_path
    from graphdist.data.memory import describe_peak

    print(f"wrote {out} in {time.perf_counter() - started:.1f} s ({describe_peak()})")
    print(f"next: graphdist-train --partitions {shown_path(out)} --num-workers {config.num_parts}")
    return 0


def _load(dataset: str):  # -> Graph; untyped here so --help never imports torch
    from graphdist.data import load_graph

    try:
        return load_graph(dataset)
    except FileNotFoundError as exc:
        raise UsageError(f"--dataset: {_message(exc)}") from None
    except ValueError as exc:
        raise UsageError(f"--dataset: {_message(exc)}") from None


def _print_stats(path: Path, verify: bool) -> int:
    from partition.api import partition_stats, read_meta, verify_files

    meta = read_meta(path)
    if verify:
        verify_files(path, meta)
    print(
        f"{path}: {meta.get('dataset')} | {meta.get('method')} | {meta['num_parts']} parts | "
        f"seed {meta.get('seed')} | halo {meta.get('halo_hops')}"
    )
    print(partition_stats(path).table())
    return 0


def entry() -> None:
    """The ``graphdist-partition`` command: :func:`main`, then a fast exit (``graphdist.launch.fast_exit``)."""
    from graphdist.launch import fast_exit

    fast_exit(main())


if __name__ == "__main__":
    entry()
