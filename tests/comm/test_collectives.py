import os
import time

import pytest
import torch

from graphdist.testing import WorkerFailed, launch


def _all_to_all_v_body(rank: int, world_size: int) -> None:
    from graphdist import comm

    # rank r sends (r + 1) * (dst + 1) rows of width 3 to rank dst, filled with 100*r + dst
    inputs = [torch.full(((rank + 1) * (dst + 1), 3), float(100 * rank + dst)) for dst in range(world_size)]
    comm.reset_byte_counts()
    out = comm.all_to_all_v(inputs, tag="test")
    assert len(out) == world_size
    for src, t in enumerate(out):
        assert t.shape == ((src + 1) * (rank + 1), 3), (src, t.shape)
        assert bool((t == 100 * src + rank).all())
    sent_rows = sum((rank + 1) * (d + 1) for d in range(world_size) if d != rank)
    assert comm.byte_counts()["test"] == sent_rows * 3 * 4
    # The size exchange gives every rank the whole count matrix (what each rank sends to each).
    sizes = comm.all_to_all_counts_async([(rank + 1) * (d + 1) for d in range(world_size)], tag="test")
    assert sizes.wait() == [(s + 1) * (rank + 1) for s in range(world_size)]
    expected = [[(s + 1) * (d + 1) for d in range(world_size)] for s in range(world_size)]
    assert sizes.matrix.tolist() == expected


def _duplex_body(rank: int, world_size: int) -> None:
    from graphdist import comm
    from graphdist.comm import alltoall

    used = []
    exchange = alltoall._exchange_rows
    alltoall._exchange_rows = lambda *args: used.append(1) or exchange(*args)
    # uneven sizes, an empty message (rank 0 sends nothing to the last rank), rows of width 2
    inputs = [torch.full((0 if (rank, dst) == (0, world_size - 1) else (rank + 1) * (dst + 2), 2),
                         float(100 * rank + dst)) for dst in range(world_size)]

    def check(out: list) -> None:
        for src, t in enumerate(out):
            rows = 0 if (src, rank) == (0, world_size - 1) else (src + 1) * (rank + 2)
            assert t.shape == (rows, 2) and bool((t == 100 * src + rank).all()), (src, t.shape)

    check(comm.all_to_all_v(inputs, duplex=True))  # receives first, point to point
    assert len(used) == 1
    recv_rows = [0 if (src, rank) == (0, world_size - 1) else (src + 1) * (rank + 2) for src in range(world_size)]
    check(comm.all_to_all_v_async(inputs, recv_rows=recv_rows, duplex=True).wait())
    check(comm.all_to_all_v(inputs))  # small messages: gloo's all_to_all_single
    assert len(used) == 2
    big = [torch.full((DUPLEX_ROWS, 1), float(rank)) for _ in range(world_size)]
    out = comm.all_to_all_v(big)  # a message of DUPLEX_MIN_BYTES: duplex, alike on every rank
    assert len(used) == 3 and [float(t[0, 0]) for t in out] == [float(s) for s in range(world_size)]


DUPLEX_ROWS = 64 * 1024 // 4


@pytest.mark.parametrize("world_size", [2, 3])
def test_all_to_all_v_duplex(world_size):
    launch(_duplex_body, world_size, timeout=60)


def _empty_parts_body(rank: int, world_size: int) -> None:
    from graphdist import comm

    inputs = [torch.arange(5, dtype=torch.int64) if (rank == 0 and dst == 1) else torch.zeros(0, dtype=torch.int64)
              for dst in range(world_size)]
    out = comm.all_to_all_v(inputs)
    expect = 5 if rank == 1 else 0
    assert out[0].numel() == expect and all(t.numel() == 0 for t in out[1:])


def _async_allreduce_body(rank: int, world_size: int) -> None:
    from graphdist import comm

    t = torch.full((4,), float(rank))
    h = comm.all_reduce_async(t, tag="grad")
    h.wait()
    assert torch.allclose(t, torch.full((4,), float(sum(range(world_size)))))
    objs = comm.all_gather_object({"rank": rank})
    assert [o["rank"] for o in objs] == list(range(world_size))
    assert comm.broadcast_object("hello" if rank == 0 else None) == "hello"


def _exchange_body(rank: int, world_size: int) -> None:
    """Two gloo ranks reduce small tensors by one exchange: the same values as gloo's ring, bit for bit."""
    from graphdist import comm
    from graphdist.comm import collectives

    gen = torch.Generator().manual_seed(rank)
    cases = [(torch.randn(n, generator=gen).to(dtype), op) for n in (3, 100, 4096) for dtype in (torch.float32,
             torch.float64, torch.bfloat16) for op in ("sum", "max", "min")]
    cases.append((torch.randint(-5, 5, (7,), generator=gen), "sum"))
    saved = collectives.EXCHANGE_MAX_BYTES
    for tensor, op in cases:
        assert collectives._by_exchange(tensor, None)
        by_exchange = comm.all_reduce(tensor.clone(), op=op)
        collectives.EXCHANGE_MAX_BYTES = 0  # gloo's own allreduce
        try:
            by_ring = comm.all_reduce(tensor.clone(), op=op)
        finally:
            collectives.EXCHANGE_MAX_BYTES = saved
        assert by_exchange.dtype == tensor.dtype and torch.equal(by_exchange, by_ring), (tensor.dtype, op)
    # Through a hook's future, on a view of a larger buffer (as a bucket's flat gradient is).
    buffer = torch.full((10,), float(rank + 1))
    assert collectives.start_all_reduce(buffer[2:6]).future().wait().tolist() == [3.0] * 4
    assert buffer.tolist() == [float(rank + 1)] * 2 + [3.0] * 4 + [float(rank + 1)] * 4
    assert not collectives._by_exchange(torch.ones(2), None) and not collectives._by_exchange(torch.ones(1 << 17), None)


