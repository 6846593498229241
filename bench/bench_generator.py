"""Generator benchmark: time and peak memory of ``synthetic(1M nodes)``, plus the graph's structure.

Each repeat runs in a fresh subprocess, so its peak RSS (``ru_maxrss``, read right after the
generator returns and before any statistics are computed) is the generator's alone, on top of
the interpreter with torch imported (reported as the baseline). The first repeat then measures
what the generator promises (issue 2):

* edge homophily (share of edges joining same-label nodes) >= 0.5;
* degree tail: max degree >= 20x the median;
* logistic regression on ``[x, mean of neighbours' x]`` beats one on ``x`` alone by >= 10
  points (fit on a random 40k of the train nodes, scored on 20k test nodes, to keep it quick).

Run book::

    .venv/bin/python bench/bench_generator.py                       # 1M nodes, avg degree 20, 100 features
    .venv/bin/python bench/bench_generator.py --nodes 100000 --repeats 5
    .venv/bin/python bench/bench_generator.py --no-stats             # time and memory only

Targets: < 30 s and < 4 GiB peak for 1M nodes / ~20M directed edges / 100 features.
Timings on a shared 2-core machine are noisy: compare runs side by side, not across days.
Writes bench/results/generator.json (git-ignored).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "generator.json"
TARGET_S = 30.0
TARGET_GIB = 4.0
STATS_TRAIN, STATS_TEST = 40_000, 20_000


def _peak_rss_gib() -> float:
    # ru_maxrss is KiB on Linux.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1 << 20)


def child(args: argparse.Namespace) -> dict[str, Any]:
    """Generates one graph in this process; returns time, memory and (optionally) structure figures."""
    sys.path.insert(0, str(REPO))
    import torch

    from graphdist.data.synthetic import synthetic

    baseline = _peak_rss_gib()
    t0 = time.perf_counter()
    graph = synthetic(args.nodes, avg_degree=args.avg_degree, num_features=args.num_features,
                      num_classes=args.num_classes, seed=args.seed)
    elapsed = time.perf_counter() - t0
    row: dict[str, Any] = {
        "seed": args.seed,
        "num_nodes": graph.num_nodes,
        "num_edges": graph.num_edges,
        "num_features": graph.num_features,
        "num_classes": graph.num_classes,
        "time_s": elapsed,
        "peak_rss_gib": _peak_rss_gib(),
        "baseline_rss_gib": baseline,
        "torch_threads": torch.get_num_threads(),
    }
    if args.stats:
        row.update(structure(graph, seed=args.seed))
    return row


def structure(graph: Any, seed: int) -> dict[str, Any]:
    """Homophily, degree tail and the aggregation gain of a generated graph."""
    import torch

    degrees = graph.degrees()
    dst = graph.dst_of_edges()
    homophily = float((graph.y[graph.indices] == graph.y[dst]).float().mean())
    del dst
    median = float(degrees.median())
    gen = torch.Generator().manual_seed(seed + 1)
    train_ids = graph.train_mask.nonzero().view(-1)
    test_ids = graph.test_mask.nonzero().view(-1)
    train_ids = train_ids[torch.randperm(train_ids.numel(), generator=gen)[:STATS_TRAIN]]
    test_ids = test_ids[torch.randperm(test_ids.numel(), generator=gen)[:STATS_TEST]]
    nodes = torch.cat([train_ids, test_ids])
    x = graph.x[nodes]
    agg = neighbour_mean(graph, nodes)
    train = torch.arange(nodes.numel()) < train_ids.numel()
    test = ~train
    acc_x = logistic_regression_accuracy(x, graph.y[nodes], train, test)
    acc_agg = logistic_regression_accuracy(torch.cat([x, agg], 1), graph.y[nodes], train, test)
    return {
        "edge_homophily": homophily,
        "max_degree": int(degrees.max()),
        "median_degree": median,
        "max_over_median": float(degrees.max()) / max(median, 1.0),
        "isolated_nodes": int((degrees == 0).sum()),
        "top1pct_edge_share": float(torch.topk(degrees.float(), max(1, graph.num_nodes // 100)).values.sum()
                                    / max(1, graph.num_edges)),
        "acc_x": acc_x,
        "acc_x_neighbours": acc_agg,
        "aggregation_gain_points": 100 * (acc_agg - acc_x),
    }


def neighbour_mean(graph: Any, nodes: Any) -> Any:
    """Mean of the in-neighbours' features of ``nodes`` (zeros for isolated nodes), via a sparse row slice."""
    import torch

    from graphdist.data.graph import counts_to_indptr, ranges

    starts, counts = graph.indptr[nodes], graph.degrees()[nodes]
    cols = graph.indices[ranges(starts, counts)].to(torch.int64)
    adj = torch.sparse_csr_tensor(counts_to_indptr(counts), cols, torch.ones(cols.numel()),
                                  size=(nodes.numel(), graph.num_nodes))
    return (adj @ graph.x) / counts.clamp_min(1).unsqueeze(1).float()


