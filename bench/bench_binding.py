"""Workers bound to their own cores (``--bind-cores``, the default) against left to the scheduler.

Two local workers on a machine with at least two cores: every run is the real ``graphdist-train``
(local launcher, ``--eval-every 0``, default prefetch), once with ``--bind-cores`` and once with
``--no-bind-cores``, alternating within each round (the machine is shared and noisy); medians of
the warm epochs (the first one pays set-up), then medians over rounds.

Workloads: ``minibatch`` (GCN 128, fan-outs 10,10, batch 1024 on 2 METIS parts of
``synthetic-100k``: remote sampling and feature fetches), ``aggregation`` (the same flags on
random parts: local sampling only), and ``sage`` (GraphSAGE 3x256, fan-outs 15,10,5, batch 1024:
``bench_train.py``'s speed model on 2 workers).

Run book:
    python bench/bench_binding.py                         # ~5 min on 2 cores
    python bench/bench_binding.py --workloads minibatch --rounds 5
    python bench/bench_binding.py --dataset cora --steps 3 --epochs 2 --rounds 1     # seconds
Results: bench/results/binding.json (git-ignored).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"

GCN = ["--model", "gcn", "--hidden", "128", "--fanouts", "10,10", "--batch-size", "1024", "--lr", "0.01",
       "--dropout", "0.5"]
WORKLOADS = {
    "minibatch": [*GCN, "--strategy", "minibatch", "--partition-method", "metis"],
    "aggregation": [*GCN, "--strategy", "aggregation", "--partition-method", "random"],
    "sage": ["--model", "sage", "--hidden", "256", "--layers", "3", "--fanouts", "15,10,5", "--batch-size", "1024",
             "--dropout", "0.5", "--strategy", "minibatch", "--partition-method", "metis"],
}
ARMS = {"bound": "--bind-cores", "unbound": "--no-bind-cores"}


def run(args: list[str], run_dir: Path, timeout: float) -> list[dict[str, Any]]:
    """graphdist-train with ``args``; its metrics records (raises with stderr on failure)."""
    cmd = [sys.executable, "-m", "graphdist.cli.train", *args, "--run-dir", str(run_dir), "--log-interval", "100000"]
    done = subprocess.run(cmd, cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True,
                          text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def bench(a: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    rows = []
    for name in a.workloads:
        base = ["--dataset", a.dataset, "--num-workers", "2", *WORKLOADS[name], "--epochs", str(a.epochs),
                "--max-steps", str(a.steps), "--eval-every", "0", "--checkpoint-every", "1000"]
        epochs: dict[str, list[float]] = {arm: [] for arm in ARMS}
        for rnd in range(a.rounds):
            for arm in (list(ARMS) if rnd % 2 == 0 else list(ARMS)[::-1]):
                hist = run([*base, ARMS[arm]], tmp / f"{name}-{arm}-{rnd}", a.timeout)
                epoch_s = statistics.median(r["epoch_time_s"] for r in (hist[1:] or hist))
                epochs[arm].append(epoch_s)
                print(f"  {name} {arm} round {rnd}: {epoch_s:.3f} s/epoch", flush=True)
        med = {arm: statistics.median(v) for arm, v in epochs.items()}
        rows.append({"workload": name, "bound_s": med["bound"], "unbound_s": med["unbound"],
                     "speedup": med["unbound"] / med["bound"], "rounds": epochs})
    return {"dataset": a.dataset, "steps": a.steps, "epochs": a.epochs, "cores": len(os.sched_getaffinity(0)),
            "rows": rows}


def print_table(res: dict[str, Any]) -> None:
    print(f"\n{res['dataset']}, 2 local workers on {res['cores']} cores, {res['steps']} steps an epoch "
          f"(median warm epoch, median of rounds)")
    print(f"{'workload':<13}{'bound s':>9}{'unbound s':>11}{'speed-up':>10}")
    for r in res["rows"]:
        print(f"{r['workload']:<13}{r['bound_s']:>9.3f}{r['unbound_s']:>11.3f}{r['speedup']:>9.2f}x")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dataset", default="synthetic-100k")
    p.add_argument("--workloads", nargs="+", choices=sorted(WORKLOADS), default=list(WORKLOADS))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--steps", type=int, default=20, help="steps an epoch (--max-steps)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    p.add_argument("--out", default=str(RESULTS / "binding.json"))
    a = p.parse_args()
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("bench_binding: needs 2 usable cores (one per worker)")
    with tempfile.TemporaryDirectory() as tmp:
        res = bench(a, Path(tmp))
    print_table(res)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
