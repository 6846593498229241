"""Run-time rebalancing against a slow worker: epoch time and idle time with and without ``--rebalance-every``.

Every run is the real ``graphdist-train`` (local launcher) with the test-only slowdown
``GRAPHDIST_TEST_SLOWDOWN=RANK:FACTOR@EPOCH`` (``graphdist.testing.slowdown``: that rank's own
work, measured as the time its threads ran or waited for a core, takes FACTOR times as long from EPOCH on), ``--eval-every 0`` and
``--no-prefetch`` (one thread per worker: on a machine with as many cores as workers the workers
do not steal each other's cores, so the slow one is slow and the fast one is not). Both arms
start from the plan's equal shares; the rebalancing arm moves seeds from the slow rank to the
fast one every R steps. Runs alternate between the arms (the machine is shared and noisy) and
medians are reported.

Columns: median epoch time over the epochs after the slowdown's first (the first one holds the
rebalancer's convergence, reported apart), the speed-up of rebalancing, the final shares, the
fast worker's idle share of its epoch (wall time minus its busy time), the slowdown the
fixed-shares arm actually shows (the slow rank's busy time over the fastest's at equal shares:
what the emulation delivered, 2.0 when it is exact) and the model's bound
(``sum_i speed_i / (N * min_i speed_i)``: 1.5x for 2 workers, one 2x slower), and that bound at
the slowdown delivered (``delivered``: 1.55x for 2 workers when the slow one read 2.1x).

Run book:
    python bench/bench_placement.py --dataset synthetic-100k --pairs 3        # ~6 min on 2 cores
    python bench/bench_placement.py --dataset pubmed --batch-size 16 --every 2
    python bench/bench_placement.py --replicate none structure graph --pairs 1
    python bench/bench_placement.py --compare placement --from-epoch 1 --batch-size 1024   # profiled start shares
Results: bench/results/placement.json and placement.png (git-ignored).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"


def run(args: list[str], run_dir: Path, slowdown: str, timeout: float) -> list[dict[str, Any]]:
    """graphdist-train with ``args`` under the slowdown; its metrics records (raises with stderr on failure)."""
    cmd = [sys.executable, "-m", "graphdist.cli.train", *args, "--run-dir", str(run_dir), "--log-interval", "100000"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GRAPHDIST_TEST_SLOWDOWN": slowdown}
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def summarize(hist: list[dict[str, Any]], from_epoch: int) -> dict[str, Any]:
    """Median epoch time after the slowdown's first epoch; that first epoch; fast rank's idle share."""
    after = [r for r in hist if r["epoch"] > from_epoch] or hist[-1:]
    first = [r for r in hist if r["epoch"] == from_epoch]
    idle = [r["idle_s"][0] / r["epoch_time_s"] for r in after if r.get("idle_s")]
    # Slowest rank's busy time over the fastest's: the delivered slowdown where the shares are equal.
    ratio = [max(r["busy_s"]) / min(r["busy_s"]) for r in after if r.get("busy_s") and min(r["busy_s"]) > 0]
    return {"epoch_s": statistics.median(r["epoch_time_s"] for r in after),
            "first_slow_epoch_s": first[0]["epoch_time_s"] if first else None,
            "before_s": statistics.median([r["epoch_time_s"] for r in hist if r["epoch"] < from_epoch] or [0.0]),
            "fast_idle_share": statistics.median(idle) if idle else None,
            "busy_ratio": statistics.median(ratio) if ratio else None,
            "shares": hist[-1].get("batch_share_end"), "seeds": [r["seeds"] for r in hist],
            "epoch_times": [r["epoch_time_s"] for r in hist]}


def bound(factor: float, workers: int) -> float:
    """Balanced over unbalanced epoch time when one of ``workers`` is ``factor`` times slower.

    Example:
        >>> bound(2.0, 2), round(bound(2.0, 4), 2)
        (1.5, 1.75)
    """
    speeds = [1.0] * (workers - 1) + [1.0 / factor]
    return sum(speeds) / (workers * min(speeds))


def bench(a: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    rank, factor, from_epoch = a.slow_rank, a.factor, a.from_epoch
    slowdown = f"{rank}:{factor}@{from_epoch}"
    rows = []
    for replicate in a.replicate:
        for workers in a.workers:
            base = ["--dataset", a.dataset, "--num-workers", str(workers), "--epochs", str(a.epochs),
                    "--batch-size", str(a.batch_size), "--eval-every", "0", "--no-prefetch", "--replicate", replicate,
                    "--checkpoint-every", "1000", *a.extra]
            # Arm -> its flags: fixed shares vs rebalancing, or (--compare placement) equal vs profiled start shares.
            flags = ({"equal": ["--placement", "equal"], "profiled": ["--placement", "profiled"]}
                     if a.compare == "placement" else
                     {"R=0": ["--rebalance-every", "0"], f"R={a.every}": ["--rebalance-every", str(a.every)]})
            names = list(flags)
            arms: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
            for pair in range(a.pairs):
                for name in names if pair % 2 == 0 else names[::-1]:
                    hist = run([*base, *flags[name]], tmp / f"{replicate}-{workers}-{name}-{pair}", slowdown, a.limit)
                    arms[name].append(summarize(hist, from_epoch))
                    s = arms[name][-1]
                    print(f"  {replicate} {workers}w {name} pair {pair}: {s['epoch_s']:.2f} s/epoch after the "
                          f"slowdown (before {s['before_s']:.2f}), shares {s['shares']}", flush=True)
            for name, runs in arms.items():
                every = int(flags[name][1]) if flags[name][0] == "--rebalance-every" else 0
                rows.append({"replicate": replicate, "workers": workers, "arm": name, "rebalance_every": every,
                             "epoch_s": statistics.median(r["epoch_s"] for r in runs),
                             "first_slow_epoch_s": statistics.median(r["first_slow_epoch_s"] or 0.0 for r in runs),
                             "before_s": statistics.median(r["before_s"] for r in runs),
                             "fast_idle_share": _median([r["fast_idle_share"] for r in runs]),
                             "busy_ratio": _median([r["busy_ratio"] for r in runs]),
                             "shares": runs[-1]["shares"], "runs": runs, "bound": bound(factor, workers)})
    return {"dataset": a.dataset, "slowdown": slowdown, "batch_size": a.batch_size, "every": a.every,
            "compare": a.compare,
            "pairs": a.pairs, "rows": rows}


def _median(xs: list[Optional[float]]) -> Optional[float]:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def print_table(res: dict[str, Any]) -> None:
    print(f"\n{res['dataset']}, slowdown {res['slowdown']}, batch {res['batch_size']}, medians of {res['pairs']} "
          f"run(s) per arm")
    print(f"{'replicate':<10}{'workers':>8}{'arm':>9}{'before s':>10}{'1st slow s':>11}{'epoch s':>9}{'speed-up':>9}"
          f"{'bound':>7}{'delivered':>10}{'fast idle':>10}{'slow/fast busy':>15}  shares")
    first = {}
    for r in res["rows"]:
        first.setdefault((r["replicate"], r["workers"]), r)  # the baseline arm comes first
    for r in res["rows"]:
        base = first[(r["replicate"], r["workers"])]
        speed = base["epoch_s"] / r["epoch_s"] if base is not r else None
        idle = f"{100 * r['fast_idle_share']:.0f}%" if r["fast_idle_share"] is not None else "-"
        ratio = f"{r['busy_ratio']:.2f}x" if r.get("busy_ratio") is not None else "-"
        # The bound at the slowdown the fixed-shares arm showed (its slow/fast busy), not the one asked for.
        delivered = bound(base["busy_ratio"], r["workers"]) if speed and base.get("busy_ratio") else None
        r["delivered_bound"] = delivered
        print(f"{r['replicate']:<10}{r['workers']:>8}{r['arm']:>9}{r['before_s']:>10.2f}"
              f"{r['first_slow_epoch_s']:>11.2f}{r['epoch_s']:>9.2f}{(f'{speed:.2f}x' if speed else '-'):>9}"
              f"{r['bound']:>6.2f}x{(f'{delivered:.2f}x' if delivered else '-'):>10}{idle:>10}{ratio:>15}  {r['shares']}")


def plot(res: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for r in res["rows"]:
        times = r["runs"][0]["epoch_times"]
        ax.plot(range(1, len(times) + 1), times, marker="o",
                label=f"replicate {r['replicate']}, {r['workers']} workers, {r['arm']}")
    ax.set(xlabel="epoch", ylabel="epoch time, s", title=f"{res['dataset']}: slowdown {res['slowdown']}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="synthetic-100k")
    p.add_argument("--workers", nargs="+", type=int, default=[2])
    p.add_argument("--replicate", nargs="+", default=["graph"], choices=["none", "structure", "graph"])
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--every", type=int, default=10, help="--rebalance-every of the rebalancing arm")
    p.add_argument("--compare", choices=["rebalance", "placement"], default="rebalance",
                   help="arms: fixed shares vs --rebalance-every (default), or --placement equal vs profiled "
                        "(use with --from-epoch 1: a slowdown from the start)")
    p.add_argument("--slow-rank", type=int, default=1)
    p.add_argument("--factor", type=float, default=2.0)
    p.add_argument("--from-epoch", type=int, default=2)
    p.add_argument("--pairs", type=int, default=3, help="alternating runs per arm")
    p.add_argument("--limit", type=float, default=1800.0, help="seconds before a run is killed")
    p.add_argument("--extra", nargs=argparse.REMAINDER, default=[], help="more graphdist-train flags (last)")
    p.add_argument("--out", default=str(RESULTS / "placement.json"))
    p.add_argument("--png", default=str(RESULTS / "placement.png"))
    a = p.parse_args(argv)
    result: dict[str, Any] = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "nproc": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="graphdist-bench-placement-") as name:
        result.update(bench(a, Path(name)))
    print_table(result)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    plot(result, Path(a.png))
    print(f"\nwrote {out} and {a.png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
