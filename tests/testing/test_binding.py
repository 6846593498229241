"""``--bind-cores``: each local worker on its own cores (graphdist.launch.worker_cores, trainers.run.bind_worker)."""

import os
import threading

import pytest

from graphdist.config import TrainConfig
from graphdist.launch import usable_cores, worker_cores
from graphdist.testing import launch
from graphdist.testing.env import require


def test_each_worker_gets_its_own_consecutive_cores_in_local_rank_order():
    usable = [4, 5, 6, 7, 8]
    got = [worker_cores(usable, [2, 1, 2], r) for r in range(3)]
    assert got == [[4, 5], [6], [7, 8]]
    assert [worker_cores(usable + [9], [2, 1, 2], r, setting=True) for r in range(3)] == got


def test_auto_binds_only_a_job_that_fills_the_machine():
    # Two 2-worker jobs on a 16-core machine would both bind to cores 0 and 1: auto leaves a job
    # with cores to spare to the scheduler, which has room to keep its workers apart.
    assert worker_cores(list(range(16)), [1, 1], 1) is None
    assert worker_cores(list(range(16)), [8, 8], 1) == list(range(8, 16))


def test_auto_leaves_oversubscribed_or_lone_workers_to_the_scheduler():
    assert worker_cores([0, 1], [1, 1, 1], 0) is None  # 3 threads, 2 cores
    assert worker_cores([0, 1], [2, 1], 1) is None
    assert worker_cores([0, 1, 2, 3], [1], 0) is None  # one worker: nothing to keep apart
    assert worker_cores([0, 1, 2, 3], [1], 0, setting=True) is None
    assert worker_cores([0, 1], [1, 1], 1, setting=False) is None


def test_forced_binding_that_does_not_fit_is_one_line_naming_the_fix():
    with pytest.raises(ValueError, match=r"3 workers with 3 threads in all need 3 cores; this machine lets the job "
                                         r"use 2 \(.*--no-bind-cores\)"):
        worker_cores([0, 1], [1, 1, 1], 2, setting=True)


def test_forced_binding_is_refused_before_any_worker_starts(monkeypatch):
    from graphdist import api, launch as launch_module

    monkeypatch.setattr(launch_module, "usable_cores", lambda: [0])
    with pytest.raises(ValueError, match="--bind-cores: 2 workers"):
        api.check_binding(TrainConfig(num_workers=2, bind_cores=True))
    api.check_binding(TrainConfig(num_workers=2))  # auto: never an error


def test_torchrun_workers_are_numbered_by_their_machine(monkeypatch):
    from graphdist.trainers.run import local_threads

    for key, value in {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
                       "MASTER_ADDR": "h1", "MASTER_PORT": "29500"}.items():
        monkeypatch.setenv(key, value)
    assert local_threads(3, 4, TrainConfig(threads=2)) == (1, [2, 2])


def _bind_and_check(rank: int, world_size: int) -> None:
    from graphdist.trainers.run import bind_worker

    usable = usable_cores()
    started = threading.Event()
    release = threading.Event()
    early = threading.Thread(target=lambda: (started.set(), release.wait(30)))
    early.start()  # a thread that already runs when the worker binds (gloo's, torch's pool)
    started.wait(30)
    try:
        cores = bind_worker(rank, world_size, TrainConfig(num_workers=world_size))
        assert cores == [usable[rank]], (rank, cores, usable)
        assert os.sched_getaffinity(0) == {usable[rank]}
        assert os.sched_getaffinity(early.native_id) == {usable[rank]}, "a thread started before binding runs anywhere"
        later = []
        t = threading.Thread(target=lambda: later.append(os.sched_getaffinity(0)))
        t.start()
        t.join(30)
        assert later == [{usable[rank]}]
    finally:
        release.set()
        early.join(30)


def test_two_local_workers_bind_to_different_cores_every_thread_included():
    require(hasattr(os, "sched_getaffinity") and len(usable_cores()) >= 2,
            "needs CPU affinity and 2 usable cores to bind 2 workers apart")
    launch(_bind_and_check, 2, timeout=60)


def test_bound_workers_train(tmp_path):
    """A real 2-worker run with --bind-cores: rank 0 logs its core (a diagnostic: --verbose) and the run completes."""
    import subprocess
    import sys

    require(hasattr(os, "sched_getaffinity") and len(usable_cores()) >= 2, "needs 2 usable cores")
    done = subprocess.run([sys.executable, "-m", "graphdist.cli.train", "--dataset", "synthetic-500", "--num-workers", "2",
                           "--epochs", "1", "--bind-cores", "--eval-every", "0", "--run-dir", str(tmp_path / "run"),
                           "--verbose"],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"rank 0 bound to cores [{usable_cores()[0]}]" in done.stderr + done.stdout
