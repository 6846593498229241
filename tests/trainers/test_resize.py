"""--resume on another worker count (issue 49): the parts regrouped, the model and optimizer carried over, every
random stream derived from (seed, epoch, rank), every train seed once in the resized epoch."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def six_parts(tmp_path_factory) -> Path:
    from partition.api import partition

    return Path(partition("synthetic-2000", 6, method="metis", out=tmp_path_factory.mktemp("p") / "p6", seed=0))


def _train(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "graphdist.cli.train", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=240)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    return out


def _seeds_per_epoch(run: Path) -> list[int]:
    return [json.loads(line)["seeds"] for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


def _model(run: Path) -> dict:
    return torch.load(run / "checkpoint.pt", weights_only=False)["model"]


def test_minibatch_resumes_on_fewer_and_more_workers(six_parts, tmp_path):
    from partition.api import read_meta

    first = tmp_path / "first"
    _train("--partitions", str(six_parts), "--num-workers", "2", "--epochs", "2", "--batch-size", "128", "--hidden",
           "16", "--fanouts", "5,5", "--eval-every", "0", "--timeout", "60", "--run-dir", str(first))
    runs = {name: tmp_path / name for name in ("one_a", "one_b", "three")}
    for run in runs.values():
        shutil.copytree(first, run)
    for name, workers in (("one_a", 1), ("one_b", 1), ("three", 3)):
        out = _train("--resume", str(runs[name]), "--num-workers", str(workers), "--epochs", "3")
        assert f"resumed after epoch 2 on {workers} workers (was 2): 6 parts regrouped" in out, out[-2000:]
    # The same checkpoint resumed twice on 1 worker trains alike: its streams derive from (seed, epoch, rank).
    a, b = _model(runs["one_a"]), _model(runs["one_b"])
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], _model(first)[k]) for k in a)  # and it did train
    # Every train seed once in the resized epochs, on 1 worker and on 3.
    train = sum(int(p["num_train"]) for p in read_meta(six_parts)["parts"])
    assert _seeds_per_epoch(runs["one_a"]) == _seeds_per_epoch(runs["three"]) == [train] * 3


@pytest.mark.parametrize("strategy", ["aggregation", "fullgraph"])
def test_aggregation_and_fullgraph_resume_on_another_worker_count_from_an_epoch_end(six_parts, tmp_path, strategy):
    run = tmp_path / "run"
    _train("--partitions", str(six_parts), "--strategy", strategy, "--num-workers", "2", "--epochs", "1",
           "--batch-size", "128", "--hidden", "16", "--eval-every", "0", "--timeout", "60", "--run-dir", str(run))
    out = _train("--resume", str(run), "--num-workers", "3", "--epochs", "2")
    assert "resumed after epoch 1 on 3 workers (was 2)" in out, out[-2000:]
    assert len(_seeds_per_epoch(run)) == 2


def test_aggregation_averages_the_ranks_optimizer_moments_on_a_resize():
    from graphdist.trainers.aggregation import averaged_optimizer_state

    net = torch.nn.Linear(3, 2)
    states = []
    for scale in (1.0, 3.0):
        opt = torch.optim.Adam(net.parameters())
        net.zero_grad()
        (scale * net(torch.ones(4, 3)).sum()).backward()
        opt.step()
        states.append(opt.state_dict())
    merged = averaged_optimizer_state(states)
    for key, slots in merged["state"].items():
        expected = (states[0]["state"][key]["exp_avg_sq"] + states[1]["state"][key]["exp_avg_sq"]) / 2
        torch.testing.assert_close(slots["exp_avg_sq"], expected)
        assert torch.equal(slots["step"], states[0]["state"][key]["step"])


def test_a_worker_given_a_part_its_host_lacks_is_refused_naming_host_part_and_path(tmp_path):
    """After a regrouping a host may be given parts it never read: refused before training, in one line."""
    import socket

    from partition.api import partition

    parts = Path(partition("synthetic-2000", 4, method="random", out=tmp_path / "p4", seed=0))
    (parts / "part-3" / "indices.npy").unlink()  # this host has every part but one file of part 3
    done = subprocess.run([sys.executable, "-m", "graphdist.cli.train", "--partitions", str(parts), "--num-workers",
                           "2", "--epochs", "1", "--hidden", "8", "--run-dir", str(tmp_path / "run")],
                          capture_output=True, text=True, cwd=REPO, timeout=240)
    err = done.stderr
    assert done.returncode != 0
    line = next(l for l in err.splitlines() if "was given part" in l)
    assert f"host {socket.gethostname()}" in line and "part 3" in line and str(parts / "part-3" / "indices.npy") in line
    assert "storage every host reads" in line
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def _killed_inside_epoch_2(parts: Path, run: Path, epochs: int, interval: str) -> dict:
    """A 2-worker run with ``--checkpoint-interval interval``, rank 1 SIGKILLed inside epoch 2; its ``run.json``."""
    done = subprocess.run([sys.executable, "-m", "graphdist.cli.train", "--partitions", str(parts), "--num-workers",
                           "2", "--epochs", str(epochs), "--batch-size", "128", "--hidden", "16", "--fanouts", "5,5",
                           "--eval-every", "0", "--timeout", "60", "--checkpoint-interval", interval, "--run-dir",
                           str(run)], capture_output=True, text=True, cwd=REPO, timeout=240,
                          env={**os.environ, "GRAPHDIST_TEST_FAULT": "allreduce:1:30"})
    assert done.returncode != 0 and "fault injected" in done.stdout + done.stderr, done.stderr[-2000:]
    return json.loads((run / "run.json").read_text())


def test_a_mid_epoch_checkpoint_resumes_on_any_worker_count_training_each_remaining_seed_once(six_parts, tmp_path):
    """--checkpoint-interval: rank 1 is killed inside epoch 2, after a checkpoint at its step 3; the run resumed
    on 1 worker (twice: alike) and on 3 trains the rest of epoch 2, every train seed of it once in all."""
    from partition.api import read_meta

    first = tmp_path / "first"
    status = _killed_inside_epoch_2(six_parts, first, 3, "3steps")
    assert (status["checkpoint_epoch"], status["checkpoint_step"]) == (1, 3)
    train = sum(int(p["num_train"]) for p in read_meta(six_parts)["parts"])
    runs = {name: tmp_path / name for name in ("one_a", "one_b", "three")}
    for name, workers in (("one_a", 1), ("one_b", 1), ("three", 3)):
        shutil.copytree(first, runs[name])
        out = _train("--resume", str(runs[name]), "--num-workers", str(workers))
        assert f"resumed in epoch 2 at step 3" in out and f"on {workers} workers (was 2)" in out, out[-2000:]
        assert _seeds_per_epoch(runs[name]) == [train] * 3
    a, b = _model(runs["one_a"]), _model(runs["one_b"])
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_checkpoint_interval_in_seconds_rides_on_the_seed_count_and_resumes_mid_epoch(six_parts, tmp_path):
    """--checkpoint-interval 0.05s: rank 0's clock raises a flag that every rank reads from the next step's seed
    count, so all save after the same step; killed inside epoch 2, the run resumed on 1 worker counts every seed."""
    from partition.api import read_meta

    run = tmp_path / "run"
    status = _killed_inside_epoch_2(six_parts, run, 2, "0.05s")
    assert status["checkpoint_epoch"] == 1 and status["checkpoint_step"], status  # saved inside epoch 2
    out = _train("--resume", str(run), "--num-workers", "1")
    assert f"resumed in epoch 2 at step {status['checkpoint_step']}" in out, out[-2000:]
    train = sum(int(p["num_train"]) for p in read_meta(six_parts)["parts"])
    assert _seeds_per_epoch(run) == [train] * 2
