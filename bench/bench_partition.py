"""Partitioning benchmark: end-to-end time, per-phase split, peak memory and quality per method.

Each method runs in a fresh subprocess (so peak RSS is that method's alone):
generate the graph (``graphdist.data.synthetic``), partition, write the
directory (halo 1), then read the quality figures from ``meta.json``.

Run book::

    .venv/bin/python bench/bench_partition.py                        # 1M nodes, ~20M edges, 8 parts
    .venv/bin/python bench/bench_partition.py --nodes 100000 --methods metis,stream
    .venv/bin/python bench/bench_partition.py --num-features 0       # structure only

Targets (issue 3): metis 8 parts < 60 s and < 4 GiB; random and stream < 30 s;
edge cut metis ~0.2 << stream ~0.45 < random ~0.875, super between metis and random.
Timings on a shared 2-core machine are noisy: compare runs side by side, not across days.
Writes bench/results/partition.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "partition.json"
TARGET_S = {"metis": 60.0, "random": 30.0, "stream": 30.0}
TARGET_GIB = {"metis": 4.0}


def _peak_rss_gib() -> float:
    # ru_maxrss is KiB on Linux.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1 << 20)


def child(args: argparse.Namespace) -> dict[str, Any]:
    """Runs one method end to end in this process and returns its figures."""
    sys.path.insert(0, str(REPO))
    t0 = time.perf_counter()
    from graphdist.data.synthetic import synthetic

    graph = synthetic(args.nodes, avg_degree=args.avg_degree, num_features=args.num_features, seed=args.seed)
    t_load = time.perf_counter()
    from partition.api import PartitionConfig, partition_stats
    from partition.format import staged_directory, write_partition_files
    from partition.methods import PARTITIONERS

    config = PartitionConfig(num_parts=args.parts, method=args.method, seed=args.seed)
    config.check_graph(graph)
    out = Path(args.out) / f"{args.method}-{args.parts}"
    info: dict[str, Any] = {}
    with staged_directory(out, force=True) as tmp:
        kwargs: dict[str, Any] = {"balance": config.balance, "info": info} if args.method == "metis" else {}
        parts = PARTITIONERS[args.method](graph, args.parts, seed=args.seed, **kwargs)
        t_part = time.perf_counter()
        write_partition_files(tmp, graph, parts, args.parts, halo_hops=1, meta_extra={"method": args.method})
    t_write = time.perf_counter()
    stats = partition_stats(out)
    return {
        "method": args.method,
        "num_nodes": graph.num_nodes,
        "num_edges": graph.num_edges,
        "num_parts": args.parts,
        "load_s": t_load - t0,
        "partition_s": t_part - t_load,
        "write_s": t_write - t_part,
        "total_s": t_write - t0,
        "peak_rss_gib": _peak_rss_gib(),
        "edge_cut": stats.edge_cut,
        "node_balance": stats.node_balance,
        "edge_balance": stats.edge_balance,
        "train_balance": stats.train_balance,
        "replication": stats.replication_factor,
        "mean_label_tvd": stats.mean_label_tvd,
        "refine": info.get("refine"),
    }


def run_method(args: argparse.Namespace, method: str, out_dir: str) -> dict[str, Any]:
    cmd = [
        sys.executable, __file__, "--child", method, "--nodes", str(args.nodes), "--avg-degree", str(args.avg_degree),
        "--num-features", str(args.num_features), "--parts", str(args.parts), "--seed", str(args.seed), "--out", out_dir,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["(no output)"]
        return {"method": method, "error": tail[0]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'method':<7} {'total s':>8} {'load':>6} {'part':>6} {'write':>6} {'peak GiB':>9} "
        f"{'cut':>6} {'node bal':>8} {'edge bal':>8} {'train bal':>9} {'repl':>5} {'TVD':>6}  target"
    )
    lines = [head]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['method']:<7} failed: {r['error']}")
            continue
        lines.append(
            f"{r['method']:<7} {r['total_s']:>8.1f} {r['load_s']:>6.1f} {r['partition_s']:>6.1f} {r['write_s']:>6.1f} "
            f"{r['peak_rss_gib']:>9.2f} {r['edge_cut']:>6.3f} {r['node_balance']:>8.3f} {r['edge_balance']:>8.3f} "
            f"{(r['train_balance'] or 0):>9.3f} {r['replication']:>5.2f} {(r['mean_label_tvd'] or 0):>6.3f}  "
            f"{_verdict(r)}"
        )
    return "\n".join(lines)


def _verdict(r: dict[str, Any]) -> str:
    notes = []
    if r["method"] in TARGET_S:
        ok = r["total_s"] < TARGET_S[r["method"]]
        notes.append(f"time<{TARGET_S[r['method']]:.0f}s {'ok' if ok else 'MISSED'}")
    if r["method"] in TARGET_GIB:
        ok = r["peak_rss_gib"] < TARGET_GIB[r["method"]]
        notes.append(f"mem<{TARGET_GIB[r['method']]:.0f}GiB {'ok' if ok else 'MISSED'}")
    return ", ".join(notes) or "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1_000_000, help="graph size (default 1,000,000)")
    parser.add_argument("--avg-degree", type=float, default=20.0, help="directed edges per node (default 20)")
    parser.add_argument("--num-features", type=int, default=100, help="feature dim (default 100, the generator's)")
    parser.add_argument("--parts", type=int, default=8, help="number of parts (default 8)")
    parser.add_argument("--methods", default="metis,random,super,stream", help="comma-separated methods")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=RESULTS, help=f"results file (default {RESULTS})")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        args.method = args.child
        print(json.dumps(child(args)))
        return 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-partition-") as out_dir:
        for method in args.methods.split(","):
            rows.append(run_method(args, method.strip(), out_dir))
            print(table(rows[-1:]).splitlines()[-1], flush=True)
    print()
    print(f"{args.nodes:,} nodes, avg degree {args.avg_degree}, {args.num_features} features, {args.parts} parts, "
          f"halo 1, {os.cpu_count()} CPUs (shared: timings are noisy)")
    print(table(rows))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    payload = {"config": {k: v for k, v in vars(args).items() if k not in ("child", "out", "json")}, "results": rows}
    args.json.write_text(json.dumps(payload, indent=1, default=str) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
