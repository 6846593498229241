"""torchrun ``--max-restarts``: a worker killed mid-run restarts the job, which resumes by itself.

Real torchrun (standalone rendezvous on this host), the real CLI, a SIGKILL injected at rank 1's
second evaluation (``GRAPHDIST_TEST_FAULT``; it fires in the first attempt only). No ``--run-dir``:
the run directory must be ``runs/$TORCHELASTIC_RUN_ID``, the same for every attempt, so the
restart finds the checkpoint instead of starting over elsewhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

ARGS = ["--hidden", "16", "--fanouts", "5,5", "--batch-size", "128", "--log-interval", "1000", "--timeout", "10",
        "--epochs", "2", "--seed", "3"]


def test_a_killed_worker_restarts_the_job_which_resumes_from_its_checkpoint(tmp_path):
    from partition.api import partition
    from graphdist.data import load_graph

    parts = partition(load_graph("synthetic-2000"), 2, out=tmp_path / "parts")
    env = {**os.environ, "GRAPHDIST_TEST_FAULT": "evaluate:1:2", "OMP_NUM_THREADS": "1"}
    job = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "--max-restarts", "1",
         "--rdzv-id", "elastic-test", "-m", "graphdist.cli.train", "--partitions", str(parts), *ARGS],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240,
    )
    out = job.stdout + job.stderr
    assert job.returncode == 0, out[-4000:]
    assert "fault injected: SIGKILL at evaluate" in out, out[-4000:]
    # The survivor prints its error and the hint when its next collective fails, unless torchrun's agent,
    # which saw rank 1 die, SIGTERMs it first (a race: ~1 run in 5 under load). Whenever it speaks, the
    # hint is torchrun's own restart, never "continue with --resume".
    assert "continue with: graphdist-train --resume" not in out, out[-4000:]
    if "graphdist-train: error: [rank 0]" in out:
        assert "torchrun restarts the job (--max-restarts), which resumes" in out, out[-4000:]
    runs = sorted((tmp_path / "runs").iterdir())
    assert len(runs) == 1, runs  # both attempts wrote one run directory
    run = runs[0]
    assert "restart 1 of the job: resuming" in out and "after epoch 1" in out, out[-4000:]
    epochs = [json.loads(line)["epoch"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert epochs == [1, 2]

    # The same run, never interrupted (the local launcher, in this process): the restarted job ends
    # on its parameters.
    from graphdist.cli.train import main

    assert main(["--partitions", str(parts), "--num-workers", "2", *ARGS, "--run-dir", str(tmp_path / "reference")]) == 0
    a = torch.load(run / "checkpoint.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "reference" / "checkpoint.pt", weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a), "the resumed job's parameters differ from an uninterrupted run"
