"""More parts than workers: 8 parts on 2 workers against 2 parts on 2 workers, paired seeds.

A worker holding several parts trains on their union (``partition/merge.py``). This bench trains
bench_train's accuracy recipe (GCN, hidden 64, batch 32) on a METIS partitioning into ``--parts``
parts and into 2 parts, both on 2 local workers, for ``--seeds`` paired seeds (the same seed on
both), and reports:

- test accuracy at the best-validation epoch, per seed, and the mean paired difference (target:
  within 1 point);
- epoch time of both arms;
- on ``--timing-dataset`` (more steps per epoch than Planetoid's 60 train nodes give), one
  many-part run with ``--placement profiled``: the simulator's step (``placement/simulator.py``,
  from the profile that run measured at start) against its measured step (target: within 10%),
  and each worker's predicted critical path.

Accuracy runs use ``--placement equal`` on both arms: profiled shares follow timings, which
differ from run to run, and would unpair the seeds.

Run book:

    .venv/bin/python bench/bench_parts.py                                  # pubmed, 8 vs 2 parts, 5 seeds
    .venv/bin/python bench/bench_parts.py --dataset cora --seeds 2 --epochs 20 --timing-dataset synthetic-3000
    # writes bench/results/parts.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
sys.path.insert(0, str(REPO))


def ensure_parts(dataset: str, parts: int, cache: Path) -> Path:
    from graphdist.data import load_graph
    from partition.api import partition

    out = cache / f"{dataset}-metis-{parts}"
    if not (out / "meta.json").exists():
        partition(load_graph(dataset), parts, method="metis", out=out, seed=0, force=True)
    return out


def train(parts: Path, run_dir: Path, args: list[str], timeout: float) -> list[dict[str, Any]]:
    cmd = [sys.executable, "-m", "graphdist.cli.train", "--partitions", str(parts), "--num-workers", "2", *args,
           "--prefetch", "--log-interval", "100000", "--run-dir", str(run_dir)]
    done = subprocess.run(cmd, cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                          timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def best_test(records: list[dict[str, Any]]) -> float:
    scored = [r for r in records if r.get("val_acc") is not None]
    return 100.0 * max(scored, key=lambda r: (r["val_acc"], -r["epoch"]))["test_acc"]


def simulated(run_dir: Path, records: list[dict[str, Any]]) -> Any:
    """The simulator's prediction for this run, from the profile the run itself measured (one host)."""
    from placement.profiled import costs_from_profile
    from placement.simulator import Layout, simulate

    profile = json.loads((run_dir / "profile.json").read_text())
    workers, shape = costs_from_profile(profile)
    shares = [int(s) for s in records[-1]["batch_share"]]
    cores = os.cpu_count() or 1
    return simulate(workers, shares, Layout.one_host(2, cores=cores), steps=int(records[-1]["steps"]), model=shape,
                    profiled_layout=Layout.one_host(2, cores=cores))


def bench(a: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    from bench.bench_train import ACCURACY_ARGS  # the Planetoid recipe the accuracy targets are for

    many, two = ensure_parts(a.dataset, a.parts, tmp / "cache"), ensure_parts(a.dataset, 2, tmp / "cache")
    recipe = [*ACCURACY_ARGS, "--epochs", str(a.epochs), "--model", a.model, "--placement", "equal"]
    runs: dict[str, list[dict[str, Any]]] = {"many": [], "two": []}
    for seed in range(a.seeds):
        for arm, parts in (("many", many), ("two", two)):  # alternating: drifts hit both arms alike
            records = train(parts, tmp / f"{arm}-{seed}", [*recipe, "--seed", str(seed)], a.timeout)
            later = [r["epoch_time_s"] for r in records if r["epoch"] > 1] or [records[-1]["epoch_time_s"]]
            runs[arm].append({"seed": seed, "test_acc": best_test(records), "epoch_s": statistics.median(later)})
            print(f"  seed {seed} {a.parts if arm == 'many' else 2} parts: test {runs[arm][-1]['test_acc']:.2f}%, "
                  f"{runs[arm][-1]['epoch_s']:.2f} s/epoch", flush=True)
    diffs = [m["test_acc"] - t["test_acc"] for m, t in zip(runs["many"], runs["two"])]
    res = {"dataset": a.dataset, "parts": a.parts, "seeds": a.seeds, "epochs": a.epochs, "model": a.model,
           "runs": runs, "mean_diff_points": statistics.mean(diffs), "diffs": diffs}
    if not a.timing_dataset:
        return res
    # The step prediction on a workload with many steps: one profiled run of the many-part layout.
    timing_parts = ensure_parts(a.timing_dataset, a.parts, tmp / "cache")
    run_dir = tmp / "timing"
    records = train(timing_parts, run_dir, ["--epochs", str(a.timing_epochs), "--eval-every", "0", "--placement",
                                            "profiled"], a.timeout)
    pred = simulated(run_dir, records)
    later = [r["epoch_time_s"] / r["steps"] for r in records if r["epoch"] > 1] or [records[-1]["epoch_time_s"]]
    measured = statistics.median(later)
    res["timing"] = {"dataset": a.timing_dataset, "measured_step_s": measured, "predicted_step_s": pred.step_s,
                     "ratio": pred.step_s / measured, "per_worker_s": pred.per_worker_s, "bottleneck": pred.bottleneck,
                     "shares": records[-1]["batch_share"], "steps": int(records[-1]["steps"])}
    return res


def print_table(res: dict[str, Any]) -> None:
    print(f"\n{res['parts']} parts vs 2 parts on 2 workers, {res['dataset']} ({res['model']}, {res['epochs']} epochs, "
          f"{res['seeds']} paired seeds, --placement equal):")
    print(f"{'seed':>4} {'acc ' + str(res['parts']) + ' parts':>14} {'acc 2 parts':>12} {'s/epoch':>16}")
    for m, t in zip(res["runs"]["many"], res["runs"]["two"]):
        print(f"{m['seed']:>4} {m['test_acc']:>13.2f}% {t['test_acc']:>11.2f}% {m['epoch_s']:>7.2f} | "
              f"{t['epoch_s']:<6.2f}")
    print(f"mean paired difference {res['mean_diff_points']:+.2f} points (target within 1)")
    t = res.get("timing")
    if t is None:
        return
    print(f"{t['dataset']}, {res['parts']} parts on 2 workers (shares {t['shares']}, {t['steps']} steps): "
          f"simulated step {1e3 * t['predicted_step_s']:.1f} ms, measured {1e3 * t['measured_step_s']:.1f} ms ({t['ratio']:.2f}x; "
          f"target within 10%); per worker {', '.join(f'{1e3 * s:.1f}' for s in t['per_worker_s'])} ms, "
          f"bound by {t['bottleneck']}")


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="pubmed")
    p.add_argument("--parts", type=int, default=8)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--epochs", type=int, default=50, help="default: the accuracy recipe's 50")
    p.add_argument("--model", default="gcn", choices=["gcn", "sage", "gat"])
    p.add_argument("--timing-dataset", default="synthetic-100k", help="the step-prediction run's graph ('': none)")
    p.add_argument("--timing-epochs", type=int, default=3)
    p.add_argument("--timeout", type=float, default=900.0)
    p.add_argument("--out", default=str(RESULTS / "parts.json"))
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-parts-") as tmp:
        os.environ.setdefault("GRAPHDIST_CACHE", str(Path(tmp) / "cache"))
        res = bench(a, Path(tmp))
    print_table(res)
    res["started"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    res["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version()}
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
