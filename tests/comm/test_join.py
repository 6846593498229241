"""Joining the job, and a stopped rank 0 that serves the store (tcp://, as under SLURM).

A rank that never joins is named by the ranks that wait for it (each signs in to the store before
the group forms); a rank whose store is not there says who serves it; when rank 0 is stopped
after joining, the others say the store does not answer either. The processes are forks of this
one (no torch import per process) that report their error through a queue.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import time

import pytest
import torch

TIMEOUT_S = 3.0


def _join(rank: int, world_size: int, init_method: str, queue, stop_after_join: bool = False) -> None:
    from graphdist import comm

    try:
        comm.init_process_group(rank, world_size, init_method, timeout_s=TIMEOUT_S)
        comm.all_reduce(torch.ones(1))
        if stop_after_join:
            os.kill(os.getpid(), signal.SIGSTOP)
        comm.all_reduce(torch.ones(1))
        queue.put((rank, "ok"))
    except Exception as exc:  # noqa: BLE001 - the message is what the test reads
        queue.put((rank, str(exc)))


def _run(ranks: list[int], world_size: int, init_method: str, stopped: int | None = None) -> dict[int, str]:
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_join, args=(r, world_size, init_method, queue, r == stopped)) for r in ranks]
    for p in procs:
        p.start()
    out: dict[int, str] = {}
    try:
        waiting = [r for r in ranks if r != stopped]
        deadline = time.monotonic() + 4 * TIMEOUT_S + 20
        while len(out) < len(waiting) and time.monotonic() < deadline:
            try:
                rank, message = queue.get(timeout=1)
                out[rank] = message
            except Exception:  # noqa: BLE001 - queue.Empty: keep waiting until the deadline
                pass
    finally:
        for p in procs:
            if p.is_alive():
                os.kill(p.pid, signal.SIGKILL)
            p.join(5)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_rank_that_never_joins_is_named(tmp_path):
    start = time.monotonic()
    out = _run([0, 2], 3, f"file://{tmp_path / 'store'}")  # rank 1 never starts
    assert set(out) == {0, 2}
    for message in out.values():
        assert "rank 1 never joined" in message, message
    assert time.monotonic() - start < 2 * (TIMEOUT_S + 5)


def test_a_store_that_is_not_there_names_who_serves_it():
    out = _run([1], 2, f"tcp://127.0.0.1:{_free_port()}")  # rank 0 (the store's server) never starts
    assert "could not reach the job's store at tcp://127.0.0.1" in out[1] and "rank 0" in out[1], out[1]


def test_rank_0_stopped_while_serving_the_store_is_named():
    pytest.importorskip("torch.distributed")
    out = _run([0, 1, 2], 3, f"tcp://127.0.0.1:{_free_port()}", stopped=0)
    assert set(out) == {1, 2}, out
    for message in out.values():
        assert "store does not answer either" in message and "rank 0" in message, message
