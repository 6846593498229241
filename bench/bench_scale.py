"""Scale on one machine: generate, partition and train a graph larger than memory would allow in memory.

Per size in ``--sizes`` (nodes; ~20 directed edges per node, 100 float32 features), each phase
runs in its own process, so its peak resident set (``VmHWM``) is its own:

- ``generate``: ``synthetic(N, out=DIR)`` (``graphdist/data/synthetic_disk.py``: chunked,
  memory-mapped ``.npy`` files), its wall time and peak RSS, the bytes it wrote;
- ``partition/<method>`` for each of ``--methods`` (``random``, ``stream``): ``graphdist-partition
  --dataset DIR --num-parts 4`` (the one-hop scan writer, ``partition/scan.py``);
- ``train/<method>``: ``graphdist-train`` on those parts, GraphSAGE 2 layers [10, 5], global batch
  1024, ``--workers`` local workers, one epoch of ``--steps`` steps, no evaluation; the process
  tree's PSS (shared mapped pages counted once) and RSS are sampled every 0.5 s and their peak
  reported with the seeds/s the run measured.

Then, over the sizes, each phase's time and memory against N on log-log axes (``--png``) with
the fitted exponent of each, and a projection to ogbn-papers100M (111M nodes, 1.6B edges, 128
features) from the largest size's measured bytes per node and per edge (docs/performance.md#graphs-larger-than-memory).

Run book:

    .venv/bin/python bench/bench_scale.py --sizes 1000000 3000000 10000000           # ~40 min here
    .venv/bin/python bench/bench_scale.py --sizes 3000000 --methods stream --no-train  # the 3M target
    # writes bench/results/scale.json and bench/results/scale.png; GRAPHDIST_CACHE holds the graphs
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
sys.path.insert(0, str(REPO))
GIB = 2**30
PAPERS100M = {"nodes": 111_059_956, "edges": 1_615_685_872, "features": 128}


def tree_memory(pid: int) -> tuple[int, int]:
    """``(PSS, RSS)`` in bytes of a process and all its descendants (0 for those that are gone)."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0, 0
    pss = rss = 0
    for proc in procs:
        try:
            info = proc.memory_full_info()
        except psutil.Error:
            continue
        pss += getattr(info, "pss", 0)
        rss += info.rss
    return pss, rss


def run_phase(cmd: list[str], timeout: float, sample_s: float = 0.5) -> dict[str, Any]:
    """Runs ``cmd``; its wall time, the tree's peak PSS and RSS (sampled), and its output's last lines.

    Raises:
        RuntimeError: a non-zero exit, with the output's tail.
    """
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    peak = {"pss": 0, "rss": 0, "samples": 0}

    def sample() -> None:
        while proc.poll() is None:
            pss, rss = tree_memory(proc.pid)
            peak["pss"], peak["rss"] = max(peak["pss"], pss), max(peak["rss"], rss)
            peak["samples"] += 1
            time.sleep(sample_s)

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        output, _ = proc.communicate()
        raise RuntimeError(f"{' '.join(cmd[:4])}: timed out after {timeout:.0f} s; tail:\n{output[-2000:]}")
    watcher.join()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])}: exit {proc.returncode}; tail:\n{output[-2000:]}")
    return {"wall_s": time.perf_counter() - started, "peak_pss_bytes": peak["pss"], "peak_tree_rss_bytes": peak["rss"],
            "samples": peak["samples"], "output": output}


def directory_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def child_report(output: str) -> dict[str, Any]:
    """The JSON line a phase process printed last (``{"peak_rss_bytes": ...}``)."""
    for line in reversed(output.splitlines()):
        if line.startswith("{") and "peak_rss_bytes" in line:
            return json.loads(line)
    return {}


def generate(n: int, out: Path, timeout: float) -> dict[str, Any]:
    code = ("import json; from graphdist.data.synthetic import synthetic; "
            "from graphdist.data.memory import peak_rss_bytes; "
            f"g = synthetic({n}, out={str(out)!r}); "
            "print(json.dumps({'peak_rss_bytes': peak_rss_bytes(), 'edges': g.num_edges}))")
    res = run_phase([sys.executable, "-c", code], timeout)
    report = child_report(res.pop("output"))
    return {**res, "peak_rss_bytes": report.get("peak_rss_bytes"), "edges": report.get("edges"),
            "disk_bytes": directory_bytes(out)}


PEAK_LINE = "peak RSS"


