"""Point-to-point steps and the thread that runs multi-step allreduce algorithms.

An algorithm built from several dependent steps (halving-doubling, hierarchical) cannot be one
backend call, yet a sync hook must get its handle at once. Each such algorithm therefore owns
an :class:`AlgorithmThread` and a process group of its own: the hook enqueues the whole
algorithm and returns; the thread runs the queue in order. Every rank enqueues the same
algorithms in the same order (backward visits layers in the same order everywhere), and only
that thread uses the group, so the steps match across ranks. The thread waits in the backend
with the GIL released, so the layers below keep computing (DWBP).

The group's timeout bounds every step: a dead or stopped peer fails the step, the handle's
``wait()`` raises a ``CommError`` naming this rank, and later work queued on the thread fails
the same way instead of hanging.

Example:
    >>> import torch
    >>> worker = AlgorithmThread("doc")
    >>> work = worker.submit(lambda: torch.ones(2) * 3)
    >>> work.wait(), work.is_completed(), work.get_future().wait().tolist()
    (True, True, [3.0, 3.0])
"""

from __future__ import annotations

import contextlib
import datetime
import queue
import threading
from concurrent.futures import Future as ConcurrentFuture
from typing import Any, Callable, Iterator, Optional, Sequence

import torch
import torch.distributed as dist

from graphdist.comm.collectives import new_group
from graphdist.comm.group import at_shutdown, group_timeout_s, peer_addresses

# Beyond the group's timeout: a step the backend failed to time out still ends the wait.
_GRACE_S = 5.0


class ThreadWork:
    """Backend-work shape (``wait``, ``is_completed``, ``get_future``) over one queued algorithm run."""

    def __init__(self, done: ConcurrentFuture, timeout_s: Optional[float]) -> None:
        self._done = done
        self._timeout_s = timeout_s

    def wait(self, timeout: Optional[datetime.timedelta] = None) -> bool:
        limit = timeout.total_seconds() if timeout is not None else (
            None if self._timeout_s is None else self._timeout_s + _GRACE_S)
        try:
            self._done.result(limit)
        except TimeoutError:
            raise TimeoutError(f"timed out after {limit:.0f}s waiting for the algorithm's thread") from None
        return True

    def is_completed(self) -> bool:
        return self._done.done()

    def get_future(self) -> torch.futures.Future:
        fut: torch.futures.Future = torch.futures.Future()

        def forward(done: ConcurrentFuture) -> None:
            exc = done.exception()
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(done.result())

        self._done.add_done_callback(forward)
        return fut


class AlgorithmThread:
    """A daemon thread that runs submitted functions one at a time, in submission order.

    Daemon, so that a run ending with a step still blocked on a dead peer does not hang the
    interpreter's exit; the group's timeout ends that step anyway.
    """

    def __init__(self, name: str, timeout_s: Optional[float] = None) -> None:
        self.name = name
        self.timeout_s = timeout_s if timeout_s is not None else group_timeout_s()
        self._queue: "queue.Queue[tuple[Callable[[], Any], ConcurrentFuture]]" = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name=f"graphdist-{name}", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[], Any]) -> ThreadWork:
        done: ConcurrentFuture = ConcurrentFuture()
        self._queue.put((fn, done))
        return ThreadWork(done, self.timeout_s)

    def _loop(self) -> None:
        while True:
            fn, done = self._queue.get()
            try:
                done.set_result(fn())
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits
                done.set_exception(exc)
            # Idle, this frame would keep the last function (and the algorithm and group it closes
            # over) alive for the rest of the process: a group must die with its last user.
            del fn, done


_CHANNELS: dict[str, tuple[Any, "AlgorithmThread"]] = {}


def channel(name: str) -> tuple[Any, AlgorithmThread]:
    """A gloo group and an :class:`AlgorithmThread` of their own for ``name``, made on first use and
    kept until ``comm.shutdown()``: a sync rebuilt every few steps (aggregation's correction steps)
    reuses them instead of creating a group and a thread each time.

    The first call is collective (every rank, same point); later calls are local. Syncs that share
    a channel one after another keep their order on every rank: the thread runs in submission order.
    """
    if name not in _CHANNELS:
        _CHANNELS[name] = (new_group(), AlgorithmThread(name))
    return _CHANNELS[name]


def forget_channels() -> None:
    """Drops the channels of a process group that is being shut down (their daemon threads idle on)."""
    _CHANNELS.clear()


at_shutdown(forget_channels)  # comm.shutdown() drops them: group does not import this module


def exchange_many(ops: Sequence[tuple[torch.Tensor, torch.Tensor, int, int]], group: Any) -> None:
    """Several exchanges at once: each ``(send, recv, peer, tag)`` sends and receives with ``peer``.

    The tags keep two messages to one peer in one batch apart (both sides list them alike).
    """
    # Every receive before any send: a large message sent before its receive is posted waits for
    # it, and the link's two directions then take turns (see alltoall._exchange_rows).
    batch = [dist.P2POp(dist.irecv, into, peer, group, tag) for _, into, peer, tag in ops]
    batch += [dist.P2POp(dist.isend, out.contiguous(), peer, group, tag) for out, _, peer, tag in ops]
    if batch:
        peers = sorted({peer for _, _, peer, _ in ops})
        with _naming("exchange with", peers):
            for work in dist.batch_isend_irecv(batch):
                work.wait()


def send(tensor: torch.Tensor, dst: int, group: Any) -> None:
    with _naming("send to", [dst]):
        dist.send(tensor.contiguous(), dst, group=group)


def recv(tensor: torch.Tensor, src: int, group: Any) -> None:
    with _naming("receive from", [src]):
        dist.recv(tensor, src, group=group)


@contextlib.contextmanager
def _naming(what: str, peers: Sequence[int]) -> Iterator[None]:
    """Re-raises a backend error with the peers and their addresses (``[10.0.0.2]``), which the
    rank-naming error of ``collectives`` turns into "10.0.0.2 = ranks 2, 3"."""
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - a step of an algorithm: say with whom
        addresses = peer_addresses()
        who = ", ".join(f"rank {p}" + (f" at [{addresses[p]}]" if p < len(addresses) else "") for p in peers)
        raise RuntimeError(f"{what} {who} failed: {exc}") from exc


def start_all_reduce_now(tensor: torch.Tensor, group: Any) -> Any:
    """Starts the backend's sum over ``group`` (the leaders' step of the hierarchical algorithm); ``.wait()`` it."""
    return dist.all_reduce(tensor, group=group, async_op=True)


__all__ = ["AlgorithmThread", "ThreadWork", "channel", "forget_channels", "start_all_reduce_now", "exchange_many",
           "recv", "send"]
