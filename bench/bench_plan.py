"""graphdist-plan's predictions against measured epochs: a profile of 2 workers here, clusters it never saw.

For each case, ``graphdist-plan`` runs as a user runs it (no ``--profile``: it measures its own, with
``--profile-workers`` workers on this machine) and its predicted minibatch epoch is set beside the
median epoch (epochs 2..) of ``graphdist-train`` with the same recipe on that layout:

- ``local``: 2 workers on this machine, 2 METIS parts (the profile's own layout);
- ``emulated RATE``: 2 emulated hosts x 2 workers joined at RATE (``graphdist.testing.netns``,
  torchrun), 4 METIS parts, predicted from the 2-worker profile with a spec whose
  ``machine_cores`` is this machine's cores (the emulated hosts share them).

Each round runs every case once, plan then training; the table shows medians over ``--rounds``,
graphdist-plan's wall time, and the predicted / measured ratio. Emulated hosts need root and
iproute2; without them only the local case runs.

Run book:
    sudo .venv/bin/python bench/bench_plan.py                       # synthetic-100k, 1gbit, ~4 min
    sudo .venv/bin/python bench/bench_plan.py --rates 1gbit,100mbit --rounds 2
Writes bench/results/plan.json (git-ignored).
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
sys.path.insert(0, str(REPO))

TRAIN = ["-m", "graphdist.cli.train"]
PLAN = ["-m", "graphdist.cli.plan"]


def partitions(dataset: str, parts: int) -> Path:
    from partition.api import PartitionConfig, default_output, partition

    out = default_output(dataset, PartitionConfig(parts, "metis", 0))
    if not (out / "meta.json").exists():
        partition(dataset, parts, method="metis", out=out, seed=0, force=True)
    return out


def spec_file(tmp: Path, hosts: int, per_host: int, rate: Optional[str]) -> Optional[Path]:
    if rate is None:
        return None
    path = tmp / f"spec-{rate}.yaml"
    path.write_text(f"machine_cores: {os.cpu_count() or 1}\nhosts:\n" + "".join(
        f"  - {{name: h{h}, link: {rate}, workers: [{', '.join(['{device: cpu}'] * per_host)}]}}\n"
        for h in range(hosts)))
    return path


def plan(parts: Path, recipe: list[str], spec: Optional[Path], workers: int, out: Path, profile_workers: int,
         timeout: float) -> tuple[dict[str, Any], float]:
    """graphdist-plan as a user runs it; its JSON and its wall time."""
    where = ["--cluster", str(spec)] if spec else ["--num-workers", str(workers)]
    started = time.perf_counter()
    done = subprocess.run([sys.executable, *PLAN, "--partitions", str(parts), *where, *recipe,
                           "--profile-workers", str(profile_workers), "--save-profile", str(out.with_suffix(".prof")),
                           "--json", str(out)], cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"},
                          capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"graphdist-plan failed:\n{done.stderr[-3000:]}")
    return json.loads(out.read_text()), wall


def train_local(parts: Path, recipe: list[str], epochs: int, run_dir: Path, timeout: float) -> float:
    done = subprocess.run([sys.executable, *TRAIN, "--partitions", str(parts), *recipe, *_run_flags(epochs, run_dir),
                           "--num-workers", "2"], cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"},
                          capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"local run failed:\n{done.stderr[-3000:]}")
    return measured_epoch_s(run_dir)


def train_emulated(parts: Path, recipe: list[str], epochs: int, run_dir: Path, rate: str, timeout: float) -> float:
    from graphdist.testing.netns import EmulatedCluster
    from graphdist.testing.netns.torchrun import TorchrunJob

    with EmulatedCluster(hosts=2, rate=rate) as c:
        job = TorchrunJob(c, 2, [*TRAIN, "--partitions", str(parts), *recipe, *_run_flags(epochs, run_dir)],
                          cwd=str(REPO), env={"OMP_NUM_THREADS": "1"})
        codes = job.wait(timeout)
        if any(codes):
            raise RuntimeError(f"emulated run at {rate} exited {codes}:\n{job.output()[-3000:]}")
    return measured_epoch_s(run_dir)


def _run_flags(epochs: int, run_dir: Path) -> list[str]:
    return ["--epochs", str(epochs), "--eval-every", "0", "--log-interval", "100000", "--timeout", "120",
            "--run-dir", str(run_dir), "--overwrite"]


def measured_epoch_s(run_dir: Path) -> float:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    later = [r["epoch_time_s"] for r in records if r["epoch"] > 1] or [records[-1]["epoch_time_s"]]
    return statistics.median(later)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="synthetic-100k")
    p.add_argument("--rates", default="1gbit", help="emulated link rates of the 2x2 case ('': the local case only)")
    p.add_argument("--epochs", type=int, default=3, help="epochs of each training run (the first is not timed)")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--profile-workers", type=int, default=2)
    p.add_argument("--recipe", default="", help="graphdist-train flags both commands get, e.g. '--hidden 256'")
    p.add_argument("--timeout", type=float, default=1200.0)
    p.add_argument("--out", default=str(REPO / "bench" / "results" / "plan.json"))
    a = p.parse_args(argv)
    from graphdist.testing.netns import unavailable_reason

    recipe = a.recipe.split()
    rates = [r for r in a.rates.split(",") if r]
    why = unavailable_reason() if rates else None
    if why:
        print(f"emulated hosts unavailable ({why}): the local case only", file=sys.stderr)
        rates = []
    cases: list[tuple[str, Optional[str]]] = [("local", None)] + [(f"emulated {r}", r) for r in rates]
    rows: dict[str, dict[str, list[float]]] = {name: {"predicted": [], "measured": [], "plan_s": []}
                                               for name, _ in cases}
    with tempfile.TemporaryDirectory(prefix="bench-plan-") as tmp_name:
        tmp = Path(tmp_name)
        two, four = partitions(a.dataset, 2), partitions(a.dataset, 4)
        for r in range(a.rounds):
            for name, rate in cases:
                parts = two if rate is None else four
                res, wall = plan(parts, recipe, spec_file(tmp, 2, 2, rate), 2, tmp / f"plan-{r}-{len(rows[name]['plan_s'])}.json",
                                 a.profile_workers, a.timeout)
                run_dir = tmp / f"run-{name.replace(' ', '-')}-{r}"
                measured = (train_local(parts, recipe, a.epochs, run_dir, a.timeout) if rate is None
                            else train_emulated(parts, recipe, a.epochs, run_dir, rate, a.timeout))
                rows[name]["predicted"].append(res["simulated"]["minibatch"]["epoch_s"])
                rows[name]["measured"].append(measured)
                rows[name]["plan_s"].append(wall)
                rows[name]["sync"] = res["sync"]["mode"]  # type: ignore[assignment]
                rows[name]["workers"] = len(res["shares"])  # type: ignore[assignment]
                print(f"round {r + 1}, {name}: predicted {res['simulated']['minibatch']['epoch_s']:.2f} s, measured "
                      f"{measured:.2f} s, graphdist-plan {wall:.1f} s", flush=True)
    print(f"\n{a.dataset}, recipe: graphdist-train's defaults {a.recipe}; profile: {a.profile_workers} workers here")
    print(f"{'case':<18}{'workers':>8}{'sync':>6}{'predicted s':>13}{'measured s':>12}{'ratio':>7}{'plan wall s':>13}")
    table = {}
    for name, row in rows.items():
        pred, meas = statistics.median(row["predicted"]), statistics.median(row["measured"])
        table[name] = {"workers": row["workers"], "sync": row["sync"], "predicted_s": pred, "measured_s": meas,
                       "ratio": pred / meas, "plan_wall_s": statistics.median(row["plan_s"]), "rounds": row}
        print(f"{name:<18}{row['workers']:>8}{row['sync']:>6}{pred:>13.2f}{meas:>12.2f}{pred / meas:>7.2f}"
              f"{statistics.median(row['plan_s']):>13.1f}")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps({"dataset": a.dataset, "recipe": a.recipe, "cores": os.cpu_count(),
                                       "cases": table}, indent=1))
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