def partition_phase(graph: Path, method: str, out: Path, timeout: float) -> dict[str, Any]:
    code = ("import json, sys; from graphdist.cli.partition import main; "
            "from graphdist.data.memory import peak_rss_bytes; "
            f"code = main(['--dataset', {str(graph)!r}, '--num-parts', '4', '--method', {method!r}, '--out', "
            f"{str(out)!r}, '--force']); "
            "print(json.dumps({'peak_rss_bytes': peak_rss_bytes()})); sys.exit(code)")
    res = run_phase([sys.executable, "-c", code], timeout)
    report = child_report(res.pop("output"))
    return {**res, "peak_rss_bytes": report.get("peak_rss_bytes"), "disk_bytes": directory_bytes(out)}


def train_phase(parts: Path, run_dir: Path, workers: int, steps: int, timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "graphdist.cli.train", "--partitions", str(parts), "--num-workers", str(workers),
           "--epochs", "1", "--max-steps", str(steps), "--eval-every", "0", "--layers", "2", "--fanouts", "10,5",
           "--batch-size", "1024", "--log-interval", "50", "--run-dir", str(run_dir)]
    res = run_phase(cmd, timeout)
    res.pop("output")
    record = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])
    return {**res, "seeds_per_s": record["seeds_per_s"], "epoch_time_s": record["epoch_time_s"],
            "steps": record["steps"]}


def exponent(sizes: list[int], values: list[float]) -> Optional[float]:
    """Least-squares slope of log(value) against log(size): how a phase's cost grows (1.0: linearly).

    Example:
        >>> round(exponent([1, 10, 100], [2.0, 20.0, 200.0]), 3)
        1.0
    """
    points = [(math.log(s), math.log(v)) for s, v in zip(sizes, values) if v and v > 0]
    if len(points) < 2:
        return None
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    den = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / den if den else None


def growth(rows: list[dict[str, Any]]) -> dict[str, dict[str, Optional[float]]]:
    """Per phase, the exponents of wall time and of peak memory against N."""
    out: dict[str, dict[str, Optional[float]]] = {}
    phases = sorted({p for r in rows for p in r["phases"]})
    for phase in phases:
        have = [r for r in rows if phase in r["phases"]]
        sizes = [r["nodes"] for r in have]
        memory_key = "peak_pss_bytes" if phase.startswith("train") else "peak_rss_bytes"
        out[phase] = {"time": exponent(sizes, [r["phases"][phase]["wall_s"] for r in have]),
                      "memory": exponent(sizes, [r["phases"][phase].get(memory_key) or 0 for r in have])}
    return out


def project_papers100m(row: dict[str, Any]) -> dict[str, Any]:
    """Disk and memory each phase would need for ogbn-papers100M, scaled from one measured size.

    Disk splits into features (4 bytes x F per node, exact), structure per edge and the rest per
    node; memory is taken as growing with nodes (the synthetic graphs hold E/N fixed, so per-node
    and per-edge costs cannot be told apart from them: this assumes papers100M's 14.5 edges per
    node cost no more than the 20 measured). The measured peaks include ~0.4 GiB of interpreter
    and torch, which does not grow.
    """
    n, e = row["nodes"], row["phases"]["generate"].get("edges") or 20 * row["nodes"]
    big = PAPERS100M
    base = 0.4 * GIB
    out: dict[str, Any] = {}
    for phase, res in row["phases"].items():
        memory = res.get("peak_pss_bytes") if phase.startswith("train") else res.get("peak_rss_bytes")
        entry: dict[str, Any] = {}
        if memory:
            entry["memory_gib"] = (base + (memory - base) * big["nodes"] / n) / GIB
        if res.get("disk_bytes"):
            features = 4 * 100 * n
            rest = max(0, res["disk_bytes"] - features)
            entry["disk_gib"] = (4 * big["features"] * big["nodes"] + rest * big["edges"] / e) / GIB
        out[phase] = entry
    return out