def test_two_ranks_reduce_small_tensors_by_one_exchange():
    launch(_exchange_body, 2, timeout=60)


def _dead_peer_body(rank: int, world_size: int) -> None:
    from graphdist import comm

    if rank == 1:
        os._exit(3)  # dies without a word, as a killed worker does
    comm.all_reduce(torch.ones(64))  # two ranks: by exchange (all_to_all)


@pytest.mark.parametrize("world_size", [2, 3])
def test_all_to_all_v(world_size):
    launch(_all_to_all_v_body, world_size, timeout=60)


def test_all_to_all_v_with_empty_parts():
    launch(_empty_parts_body, 3, timeout=60)


def test_async_allreduce_and_objects():
    launch(_async_allreduce_body, 3, timeout=60)


def test_dead_peer_fails_fast_and_names_rank():
    start = time.monotonic()
    with pytest.raises(WorkerFailed, match=r"^worker rank 1 exited with code 3"):
        launch(_dead_peer_body, 2, timeout=20)
    assert time.monotonic() - start < 40


def _stopped_peer_body(rank: int, world_size: int) -> None:
    import signal

    from graphdist import comm

    comm.all_reduce(torch.ones(1))  # every rank has joined and beats
    if rank == 2:
        os.kill(os.getpid(), signal.SIGSTOP)  # hung, not dead: its sockets stay open
    comm.all_reduce(torch.ones(1))


def test_stopped_peer_is_named_and_the_job_ends_within_timeout_plus_5s():
    from graphdist.testing.launch import launch as launch_with_timeout

    timeout = 6.0
    start = time.monotonic()
    named = r"Rank 2 stopped beating \(127\.0\.0\.1 = rank 2\): stopped \(SIGSTOP, a debugger\) or hung"
    with pytest.raises(WorkerFailed, match=named):
        launch_with_timeout(_stopped_peer_body, 3, timeout=60, collective_timeout=timeout)
    took = time.monotonic() - start
    assert took < 2 * (timeout + 5) + 5, f"the job took {took:.1f} s to end"  # start-up, then tests allow 2x


def _silent_peer_body(rank: int, world_size: int, err_dir: str) -> None:
    import sys

    # What the peer watch writes, read back by the test (a forked worker's stderr is not the test's).
    sys.stderr = open(os.path.join(err_dir, f"rank{rank}.err"), "w", buffering=1)
    _stopped_peer_body(rank, world_size)


def test_a_silent_peer_ends_the_job_within_the_peer_timeout_not_the_collective_timeout(tmp_path):
    """--peer-timeout: a stopped rank's heartbeat stands still; the others end after ~3 s, naming it, while their
    collective would wait 60 s."""
    from graphdist.testing.launch import launch as launch_with_timeout

    start = time.monotonic()
    with pytest.raises(WorkerFailed):
        launch_with_timeout(_silent_peer_body, 3, str(tmp_path), timeout=60, collective_timeout=60, peer_timeout=3.0)
    took = time.monotonic() - start
    said = "".join(p.read_text() for p in tmp_path.glob("rank*.err"))
    assert "rank 2 (127.0.0.1 = rank 2) sent no heartbeat for 3 s (--peer-timeout)" in said, said[-3000:]
    assert took < 30, f"the job took {took:.1f} s to end"  # start-up, ~3 s of silence; 60 s without the watch


def _busy_peer_body(rank: int, world_size: int) -> None:
    from graphdist import comm

    comm.all_reduce(torch.ones(1))
    if rank == 0:
        # Local work with no collective for longer than the timeout, holding the GIL as Python
        # compute does (aggregation between averages): its heartbeat thread must still beat.
        end = time.monotonic() + 8.0
        while time.monotonic() < end:
            sum(range(1000))
        return
    comm.all_reduce(torch.ones(1))


def test_a_busy_peer_is_not_reported_as_stopped():
    from graphdist.testing.launch import launch as launch_with_timeout

    with pytest.raises(WorkerFailed) as failed:
        launch_with_timeout(_busy_peer_body, 2, timeout=60, collective_timeout=4.0)
    message = str(failed.value)
    assert "worker rank 1" in message and "timed out" in message.lower(), message
    assert "stopped beating" not in message, message


def test_backend_error_names_ranks_behind_peer_address(monkeypatch):
    import graphdist.comm.group as group
    from graphdist.comm.collectives import _culprits

    monkeypatch.setattr(group, "_PEER_ADDRESSES", ["10.213.0.1", "10.213.0.1", "10.213.0.2", "10.213.0.2"])
    assert "10.213.0.2 = ranks 2, 3" in _culprits("Read error [10.213.0.2]:41672: Connection timed out")
    assert "peer rank probably died" in _culprits("Connection reset by peer")


def test_local_address_of_interface(monkeypatch):
    from graphdist.comm.group import local_address

    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    assert local_address() == "127.0.0.1"
