"""Multi-host training over emulated hosts: torchrun 2 hosts x 2 workers, shaped and slowed links, a cut link.

Each test starts an :class:`~graphdist.testing.netns.EmulatedCluster` (root + iproute2; skipped
elsewhere, failed when ``CI=true``) and runs the real CLI under torchrun in both hosts with the
recipe of ``graphdist.testing.netns.torchrun_argv``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from graphdist.testing.netns import EmulatedCluster, TorchrunJob, unavailable_reason
from graphdist.testing.env import find_dataset, require

REPO = Path(__file__).resolve().parents[2]
TRAIN = ["-m", "graphdist.cli.train"]
FAST = ["--hidden", "32", "--fanouts", "5,5", "--log-interval", "1000"]
HOSTS, PER_HOST = 2, 2
WORLD = HOSTS * PER_HOST
# Hang guard only (a 2x2 cora run takes ~15 s here): an agent still running after this is stopped.
JOB_LIMIT_S = 180.0


@pytest.fixture
def needs_cluster():
    reason = unavailable_reason()
    require(reason is None, reason or "")


@pytest.fixture(scope="module")
def parts4(tmp_path_factory):
    """name -> that dataset split with metis into 4 parts (made once per module, on first use)."""
    from graphdist.data import load_graph
    from partition.api import partition

    root, made = tmp_path_factory.mktemp("parts4"), {}

    def get(name: str) -> Path:
        if name not in made:
            made[name] = Path(partition(load_graph(find_dataset(name)), WORLD, method="metis",
                                        out=root / name, seed=0))
        return made[name]

    return get


def _metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


def _tx_total(c: EmulatedCluster) -> int:
    return sum(c.link_stats(h).tx_bytes for h in range(HOSTS))


def test_torchrun_2x2_over_a_shaped_link_equals_local_4_workers_on_pubmed(needs_cluster, parts4, tmp_path):
    common = ["--partitions", str(parts4("pubmed")), "--epochs", "1", "--batch-size", "16", "--seed", "7",
              "--timeout", "60", *FAST]
    local = subprocess.run([sys.executable, *TRAIN, *common, "--num-workers", str(WORLD),
                            "--run-dir", str(tmp_path / "local")],
                           capture_output=True, text=True, cwd=REPO, timeout=JOB_LIMIT_S)
    assert local.returncode == 0, local.stdout[-3000:] + local.stderr[-3000:]
    with EmulatedCluster(hosts=HOSTS, rate="1gbit", tcp_retries2=5) as c:
        tx0 = _tx_total(c)
        job = TorchrunJob(c, PER_HOST, [*TRAIN, *common, "--plots", "--run-dir", str(tmp_path / "multi")],
                          cwd=str(REPO))
        assert job.wait(JOB_LIMIT_S) == [0, 0], job.output()[-5000:]
        tx = _tx_total(c) - tx0
    assert (tmp_path / "multi" / "checkpoint.pt").exists() and (tmp_path / "multi" / "loss_acc.png").exists()
    # Graphdist counts an all-reduce as a ring sends it: 2(P-1)/P * M per rank, C = 2(P-1) M over
    # all ranks. Between two hosts any all-reduce must move at least M each way (each host needs the
    # other's partial sum), so at least C / (P-1) bytes crossed the link for gradients alone.
    grad = sum(r["bytes_sent"].get("grad", 0) for r in _metrics(tmp_path / "multi"))
    assert grad > 0
    assert tx >= grad / (WORLD - 1), f"link carried {tx:,} B; gradients alone need >= {grad / (WORLD - 1):,.0f} B"
    a = torch.load(tmp_path / "local" / "checkpoint.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "multi" / "checkpoint.pt", weights_only=True)["model"]
    assert a.keys() == b.keys()
    for k in a:  # same ranks, same partitions, same seeds: only reduction order may differ
        torch.testing.assert_close(b[k], a[k], rtol=1e-5, atol=1e-6, msg=k)
    ra, rb = _metrics(tmp_path / "local"), _metrics(tmp_path / "multi")
    assert [r["test_acc"] for r in rb] == [r["test_acc"] for r in ra]
    assert [r["seeds"] for r in rb] == [r["seeds"] for r in ra]


def test_cut_link_fails_every_process_then_resume_finishes(needs_cluster, parts4, tmp_path):
    """Cut host 1 mid-epoch 2: every process exits non-zero (no hang), then ``--resume`` finishes.

    Bounds: the collective timeout is ``--timeout 20``; TCP gives up on the silent link after
    ``tcp_retries2=5`` (~13 s; torchrun's agent reads its rendezvous store with a receive that has no
    timeout of its own, so this is what frees the cut host's agent); the agents' store reads time
    out after ``read_timeout=20``; each agent then gives its workers 30 s (torchrun's default) to stop.
    Here that is ~15-20 s after the cut; the test allows 120 s.
    """
    run = tmp_path / "run"
    base = [*TRAIN, "--partitions", str(parts4("cora")), "--epochs", "2", "--batch-size", "8",
            "--timeout", "20", "--run-dir", str(run), *FAST]
    cut_at: list[float] = []
    with EmulatedCluster(hosts=HOSTS, rate="1gbit", tcp_retries2=5) as c:
        lock = threading.Lock()

        def on_line(host: int, line: str) -> None:
            # Epoch 1's checkpoint is written before its line is logged; epoch 2 (18 steps) is running.
            with lock:
                if host == 0 and "epoch 1 done" in line and not cut_at:
                    c.cut(1)
                    cut_at.append(time.monotonic())

        job = TorchrunJob(c, PER_HOST, base, rdzv_conf={"read_timeout": 20}, cwd=str(REPO), on_line=on_line)
        rcs = job.wait(JOB_LIMIT_S)
        out = job.output()
        assert cut_at, "epoch 1 never finished:\n" + out[-5000:]
        assert all(rc != 0 for rc in rcs), f"exit codes {rcs} after the cut:\n{out[-5000:]}"
        after = [job.start + t - cut_at[0] for t in job.exit_times if t is not None]
        assert len(after) == HOSTS and max(after) < 120, f"agents exited {after} s after the cut"
        print(f"\ncut host 1; agents exited {', '.join(f'{s:.1f}' for s in after)} s later, codes {rcs}")
        # The surviving host's ranks say which collective failed and which ranks are unreachable.
        survivors = job.output(0)
        assert "graphdist-train: error: [rank" in survivors, survivors[-5000:]
        assert f"{c.addr(1)} = ranks 2, 3" in survivors, survivors[-5000:]
        assert [r["epoch"] for r in _metrics(run)] == [1]

        c.restore(1)
        # The run directory holds the resolved config: --resume alone continues the same run.
        resumed = TorchrunJob(c, PER_HOST, [*TRAIN, "--resume", str(run)], port=29401, cwd=str(REPO))
        assert resumed.wait(JOB_LIMIT_S) == [0, 0], resumed.output()[-5000:]
    assert [r["epoch"] for r in _metrics(run)] == [1, 2]
    assert "resumed from" in resumed.output(0)


def test_link_slowed_to_1mbit_mid_run_completes_slower_and_is_never_called_dead(needs_cluster, tmp_path):
    """Host 1's link drops from 1 Gbit/s to 1 Mbit/s after epoch 1: the job finishes (exit 0, every
    epoch recorded), its later epochs take longer, and nothing reports a dead or stopped peer."""
    from graphdist.data import load_graph
    from partition.api import partition

    parts = partition(load_graph("synthetic-3000"), WORLD, method="metis", out=tmp_path / "parts", seed=0)
    run = tmp_path / "run"
    # no evaluation: what is measured is training over the slowed link (and the test stays short)
    args = [*TRAIN, "--partitions", str(parts), "--epochs", "2", "--batch-size", "256", "--hidden", "16",
            "--fanouts", "5,5", "--log-interval", "1000", "--timeout", "60", "--eval-every", "0", "--run-dir", str(run)]
    slowed: list[float] = []
    with EmulatedCluster(hosts=HOSTS, rate="1gbit", tcp_retries2=5) as c:
        def on_line(host: int, line: str) -> None:
            if host == 0 and "epoch 1 done" in line and not slowed:
                c.set_rate(1, "1mbit")
                slowed.append(time.monotonic())

        job = TorchrunJob(c, PER_HOST, args, cwd=str(REPO), on_line=on_line)
        rcs = job.wait(JOB_LIMIT_S)
        out = job.output()
    assert slowed, "epoch 1 never finished:\n" + out[-5000:]
    assert rcs == [0, 0], out[-5000:]
    for symptom in ("stopped beating", "Unreachable peer", "never joined", "error:"):
        assert symptom not in out, out[-5000:]
    times = [r["epoch_time_s"] for r in _metrics(run)]
    assert len(times) == 2 and times[1] > 2 * times[0], f"epoch times {times}: the slow link did not show"
    print(f"\nepoch times at 1 Gbit/s then 1 Mbit/s: {', '.join(f'{t:.2f}' for t in times)} s")