def bench(a: argparse.Namespace, cache: Path) -> dict[str, Any]:
    rows = []
    for n in a.sizes:
        row: dict[str, Any] = {"nodes": n, "phases": {}}
        graph = cache / "graphs" / f"scale-{n}"
        print(f"[{n:,} nodes] generate", flush=True)
        row["phases"]["generate"] = generate(n, graph, a.timeout)
        for method in a.methods:
            parts = cache / "parts" / f"scale-{n}-{method}-4"
            print(f"[{n:,} nodes] partition {method}", flush=True)
            row["phases"][f"partition/{method}"] = partition_phase(graph, method, parts, a.timeout)
            if a.train and n >= a.train_from:
                print(f"[{n:,} nodes] train {method}", flush=True)
                row["phases"][f"train/{method}"] = train_phase(parts, cache / "runs" / f"{n}-{method}", a.workers,
                                                               a.steps, a.timeout)
            if not a.keep:
                shutil.rmtree(parts, ignore_errors=True)
        if not a.keep:
            shutil.rmtree(graph, ignore_errors=True)
        rows.append(row)
        _write(a, {"rows": rows})  # a size that runs out of time loses only itself
    res: dict[str, Any] = {"rows": rows, "growth": growth(rows), "papers100m": project_papers100m(rows[-1])}
    train_rates = {r["nodes"]: r["phases"][k]["seeds_per_s"] for r in rows for k in r["phases"]
                   if k.startswith("train/")}
    if len(train_rates) > 1:
        smallest = min(train_rates)
        res["seeds_per_s_vs_smallest"] = {str(n): v / train_rates[smallest] for n, v in train_rates.items()}
    return res


def print_table(res: dict[str, Any]) -> None:
    print(f"{'nodes':>11} {'phase':<18} {'wall s':>8} {'peak RSS GiB':>13} {'peak PSS GiB':>13} "
          f"{'disk GiB':>9} {'seeds/s':>9}")
    for row in res["rows"]:
        for phase, r in row["phases"].items():
            rss = r.get("peak_rss_bytes")
            pss = r.get("peak_pss_bytes")
            print(f"{row['nodes']:>11,} {phase:<18} {r['wall_s']:>8.1f} "
                  f"{(rss or 0) / GIB:>13.2f} {(pss or 0) / GIB:>13.2f} {(r.get('disk_bytes') or 0) / GIB:>9.2f} "
                  f"{r.get('seeds_per_s', float('nan')):>9,.0f}")
    for phase, g in res.get("growth", {}).items():
        t, m = g["time"], g["memory"]
        print(f"growth {phase:<18} time ~ N^{t:.2f}" if t is not None else f"growth {phase:<18} (one size)",
              f"memory ~ N^{m:.2f}" if m is not None else "")
    for phase, p in res.get("papers100m", {}).items():
        print(f"ogbn-papers100M {phase:<18} " + ", ".join(f"{k} {v:,.1f}" for k, v in p.items()))


def plot(res: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = res["rows"]
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4))
    for phase, g in res["growth"].items():
        have = [r for r in rows if phase in r["phases"]]
        sizes = [r["nodes"] for r in have]
        key = "peak_pss_bytes" if phase.startswith("train") else "peak_rss_bytes"
        t_label = f"{phase} (N^{g['time']:.2f})" if g["time"] is not None else phase
        m_label = f"{phase} (N^{g['memory']:.2f})" if g["memory"] is not None else phase
        ax_t.loglog(sizes, [r["phases"][phase]["wall_s"] for r in have], marker="o", label=t_label)
        ax_m.loglog(sizes, [(r["phases"][phase].get(key) or float("nan")) / GIB for r in have], marker="o",
                    label=m_label)
    ax_t.set(xlabel="nodes", ylabel="wall seconds", title="time per phase")
    ax_m.set(xlabel="nodes", ylabel="GiB (peak RSS; training: tree PSS)", title="memory per phase")
    for ax in (ax_t, ax_m):
        ax.legend(fontsize="x-small")
    fig.suptitle("graphdist out of core: generate, partition (4 parts), train (GraphSAGE [10,5])")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _write(a: argparse.Namespace, res: dict[str, Any]) -> None:
    res = {**res, "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
           "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
           "args": {k: v for k, v in vars(a).items()}}
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1))


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 3_000_000, 10_000_000])
    p.add_argument("--methods", nargs="+", default=["random", "stream"], choices=["random", "stream", "metis"])
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--steps", type=int, default=100, help="training steps (--max-steps; default 100)")
    p.add_argument("--no-train", dest="train", action="store_false", help="generate and partition only")
    p.add_argument("--train-from", type=int, default=0, metavar="NODES", help="train only sizes from NODES on")
    p.add_argument("--keep", action="store_true", help="keep the graphs and partitions (default: removed)")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per phase")
    p.add_argument("--out", default=str(RESULTS / "scale.json"))
    p.add_argument("--png", default=str(RESULTS / "scale.png"))
    a = p.parse_args(argv)
    cache = Path(os.environ.get("GRAPHDIST_CACHE") or Path.home() / ".cache" / "graphdist") / "bench-scale"
    res = bench(a, cache)
    print_table(res)
    _write(a, res)
    plot(res, Path(a.png))
    print(f"wrote {a.out} and {a.png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
