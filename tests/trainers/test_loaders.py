"""graphdist-train --loaders (issue 50): one loader process trains as the prefetch thread does, a resumed run with loaders
continues its streams, and across parts loader k of every worker samples in a group of its own."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
COMMON = ("--dataset", "synthetic-3000", "--batch-size", "256", "--hidden", "16", "--fanouts", "5,5",
          "--eval-every", "0", "--timeout", "60")


def _train(*args: str, ok: bool = True, env: dict | None = None) -> str:
    done = subprocess.run([sys.executable, "-m", "graphdist.cli.train", *COMMON, *args], capture_output=True,
                          text=True, cwd=REPO, timeout=240, env={**os.environ, **(env or {})})
    out = done.stdout + done.stderr
    assert (done.returncode == 0) == ok, out[-3000:]
    return out


def _losses(run: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


def _model(run: Path) -> dict:
    return torch.load(run / "checkpoint.pt", weights_only=False)["model"]


def test_one_loader_trains_as_the_prefetch_thread(tmp_path: Path) -> None:
    runs = {k: tmp_path / f"k{k}" for k in (0, 1)}
    for k, run in runs.items():
        out = _train("--num-workers", "1", "--epochs", "2", "--loaders", str(k), "--prefetch", "--run-dir", str(run))
        assert ("1 loader process" in out) == (k == 1), out[-2000:]
    assert _losses(runs[0]) == _losses(runs[1])
    a, b = _model(runs[0]), _model(runs[1])
    assert all(torch.equal(a[name], b[name]) for name in a)


def test_a_resumed_run_with_two_loaders_equals_the_whole_run(tmp_path: Path) -> None:
    whole, part = tmp_path / "whole", tmp_path / "part"
    args = ("--num-workers", "2", "--replicate", "graph", "--loaders", "2")
    _train(*args, "--epochs", "2", "--run-dir", str(whole))
    _train(*args, "--epochs", "1", "--run-dir", str(part))
    resumed = tmp_path / "resumed"
    shutil.copytree(part, resumed)
    _train("--resume", str(resumed), "--epochs", "2")
    assert _losses(resumed) == _losses(whole)
    a, b = _model(whole), _model(resumed)
    assert all(torch.equal(a[name], b[name]) for name in a)


def _seeds(run: Path) -> list[int]:
    return [json.loads(line)["seeds"] for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


def test_across_parts_two_loaders_are_deterministic_and_train_every_seed(tmp_path: Path) -> None:
    """Loader k of every worker forms its own sampling group (spawned); one loader's batches are the prefetch
    thread's batch by batch at 2 and 3 ranks (tests/sampling/test_loader_procs.py)."""
    runs = [tmp_path / "a", tmp_path / "b"]
    for run in runs:
        _train("--num-workers", "3", "--epochs", "2", "--loaders", "2", "--run-dir", str(run))
    assert _losses(runs[0]) == _losses(runs[1])
    a, b = _model(runs[0]), _model(runs[1])
    assert all(torch.equal(a[name], b[name]) for name in a)
    from graphdist.data import load_graph

    train = int(load_graph("synthetic-3000").train_mask.sum())
    assert _seeds(runs[0]) == [train, train]  # every train seed once an epoch
    rates = [json.loads(line)["cache_hit_rate"] for line in (runs[0] / "metrics.jsonl").read_text().splitlines()]
    assert all(rate > 0 for rate in rates)  # the loaders' cache traffic reaches the worker's counters


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _loader_pids(root: int) -> list[int]:
    """Processes named gd-loader-<k> (what ps shows) that descend from process ``root``."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            if not Path(f"/proc/{entry}/comm").read_text().startswith("gd-loader-"):
                continue
        except OSError:
            continue
        pid = int(entry)
        while pid > 1 and pid != root:
            pid = _parent(pid)
        if pid == root:
            found.append(int(entry))
    return found


def test_a_killed_loader_ends_the_run_naming_it(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "graphdist.cli.train", *COMMON, "--num-workers", "1", "--epochs",
                             "500", "--loaders", "1", "--timeout", "5", "--run-dir", str(tmp_path / "r")],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        pids: list[int] = []
        while not pids and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
            pids = _loader_pids(proc.pid)
        assert pids, "no loader process appeared"
        time.sleep(1.0)  # into training
        os.kill(pids[0], signal.SIGKILL)
        killed = time.monotonic()
        out, err = proc.communicate(timeout=60)
        assert time.monotonic() - killed < 10
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    assert "worker 0: loader 0 of 1 was killed by signal 9" in err, err[-2000:]
    assert "Traceback" not in err


def test_rebalancing_moves_shares_past_the_loaders_lookahead(tmp_path: Path) -> None:
    """New shares apply from a batch no loader has drawn yet: every train seed still once an epoch."""
    plain, fed = tmp_path / "plain", tmp_path / "fed"
    _train("--num-workers", "2", "--epochs", "2", "--loaders", "0", "--batch-size", "64", "--run-dir", str(plain))
    # rank 1 computes 3x slower (the test slowdown; its sampling, in its loaders, is not stretched)
    out = _train("--num-workers", "2", "--epochs", "2", "--loaders", "2", "--rebalance-every", "4", "--batch-size",
                 "64", "--run-dir", str(fed), "--verbose", env={"GRAPHDIST_TEST_SLOWDOWN": "1:3.0"})
    assert _seeds(fed) == _seeds(plain)
    assert "2 loader processes" in out and "rebalancing every 4 steps" in out
    last = json.loads((fed / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["batch_share_end"][0] > last["batch_share_end"][1], last  # seeds moved to the fast rank


def test_link_batches_through_loaders_train_and_count_as_without(tmp_path: Path) -> None:
    """Link prediction's edge batches through a loader across parts: the same losses, and the bytes its collectives
    sent are in the worker's records (they are counted in the loader process)."""
    runs = {k: tmp_path / f"k{k}" for k in (0, 1)}
    for k, run in runs.items():
        _train("--task", "link", "--num-workers", "2", "--epochs", "1", "--loaders", str(k), "--prefetch",
               "--run-dir", str(run))
    assert _losses(runs[0]) == _losses(runs[1])
    sent = [json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])["bytes_sent"] for run in runs.values()]
    assert sent[0] == sent[1] and sum(sent[0].values()) > 0, sent
