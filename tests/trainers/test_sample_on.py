"""graphdist-train --sample-on (issue 50): batches sampled on the worker's device, the choice kept on resume."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
COMMON = ("--dataset", "synthetic-3000", "--batch-size", "256", "--hidden", "16", "--fanouts", "5,5",
          "--eval-every", "0", "--timeout", "60")


def _train(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "graphdist.cli.train", *COMMON, *args], capture_output=True,
                          text=True, cwd=REPO, timeout=240)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    return out


def _checkpoint(run: Path) -> dict:
    return torch.load(run / "checkpoint.pt", weights_only=False)


def _losses(run: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


def test_device_sampling_trains_resumes_bit_identically_and_keeps_its_choice(tmp_path: Path) -> None:
    whole, part = tmp_path / "whole", tmp_path / "part"
    _train("--num-workers", "1", "--sample-on", "device", "--epochs", "2", "--run-dir", str(whole))
    _train("--num-workers", "1", "--sample-on", "device", "--epochs", "1", "--run-dir", str(part))
    assert _checkpoint(whole)["extra"]["decisions"]["sample_on"] == ["device"]
    resumed = tmp_path / "resumed"
    shutil.copytree(part, resumed)
    _train("--resume", str(resumed), "--epochs", "2")
    assert _losses(resumed) == _losses(whole)
    a, b = _checkpoint(whole)["model"], _checkpoint(resumed)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert _losses(whole)[1] < _losses(whole)[0]  # and it trains


def test_auto_samples_on_a_cpu_workers_cpu_and_device_is_refused_where_it_cannot_be() -> None:
    from graphdist.section import ConfigError
    from graphdist.trainers.device_sampling import sample_on_choice

    assert sample_on_choice("auto", torch.device("cpu"), None, 10)[0] == "cpu"
    assert sample_on_choice("auto", torch.device("cuda:0"), "link prediction's batches are edges", 10) == \
        ("cpu", "link prediction's batches are edges")
    assert sample_on_choice("device", torch.device("cpu"), None, 10)[0] == "device"
    with pytest.raises(ConfigError, match="--sample-on device needs batches sampled from local sources: link"):
        sample_on_choice("device", torch.device("cpu"), "link prediction's batches are edges", 10)


def test_with_the_structure_replicated_the_rows_come_from_their_owners(tmp_path: Path) -> None:
    """--replicate structure: sampled on the device, the features fetched from their owners through the host."""
    runs = {on: tmp_path / on for on in ("device", "cpu")}
    for on, run in runs.items():
        _train("--num-workers", "2", "--replicate", "structure", "--sample-on", on, "--epochs", "2",
               "--run-dir", str(run))
    assert _checkpoint(runs["device"])["extra"]["decisions"]["sample_on"] == ["device", "device"]
    assert _losses(runs["device"]) == _losses(runs["cpu"])  # on the CPU the same draws


def test_the_start_up_profiler_probes_the_device_sampler(tmp_path: Path) -> None:
    """--placement profiled with batches sampled on the device: the probes sample, gather and label as training does
    (labels by id on the device, rows there)."""
    run = tmp_path / "run"
    _train("--num-workers", "2", "--replicate", "graph", "--sample-on", "device", "--placement", "profiled",
           "--epochs", "1", "--run-dir", str(run))
    assert (run / "profile.json").exists()
    assert _checkpoint(run)["extra"]["decisions"]["sample_on"] == ["device", "device"]


def test_seeds_migrate_between_ranks_that_sample_on_their_devices(tmp_path: Path) -> None:
    """--rebalance-every with --sample-on device (--replicate graph): rank 1 computes 3x slower (the test slowdown),
    seeds and their labels move to rank 0, whose labels of every node are on its device; every seed once an epoch."""
    import os

    run = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "graphdist.cli.train", *COMMON, "--num-workers", "2", "--replicate",
                           "graph", "--sample-on", "device", "--rebalance-every", "4", "--batch-size", "64",
                           "--epochs", "2", "--run-dir", str(run)], capture_output=True, text=True, cwd=REPO,
                          timeout=240, env={**os.environ, "GRAPHDIST_TEST_SLOWDOWN": "1:3.0"})
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert sum(r["seeds_received"][0] for r in records) > 0, records  # seeds moved to the fast rank
    from graphdist.data import load_graph

    assert [r["seeds"] for r in records] == [int(load_graph("synthetic-3000").train_mask.sum())] * 2
