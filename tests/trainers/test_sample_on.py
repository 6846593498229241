"""graphdist-train --sample-on (issue 50): batches sampled on the worker's device, the choice kept on resume."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

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
    whole, part, cpu = tmp_path / "whole", tmp_path / "part", tmp_path / "cpu"
    _train("--num-workers", "1", "--sample-on", "device", "--epochs", "2", "--run-dir", str(whole))
    _train("--num-workers", "1", "--sample-on", "device", "--epochs", "1", "--run-dir", str(part))
    _train("--num-workers", "1", "--epochs", "2", "--run-dir", str(cpu))  # auto: this CPU worker samples on its CPU
    assert _checkpoint(whole)["extra"]["decisions"]["sample_on"] == ["device"]
    assert _checkpoint(cpu)["extra"]["decisions"]["sample_on"] == ["cpu"]
    resumed = tmp_path / "resumed"
    shutil.copytree(part, resumed)
    _train("--resume", str(resumed), "--epochs", "2")
    assert _losses(resumed) == _losses(whole)
    a, b = _checkpoint(whole)["model"], _checkpoint(resumed)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    # On a CPU "device" the torch sampler draws as the CPU one does (the same Floyd rounds, the same generator);
    # a CUDA generator draws its own way, which is why the choice is kept
    assert _losses(whole) == _losses(cpu)
    assert _losses(whole)[1] < _losses(whole)[0]


def test_with_the_structure_replicated_the_rows_come_from_their_owners(tmp_path: Path) -> None:
    """--replicate structure: sampled on the device, the features fetched from their owners through the host."""
    runs = {on: tmp_path / on for on in ("device", "cpu")}
    for on, run in runs.items():
        _train("--num-workers", "2", "--replicate", "structure", "--sample-on", on, "--epochs", "2",
               "--run-dir", str(run))
    assert _checkpoint(runs["device"])["extra"]["decisions"]["sample_on"] == ["device", "device"]
    assert _losses(runs["device"]) == _losses(runs["cpu"])  # on the CPU the same draws
