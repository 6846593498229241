"""An elastic job losing a host and getting it back: the timeline, the gaps, the steps lost, the accuracy.

Three emulated hosts x 1 worker (``graphdist.testing.netns``) train ``--dataset`` (default pubmed,
6 METIS parts, the GCN recipe of ``bench_train.py --accuracy``) under torchrun ``--nnodes 2:3
--max-restarts 3`` with ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` (a joining host needs it: docs/multi-node.md).
At the first step of epoch ``--kill-in`` host 2 dies (its agent and worker SIGKILLed at once); the
survivors name it, torchrun forms the job again on the 2 hosts left and graphdist resumes the last
checkpoint on 2 workers, the parts regrouped. At the first step of epoch ``--rejoin-in`` of the
2-host formation host 2 starts again (0: it stays away); torchrun forms the job on 3 hosts and
graphdist resumes on 3 workers.

Per seed, an uninterrupted 3-host run and the elastic run: the final test accuracy of each, the
seconds from the kill to the first step of the 2-worker formation and from the rejoin to the first
step on 3 workers, and the steps lost (trained in the interrupted epoch before the kill, so trained
again: checkpoints are at epoch ends). The first seed's timeline is plotted: steps over time, the
workers of each formation, the kill and the rejoin.

Run book (root and iproute2; GRAPHDIST_DATA with pubmed):
    sudo .venv/bin/python bench/bench_elastic.py                       # 3 seeds, ~6 min
    sudo .venv/bin/python bench/bench_elastic.py --seeds 1 --dataset synthetic-3000 --epochs 4 --rejoin-in 0
Writes bench/results/elastic.json and elastic.png (git-ignored).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

RECIPE = ["--model", "gcn", "--hidden", "64", "--fanouts", "10,10", "--batch-size", "32", "--lr", "0.01",
          "--weight-decay", "5e-4", "--dropout", "0.5", "--feature-norm", "row"]
STEP = re.compile(r"epoch (\d+) step (\d+)/(\d+)")
WORKERS = re.compile(r"(?:workers\s+(\d+) x|on (\d+) workers \(was)")


def partitions(dataset: str, parts: int, out: Path) -> Path:
    from partition.api import partition

    return Path(partition(dataset, parts, method="metis", out=out / f"{dataset}-{parts}", seed=0))


def run(parts: Path, seed: int, epochs: int, run_dir: Path, kill_in: Optional[int], rejoin_in: Optional[int],
        timeout: float, hosts: int = 3) -> dict[str, Any]:
    """One torchrun job on ``hosts`` emulated hosts; with ``kill_in`` host 2 dies at that epoch's first step."""
    from graphdist.testing.netns import EmulatedCluster
    from graphdist.testing.netns.torchrun import TorchrunJob

    args = ["-m", "graphdist.cli.train", "--partitions", str(parts), *RECIPE, "--epochs", str(epochs), "--seed",
            str(seed), "--log-interval", "1", "--timeout", "60", "--run-dir", str(run_dir)]
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    events: dict[str, Any] = {"kill_s": None, "rejoin_s": None}
    state = {"resumed": False}

    def on_line(host: int, line: str) -> None:
        if "resumed after epoch" in line:
            state["resumed"] = True
        step = STEP.search(line)
        if not step:
            return
        epoch = int(step.group(1))
        if kill_in is not None and events["kill_s"] is None and epoch == kill_in:
            events["kill_s"] = time.monotonic() - job.start
            job.kill_host(2)
        elif rejoin_in is not None and state["resumed"] and events["rejoin_s"] is None and epoch >= rejoin_in:
            events["rejoin_s"] = time.monotonic() - job.start
            job.start_host(2)

    with EmulatedCluster(hosts=hosts, rate="1gbit") as c:
        env = {"OMP_NUM_THREADS": "1", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
        job = TorchrunJob(c, 1, args, cwd=str(run_dir.parent), env=env, nnodes=f"2:{hosts}",
                          launcher_args=["--max-restarts", "3", "--rdzv-id", f"bench-elastic-{seed}",
                                         "--monitor-interval", "1"],
                          rdzv_conf={"last_call_timeout": 2, "close_timeout": 5}, on_line=on_line)
        codes = job.wait(timeout)
    lines = list(job.lines)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    timeline = _timeline(lines)
    return {"codes": codes, "events": events, "timeline": timeline, "records": records,
            "test_acc": records[-1].get("test_acc") if records else None, "output_tail": job.output()[-4000:],
            **_loss(timeline, events["kill_s"]), "rejoin_to_step_s": _first_step(timeline, events["rejoin_s"], hosts)}


def _timeline(lines: list[tuple[float, int, str]]) -> list[dict[str, Any]]:
    """Each training step rank 0 logged: seconds since start, epoch, step, steps an epoch, workers then."""
    out, workers = [], None
    for t, host, line in sorted(lines):
        found = WORKERS.search(line)
        if found:
            workers = int(found.group(1) or found.group(2))
        step = STEP.search(line)
        if step:
            out.append({"t": t, "epoch": int(step.group(1)), "step": int(step.group(2)), "of": int(step.group(3)),
                        "workers": workers})
    return out


def _first_step(timeline: list[dict[str, Any]], since: Optional[float], workers: int) -> Optional[float]:
    """Seconds from ``since`` to the first logged step on ``workers`` workers after it (None: never)."""
    if since is None:
        return None
    after = [s["t"] for s in timeline if s["t"] > since and s["workers"] == workers]
    return after[0] - since if after else None


def _loss(timeline: list[dict[str, Any]], kill_s: Optional[float]) -> dict[str, Any]:
    """Seconds from the kill to the first step of the formation without the host (a step the dying formation
    still logged does not count), and the steps lost: logged before the kill in epochs the resumed job trains
    again (it resumes from the last epoch-end checkpoint)."""
    if kill_s is None:
        return {"kill_to_next_step_s": None, "steps_lost": None}
    before = [s for s in timeline if s["t"] <= kill_s]
    was = before[-1]["workers"] if before else None
    after = [s for s in timeline if s["t"] > kill_s and s["workers"] != was]
    if not after:
        return {"kill_to_next_step_s": None, "steps_lost": None}
    lost = sum(1 for s in before if s["epoch"] >= after[0]["epoch"])
    return {"kill_to_next_step_s": after[0]["t"] - kill_s, "steps_lost": lost}


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    timeline = result["timeline"]
    fig, ax = plt.subplots(figsize=(9, 3.5))
    done = [i + 1 for i in range(len(timeline))]
    ax.step([s["t"] for s in timeline], done, where="post", color="C0", label="steps trained (rank 0's log)")
    ax.set_xlabel("seconds since start")
    ax.set_ylabel("steps")
    for s0, s1 in zip(timeline, timeline[1:]):
        if s1["workers"] != s0["workers"] or s1["t"] - s0["t"] > 5:
            ax.axvspan(s0["t"], s1["t"], color="0.9")
    if result["events"]["kill_s"] is not None:
        ax.axvline(result["events"]["kill_s"], color="C3", label="host 2 killed")
    if result["events"]["rejoin_s"] is not None:
        ax.axvline(result["events"]["rejoin_s"], color="C2", label="host 2 started again")
    ax2 = ax.twinx()
    ax2.step([s["t"] for s in timeline], [s["workers"] or 0 for s in timeline], where="post", color="C1",
             label="workers")
    ax2.set_ylabel("workers")
    ax2.set_ylim(0, 4)
    ax.legend(loc="upper left")
    ax.set_title("elastic job: steps over time (grey: gaps)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="pubmed")
    p.add_argument("--parts", type=int, default=6)
    p.add_argument("--epochs", type=int, default=40, help="epochs (default 40: pubmed's are 2 steps, and a join "
                   "takes seconds)")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--kill-in", type=int, default=3, help="host 2 dies at this epoch's first step (default 3)")
    p.add_argument("--rejoin-in", type=int, default=5,
                   help="host 2 starts again at this epoch's first step in the 2-host formation (default 5; 0: it "
                   "stays away)")
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--out", default=str(REPO / "bench" / "results" / "elastic.json"))
    p.add_argument("--png", default=str(REPO / "bench" / "results" / "elastic.png"))
    a = p.parse_args(argv)
    from graphdist.testing.netns import unavailable_reason

    why = unavailable_reason()
    if why:
        print(f"bench_elastic: emulated hosts unavailable: {why}", file=sys.stderr)
        return 2
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-elastic-") as tmp_name:
        tmp = Path(tmp_name)
        parts = partitions(a.dataset, a.parts, tmp)
        for seed in range(a.seeds):
            whole = run(parts, seed, a.epochs, tmp / f"whole-{seed}" / "run", None, None, a.timeout)
            elastic = run(parts, seed, a.epochs, tmp / f"elastic-{seed}" / "run", a.kill_in, a.rejoin_in or None,
                          a.timeout)
            rows.append({"seed": seed, "whole": whole, "elastic": elastic})
            print(f"seed {seed}: uninterrupted test {whole['test_acc']}, elastic test {elastic['test_acc']}, exit "
                  f"codes {elastic['codes']}, kill -> next step {elastic['kill_to_next_step_s']}, rejoin -> step on 3 "
                  f"workers {elastic['rejoin_to_step_s']}, steps lost {elastic['steps_lost']}", flush=True)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    plot(rows[0]["elastic"], Path(a.png))
    whole_acc = [r["whole"]["test_acc"] for r in rows if r["whole"]["test_acc"] is not None]
    elastic_acc = [r["elastic"]["test_acc"] for r in rows if r["elastic"]["test_acc"] is not None]
    gaps = [r["elastic"]["kill_to_next_step_s"] for r in rows if r["elastic"]["kill_to_next_step_s"] is not None]
    lost = [r["elastic"]["steps_lost"] for r in rows if r["elastic"]["steps_lost"] is not None]
    joins = [r["elastic"]["rejoin_to_step_s"] for r in rows if r["elastic"]["rejoin_to_step_s"] is not None]
    print(f"\n{a.dataset}, {a.parts} METIS parts, GCN recipe, {a.epochs} epochs, 3 emulated hosts x 1 worker, host 2 "
          f"killed in epoch {a.kill_in}" + (f", back in epoch {a.rejoin_in}" if a.rejoin_in else ""))
    print(f"{'seed':>5}{'uninterrupted test':>20}{'elastic test':>14}{'kill->step s':>14}{'join->step s':>14}"
          f"{'steps lost':>12}{'epochs':>8}")
    for r in rows:
        e = r["elastic"]
        print(f"{r['seed']:>5}{_pct(r['whole']['test_acc']):>20}{_pct(e['test_acc']):>14}"
              f"{_num(e['kill_to_next_step_s']):>14}{_num(e['rejoin_to_step_s']):>14}{_num(e['steps_lost']):>12}"
              f"{len(e['records']):>8}")
    summary = {"uninterrupted_test_mean": statistics.mean(whole_acc) if whole_acc else None,
               "elastic_test_mean": statistics.mean(elastic_acc) if elastic_acc else None,
               "kill_to_next_step_s_median": statistics.median(gaps) if gaps else None,
               "steps_lost_median": statistics.median(lost) if lost else None,
               "rejoin_to_step_s_median": statistics.median(joins) if joins else None}
    print(f"mean test accuracy: uninterrupted {_pct(summary['uninterrupted_test_mean'])}, elastic "
          f"{_pct(summary['elastic_test_mean'])}; kill -> next step median {_num(summary['kill_to_next_step_s_median'])} s"
          f"; rejoin -> step on 3 workers median {_num(summary['rejoin_to_step_s_median'])} s")
    for r in rows:  # the raw lines are long: keep the tails in the JSON only
        for kind in ("whole", "elastic"):
            r[kind]["records"] = [{k: v for k, v in rec.items() if not isinstance(v, (list, dict))}
                                  for rec in r[kind]["records"]]
    Path(a.out).write_text(json.dumps({"config": vars(a), "summary": summary, "rows": rows}, indent=1))
    print(f"wrote {a.out} and {a.png}")
    return 0


def _pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _num(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.1f}"


if __name__ == "__main__":
    raise SystemExit(main())
