import time

import pytest
import torch

from graphdist.testing import WorkerFailed, WorkerTimeout, launch


def _allreduce_ranks(rank: int, world_size: int) -> None:
    import torch.distributed as dist

    t = torch.tensor([float(rank)])
    dist.all_reduce(t)
    assert t.item() == sum(range(world_size))


def _raise_on_rank_1(rank: int, world_size: int) -> None:
    if rank == 1:
        raise ValueError("boom from rank 1")


def _hang_on_rank_1(rank: int, world_size: int) -> None:
    if rank == 1:
        time.sleep(600)


def test_launch_runs_collective():
    launch(_allreduce_ranks, 2, timeout=30)


def test_launch_propagates_child_exception():
    with pytest.raises(WorkerFailed, match=r"rank 1[\s\S]*boom from rank 1"):
        launch(_raise_on_rank_1, 2, timeout=30)


def test_launch_times_out_on_hang():
    start = time.monotonic()
    # Rank 1 hangs for sure; under load rank 0 may not have finished starting either.
    with pytest.raises(WorkerTimeout, match=r"ranks \[(0, )?1\] still running"):
        launch(_hang_on_rank_1, 2, timeout=8)
    assert time.monotonic() - start < 30


class _Exited:
    def __init__(self, exitcode):
        self.exitcode = exitcode


def _error_files(tmp_path, tracebacks: dict[int, str], world_size: int) -> list[str]:
    import pickle

    paths = []
    for rank in range(world_size):
        path = tmp_path / f"error-{rank}"
        if rank in tracebacks:
            path.write_bytes(pickle.dumps(tracebacks[rank]))
        paths.append(str(path))
    return paths


PEER_LOST = "Traceback ...\ngraphdist.comm.group.CommError: [rank 0] all_reduce failed: Connection closed by peer\n"


def test_failure_names_the_cause_not_the_rank_that_lost_its_peer(tmp_path):
    from graphdist.launch import describe_failure

    files = _error_files(tmp_path, {0: PEER_LOST, 1: "Traceback ...\nValueError: boom\n"}, 2)
    message = describe_failure([_Exited(1), _Exited(1)], files)
    assert message.startswith("worker rank 1 raised:") and "boom" in message and "ranks [0] failed too" in message


def test_failure_names_a_killed_rank_before_its_peers_comm_errors(tmp_path):
    from graphdist.launch import describe_failure

    files = _error_files(tmp_path, {0: PEER_LOST, 2: PEER_LOST}, 3)
    message = describe_failure([_Exited(1), _Exited(-9), _Exited(1)], files)
    assert message.startswith("worker rank 1 exited with code -9 (signal SIGKILL)")


def test_failure_with_only_comm_errors_names_the_first(tmp_path):
    from graphdist.launch import describe_failure

    files = _error_files(tmp_path, {1: PEER_LOST.replace("rank 0", "rank 1"), 0: PEER_LOST}, 2)
    assert describe_failure([_Exited(1), _Exited(1)], files).startswith("worker rank 0 raised:")


def test_of_comm_errors_the_one_that_names_the_silent_rank_is_shown(tmp_path):
    from graphdist.launch import describe_failure

    silent = PEER_LOST.replace("rank 0", "rank 1").replace("Connection closed by peer", "timed out. Rank 2 stopped "
                                                           "beating (127.0.0.1 = rank 2): stopped or hung")
    files = _error_files(tmp_path, {0: PEER_LOST, 1: silent}, 3)
    message = describe_failure([_Exited(1), _Exited(1), _Exited(-15)], files, exited={0, 1})
    assert message.startswith("worker rank 1 raised:") and "Rank 2 stopped beating" in message


def test_workers_start_from_a_script_read_on_stdin():
    import subprocess
    import sys

    script = "from graphdist.launch import spawn\nspawn(print, 2, args=('hello',), timeout=60)\nprint('done')\n"
    done = subprocess.run([sys.executable, "-"], input=script, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "done" in done.stdout, done.stderr[-2000:]
    assert "FileNotFoundError" not in done.stderr


def test_start_workers_early_starts_the_fork_server_with_the_trainer_imported():
    import subprocess
    import sys

    script = (
        "import sys\nfrom multiprocessing import forkserver\nfrom graphdist.launch import start_workers_early\n"
        "start_workers_early()\nassert forkserver._forkserver._forkserver_pid is not None\n"
        "assert 'graphdist.trainers.run' not in sys.modules  # imported by the server, not by the launcher\n"
        "print('running')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "running" in done.stdout, done.stderr[-2000:]
    spawn_env = dict(__import__("os").environ, GRAPHDIST_START_METHOD="spawn")
    script = script.replace("is not None", "is None")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=spawn_env)
    assert done.returncode == 0, done.stderr[-2000:]




def test_tune_allocator_passes_mallopt_values_a_c_int_holds(monkeypatch):
    """mallopt takes C ints: the trim threshold once was 1 << 33, which ctypes wrapped to 0, a threshold
    that gave the heap's top back on every free (every step re-faulted its batch: 3.7 ms against 1.2 ms
    for a 6 MB gather). The values must survive the conversion, and the threshold must stay high."""
    import ctypes

    from graphdist import launch

    calls = []

    class FakeLibc:
        def mallopt(self, param, value):
            calls.append((param, ctypes.c_int(value).value, value))
            return 1

    monkeypatch.delenv("GRAPHDIST_NO_MALLOC_TUNING", raising=False)
    monkeypatch.setattr(ctypes, "CDLL", lambda *a, **k: FakeLibc())
    assert launch.tune_allocator()
    assert all(as_int == value for _, as_int, value in calls), calls
    assert dict((param, value) for param, value, _ in calls) == {-4: 0, -1: launch.TRIM_THRESHOLD}
    assert launch.TRIM_THRESHOLD >= 1 << 30
