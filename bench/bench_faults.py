"""Fault injection, measured: SIGKILL a worker at named points, then check what a user relies on.

For each strategy, one uninterrupted reference run gives the final parameters and, with
``GRAPHDIST_TEST_FAULT=count:DIR``, how often each rank passes each injection point
(``graphdist.testing.faults``). Then ``--runs`` faulted runs cycle through the strategy's points;
each picks a rank and a pass uniformly among those the reference made, and SIGKILLs that rank
there (``GRAPHDIST_TEST_FAULT=POINT:RANK:PASS``). Every faulted run is checked for:

* exit: non-zero, within ``--timeout`` + 10 s of the kill, and the error line names the killed rank;
* no process left behind in its process group (5 s after exit);
* the checkpoint (if any) loads with ``weights_only=True``: previous or new, never torn;
* recovery: ``--resume`` (or a fresh run, when the kill came before the first checkpoint and the
  run directory was removed) ends with parameters ``torch.equal`` to the reference's.

The table counts runs, kills, hangs, processes left, torn checkpoints and resumes that differed.

Run book:
    python bench/bench_faults.py                       # 3 strategies x 20 runs, ~20 min on 2 cores
    python bench/bench_faults.py --strategies minibatch --runs 6 --out /tmp/faults.json
Results: bench/results/faults.json (git-ignored).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"

POINTS = {
    "minibatch": ["startup", "exchange:sample", "exchange:feature", "allreduce", "checkpoint", "evaluate"],
    "fullgraph": ["startup", "exchange:halo", "allreduce", "checkpoint", "evaluate"],
    "aggregation": ["startup", "allreduce", "checkpoint", "evaluate"],
}


def train_args(a: argparse.Namespace, strategy: str, run_dir: Path) -> list[str]:
    fanouts = [] if strategy == "fullgraph" else ["--fanouts", "5,5"]  # full-graph training samples nothing
    return [sys.executable, "-m", "graphdist.cli.train", "--dataset", f"synthetic-{a.nodes}", "--num-workers", "2",
            "--strategy", strategy, "--epochs", str(a.epochs), "--hidden", "16", *fanouts,
            "--batch-size", "128", "--timeout", str(a.timeout), "--log-interval", "100000", "--run-dir", str(run_dir)]


def launch(cmd: list[str], env: dict[str, str], limit_s: float) -> dict[str, Any]:
    """Runs ``cmd`` in its own process group; exit code, stderr, when the kill line appeared, leftovers."""
    import threading

    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    seen: dict[str, Any] = {"killed_at": None, "out": [], "err": []}

    def read(stream: Any, key: str) -> None:  # threads: a leftover worker may hold the pipes open
        for line in stream:
            seen[key].append(line)
            if key == "out" and "fault injected" in line and seen["killed_at"] is None:
                seen["killed_at"] = time.monotonic()

    readers = [threading.Thread(target=read, args=(proc.stdout, "out"), daemon=True),
               threading.Thread(target=read, args=(proc.stderr, "err"), daemon=True)]
    for t in readers:
        t.start()
    try:
        proc.wait(timeout=limit_s)
        hung = False
    except subprocess.TimeoutExpired:
        hung = True
        os.killpg(proc.pid, 9)
        proc.wait()
    ended = time.monotonic()
    left: list[str] = []
    while time.monotonic() - ended < 5:  # workers get 5 s to follow their launcher out
        left = subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True, text=True).stdout.split()
        if not left:
            break
        time.sleep(0.2)
    if left:
        subprocess.run(["pkill", "-9", "-g", str(proc.pid)], check=False)
    for t in readers:
        t.join(timeout=5)
    killed_at = seen["killed_at"]
    return {"rc": proc.returncode, "stderr": "".join(seen["err"]), "stdout": "".join(seen["out"]), "hung": hung,
            "left": len(left), "exit_after_kill_s": None if killed_at is None else ended - killed_at,
            "wall_s": ended - start}


def final_params(run_dir: Path) -> dict[str, Any]:
    import torch

    return torch.load(run_dir / "checkpoint.pt", weights_only=True)["model"]


def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    import torch

    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def reference(a: argparse.Namespace, strategy: str, tmp: Path) -> tuple[dict[str, Any], dict[int, dict[str, int]]]:
    """The uninterrupted run's parameters and each rank's passes per point."""
    counts = tmp / f"counts-{strategy}"
    counts.mkdir()
    run_dir = tmp / f"ref-{strategy}"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GRAPHDIST_TEST_FAULT": f"count:{counts}"}
    res = launch(train_args(a, strategy, run_dir), env, limit_s=600)
    if res["rc"] != 0:
        raise RuntimeError(f"reference run of {strategy} failed:\n{res['stderr'][-3000:]}")
    passes: dict[int, dict[str, int]] = {}
    for f in counts.glob("counts-*.json"):
        doc = json.loads(f.read_text())
        for point, n in doc["passes"].items():
            passes.setdefault(doc["rank"], {})[point] = max(n, passes.get(doc["rank"], {}).get(point, 0))
    return final_params(run_dir), passes


def faulted_run(a: argparse.Namespace, strategy: str, point: str, rank: int, hit: int, ref: dict[str, Any],
                tmp: Path, i: int) -> dict[str, Any]:
    import torch

    run_dir = tmp / f"{strategy}-{i}"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GRAPHDIST_TEST_FAULT": f"{point}:{rank}:{hit}"}
    res = launch(train_args(a, strategy, run_dir), env, limit_s=a.timeout + 120)
    first_error = next((l for l in res["stderr"].splitlines() if "error:" in l), "")
    named = re.search(rf"worker rank {rank}\b", first_error) is not None
    row = {"strategy": strategy, "point": point, "rank": rank, "pass": hit, "rc": res["rc"], "hung": res["hung"],
           "left": res["left"], "exit_after_kill_s": res["exit_after_kill_s"], "named_rank": named,
           "error": first_error[:300], "killed": "fault injected" in res["stdout"]}
    row["in_time"] = res["exit_after_kill_s"] is not None and res["exit_after_kill_s"] <= a.timeout + 10
    ckpt = run_dir / "checkpoint.pt"
    row["checkpoint"] = "none"
    if ckpt.exists():
        try:
            torch.load(ckpt, weights_only=True)
            row["checkpoint"] = "ok"
        except Exception as exc:  # noqa: BLE001 - a torn checkpoint is what this counts
            row["checkpoint"], row["torn"] = "torn", str(exc)[:200]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if ckpt.exists():
        cmd = [sys.executable, "-m", "graphdist.cli.train", "--resume", str(run_dir)]
    else:  # killed before the first checkpoint: the failed run left nothing, so run it again
        cmd = train_args(a, strategy, run_dir)
    again = launch(cmd, env, limit_s=600)
    # A kill after the last checkpoint leaves a complete run: the resume says so (exit 2) and trains nothing.
    complete = again["rc"] == 2 and "the run is complete" in again["stderr"]
    row["recovered"] = (again["rc"] == 0 or complete) and ckpt.exists() and same(final_params(run_dir), ref)
    if again["rc"] != 0 and not complete:
        row["recover_error"] = again["stderr"][-500:]
    return row


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "runs": len(rows),
        "faults_injected": sum(r["killed"] for r in rows),
        "exit_nonzero": sum(r["rc"] not in (0, None) for r in rows),
        "named_rank": sum(r["named_rank"] for r in rows),
        "within_timeout_plus_10s": sum(r["in_time"] for r in rows),
        "hangs": sum(r["hung"] for r in rows),
        "processes_left": sum(r["left"] for r in rows),
        "checkpoints_torn": sum(r["checkpoint"] == "torn" for r in rows),
        "resumes_differed": sum(not r["recovered"] for r in rows),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--strategies", nargs="+", default=list(POINTS), choices=list(POINTS))
    p.add_argument("--runs", type=int, default=20, help="faulted runs per strategy (default 20)")
    p.add_argument("--nodes", type=int, default=3000)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--timeout", type=float, default=10.0, help="graphdist-train --timeout (default 10 s)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(RESULTS / "faults.json"))
    a = p.parse_args()
    rng = random.Random(a.seed)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="graphdist-faults-") as tmpdir:
        tmp = Path(tmpdir)
        for strategy in a.strategies:
            ref, passes = reference(a, strategy, tmp)
            points = [pt for pt in POINTS[strategy] if any(pt in passes.get(r, {}) for r in (0, 1))]
            for i in range(a.runs):
                point = points[i % len(points)]
                ranks = [r for r in (0, 1) if passes.get(r, {}).get(point)]
                rank = rng.choice(ranks)
                hit = rng.randint(1, passes[rank][point])
                row = faulted_run(a, strategy, point, rank, hit, ref, tmp, i)
                rows.append(row)
                print(f"{strategy:<12}{point:<18}rank {rank} pass {hit:<5} rc {row['rc']} "
                      f"exit {row['exit_after_kill_s'] or float('nan'):5.1f} s after the kill  named {row['named_rank']}  "
                      f"left {row['left']}  checkpoint {row['checkpoint']}  recovered {row['recovered']}", flush=True)
    table = {s: summarize([r for r in rows if r["strategy"] == s]) for s in a.strategies}
    keys = list(next(iter(table.values())))
    widths = [max(8, len(k)) + 2 for k in keys]
    print("\n" + f"{'strategy':<13}" + "".join(f"{k.replace('_', ' '):>{w}}" for k, w in zip(keys, widths)))
    for s, t in table.items():
        print(f"{s:<13}" + "".join(f"{t[k]:>{w}}" for k, w in zip(keys, widths)))
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"config": vars(a), "summary": table, "runs": rows}, indent=1))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
