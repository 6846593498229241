"""graphdist-train --loaders (issue 50): one loader process trains as the prefetch thread does, a resumed run with loaders
continues its streams, and where loaders cannot sample (across parts) the flag is refused in one line."""

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


def _train(*args: str, ok: bool = True) -> str:
    done = subprocess.run([sys.executable, "-m", "graphdist.cli.train", *COMMON, *args], capture_output=True,
                          text=True, cwd=REPO, timeout=240)
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


@pytest.mark.parametrize("flags", [("--num-workers", "2", "--loaders", "1")])
def test_loaders_that_would_sample_across_parts_are_refused(flags: tuple[str, ...], tmp_path: Path) -> None:
    out = _train(*flags, "--epochs", "1", "--run-dir", str(tmp_path / "r"), ok=False)
    assert "--loaders samples from local sources only so far" in out and "--replicate graph" in out
    assert "Traceback" not in out
