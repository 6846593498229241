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


def _formation(tmp_path: Path, parts: Path, port: int, fault: str = "",
               workers: int = 2) -> list[subprocess.CompletedProcess]:
    """One formation of a torchrun job of ``workers`` workers, as torchrun's agent starts it: the agent's store
    (the test's), the job's id, restart count 0 (a membership change of ``--nnodes MIN:MAX`` does not count)."""
    procs = []
    for rank in range(workers):
        env = {**os.environ, "OMP_NUM_THREADS": "1", "RANK": str(rank), "WORLD_SIZE": str(workers),
               "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(workers), "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": str(port), "TORCHELASTIC_RUN_ID": "grow-test", "TORCHELASTIC_RESTART_COUNT": "0",
               "TORCHELASTIC_MAX_RESTARTS": "0", "TORCHELASTIC_USE_AGENT_STORE": "True", "GLOO_SOCKET_IFNAME": "lo"}
        env.pop("GRAPHDIST_TEST_FAULT", None)
        if fault:
            env["GRAPHDIST_TEST_FAULT"] = fault
        procs.append(subprocess.Popen([sys.executable, "-m", "graphdist.cli.train", "--partitions", str(parts), *ARGS],
                                      cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    out = [p.communicate(timeout=180)[0] for p in procs]
    return [subprocess.CompletedProcess(p.args, p.returncode, o) for p, o in zip(procs, out)]


def test_a_job_formed_again_with_the_same_restart_count_resumes_and_deletes_nothing(tmp_path):
    """torchrun restarts every worker when a node joins a --nnodes MIN:MAX job, and the restart count stays 0:
    the new formation must resume the run (not start it over, deleting its metrics), and must not read the
    old formation's keys in the store torchrun keeps (gloo's addresses, join marks, heartbeats)."""
    from torch.distributed import TCPStore

    from graphdist.data import load_graph
    from partition.api import partition

    parts = partition(load_graph("synthetic-2000"), 2, out=tmp_path / "parts")
    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)  # the agent's, kept across formations
    first = _formation(tmp_path, parts, store.port, fault="evaluate:1:2")  # rank 1 dies in epoch 2
    assert any(p.returncode != 0 for p in first), [p.stdout[-2000:] for p in first]
    run = tmp_path / "runs" / "grow-test"
    kept = (run / "metrics.jsonl").read_text()
    assert [json.loads(line)["epoch"] for line in kept.splitlines()] == [1]

    second = _formation(tmp_path, parts, store.port)
    out = "".join(p.stdout for p in second)
    assert all(p.returncode == 0 for p in second), out[-4000:]
    assert "the job formed again with 2 workers" in out and "after epoch 1" in out, out[-4000:]
    assert (run / "metrics.jsonl").read_text().startswith(kept)  # epoch 1's record kept as it was
    assert [json.loads(line)["epoch"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["grow-test"]


def test_a_job_formed_again_on_more_workers_resumes_with_its_parts_regrouped(tmp_path):
    """A host joined a --nnodes MIN:MAX job: torchrun forms it again on 3 workers where it had 2. The run goes
    on from its checkpoint on the new count, the 4 parts regrouped, every train seed trained once an epoch."""
    from torch.distributed import TCPStore

    from graphdist.data import load_graph
    from partition.api import partition, read_meta

    parts = partition(load_graph("synthetic-2000"), 4, out=tmp_path / "parts")
    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    first = _formation(tmp_path, parts, store.port, fault="evaluate:1:2")  # ends in epoch 2
    assert any(p.returncode != 0 for p in first), [p.stdout[-2000:] for p in first]
    grown = _formation(tmp_path, parts, store.port, workers=3)
    out = "".join(p.stdout for p in grown)
    assert all(p.returncode == 0 for p in grown), out[-4000:]
    assert "the job formed again with 3 workers" in out and "on 3 workers (was 2): 4 parts regrouped" in out, out[-4000:]
    run = tmp_path / "runs" / "grow-test"
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train = sum(int(p["num_train"]) for p in read_meta(parts)["parts"])
    assert [r["epoch"] for r in records] == [1, 2] and [r["seeds"] for r in records] == [train, train]