def logistic_regression_accuracy(x: Any, y: Any, train: Any, test: Any) -> float:
    """Multinomial logistic regression (L-BFGS, light L2) fit on ``train``; accuracy on ``test``."""
    import torch

    x = (x - x[train].mean(0)) / (x[train].std(0) + 1e-6)
    num_classes = int(y.max()) + 1
    weight = torch.zeros(x.shape[1], num_classes, requires_grad=True)
    bias = torch.zeros(num_classes, requires_grad=True)
    opt = torch.optim.LBFGS([weight, bias], max_iter=100, line_search_fn="strong_wolfe")

    def closure() -> Any:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(x[train] @ weight + bias, y[train]) + 1e-4 * weight.square().sum()
        loss.backward()
        return loss

    opt.step(closure)
    with torch.no_grad():
        return float(((x[test] @ weight + bias).argmax(1) == y[test]).float().mean())


def run_child(args: argparse.Namespace, seed: int, stats: bool) -> dict[str, Any]:
    cmd = [
        sys.executable, __file__, "--child", "--nodes", str(args.nodes), "--avg-degree", str(args.avg_degree),
        "--num-features", str(args.num_features), "--num-classes", str(args.num_classes), "--seed", str(seed),
    ] + ([] if stats else ["--no-stats"])
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["(no output)"]
        return {"seed": seed, "error": tail[0]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'seed':>4} {'nodes':>11} {'edges':>12} {'time s':>7} {'peak GiB':>9} {'base GiB':>9}  target"]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['seed']:>4} failed: {r['error']}")
            continue
        verdict = (f"time<{TARGET_S:.0f}s {'ok' if r['time_s'] < TARGET_S else 'MISSED'}, "
                   f"mem<{TARGET_GIB:.0f}GiB {'ok' if r['peak_rss_gib'] < TARGET_GIB else 'MISSED'}")
        lines.append(f"{r['seed']:>4} {r['num_nodes']:>11,} {r['num_edges']:>12,} {r['time_s']:>7.2f} "
                     f"{r['peak_rss_gib']:>9.2f} {r['baseline_rss_gib']:>9.2f}  {verdict}")
    return "\n".join(lines)


def structure_table(r: dict[str, Any]) -> str:
    checks = [
        ("edge homophily", f"{r['edge_homophily']:.3f}", ">= 0.5", r["edge_homophily"] >= 0.5),
        ("max / median degree", f"{r['max_degree']:,} / {r['median_degree']:.0f} = {r['max_over_median']:.0f}x",
         ">= 20x", r["max_over_median"] >= 20),
        ("LR accuracy x -> [x, mean nbr x]", f"{r['acc_x']:.3f} -> {r['acc_x_neighbours']:.3f} "
         f"(+{r['aggregation_gain_points']:.1f} pts)", ">= +10 pts", r["aggregation_gain_points"] >= 10),
        ("top 1% nodes' share of edges", f"{r['top1pct_edge_share']:.3f}", "-", True),
        ("isolated nodes", f"{r['isolated_nodes']:,}", "-", True),
    ]
    width = max(len(c[0]) for c in checks)
    return "\n".join(f"{name:<{width}}  {value:<40} {target:<10} {'ok' if ok else 'MISSED'}"
                     for name, value, target, ok in checks)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1_000_000, help="graph size (default 1,000,000)")
    parser.add_argument("--avg-degree", type=float, default=20.0, help="directed edges per node (default 20)")
    parser.add_argument("--num-features", type=int, default=100, help="feature dim (default 100)")
    parser.add_argument("--num-classes", type=int, default=16, help="classes (default 16, the generator's)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first repeat; repeat i uses seed + i")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes to time (default 3)")
    parser.add_argument("--no-stats", dest="stats", action="store_false", help="skip the structure figures")
    parser.add_argument("--json", type=Path, default=RESULTS, help=f"results file (default {RESULTS})")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args)))
        return 0
    rows = []
    for i in range(args.repeats):
        rows.append(run_child(args, args.seed + i, stats=args.stats and i == 0))
        print(table(rows[-1:]).splitlines()[-1], flush=True)
    ok = [r for r in rows if "error" not in r]
    print()
    print(f"synthetic({args.nodes:,}, avg_degree={args.avg_degree:g}, num_features={args.num_features}, "
          f"num_classes={args.num_classes}); {os.cpu_count()} CPUs, shared: timings are noisy")
    print(table(rows))
    summary: dict[str, Any] = {}
    if ok:
        times = [r["time_s"] for r in ok]
        summary = {"time_s_min": min(times), "time_s_median": statistics.median(times),
                   "peak_rss_gib_max": max(r["peak_rss_gib"] for r in ok)}
        print(f"time min {summary['time_s_min']:.2f} s, median {summary['time_s_median']:.2f} s; "
              f"peak RSS max {summary['peak_rss_gib_max']:.2f} GiB")
        if "edge_homophily" in ok[0]:
            print()
            print(structure_table(ok[0]))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "config": {k: v for k, v in vars(args).items() if k not in ("child", "json")},
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "summary": summary,
        "results": rows,
    }
    args.json.write_text(json.dumps(payload, indent=1, default=str) + "\n")
    print(f"wrote {args.json}")
    return 0 if len(ok) == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
