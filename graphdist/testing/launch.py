"""Run a function on ``world_size`` spawned processes joined over gloo.

Each child joins a process group through ``file://`` in a fresh temporary
directory (no free-port race), runs ``fn(rank, world_size, *args)`` and leaves
the group. A failure in any child fails the caller with that child's traceback;
a child still running at the deadline is killed and the error names it.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Optional, Any, Callable, Iterator, Sequence

from graphdist.launch import WorkerFailed, WorkerTimeout, spawn

__all__ = ["WorkerFailed", "WorkerTimeout", "launch", "one_rank_group"]


def _child(
    rank: int,
    fn: Callable[..., Any],
    world_size: int,
    init_file: str,
    backend: str,
    timeout_s: float,
    args: Sequence[Any],
    peer_timeout_s: float = 0.0,
) -> None:
    # Set before torch.distributed makes any socket: loopback only in tests.
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    from graphdist import comm
    from graphdist.plugins import load_plugins_from_environment

    load_plugins_from_environment()  # a body that builds a strategy itself gets the test hooks worker_main would
    comm.init_process_group(rank, world_size, f"file://{init_file}", backend=backend, timeout_s=timeout_s,
                            peer_timeout_s=peer_timeout_s)
    try:
        fn(rank, world_size, *args)
    finally:
        comm.shutdown()


def launch(
    fn: Callable[..., Any],
    world_size: int = 2,
    *args: Any,
    backend: str = "gloo",
    timeout: float = 60.0,
    collective_timeout: Optional[float] = None,
    peer_timeout: float = 0.0,
) -> None:
    """Runs ``fn(rank, world_size, *args)`` in ``world_size`` spawned processes.

    ``fn`` must be importable by the children (a module-level function).

    Args:
        fn: the worker body.
        world_size: number of processes (default 2).
        *args: extra arguments passed to ``fn`` (picklable).
        backend: process-group backend (default ``gloo``).
        timeout: seconds before the whole launch is killed (default 60; tests pass a few).
        collective_timeout: seconds before a collective fails (default ``timeout``).
        peer_timeout: seconds a silent peer's heartbeat is waited for before a rank ends (0: never, the default).

    Raises:
        WorkerFailed: a worker raised or exited non-zero (its rank and traceback in the message).
        WorkerTimeout: a worker was still running after ``timeout`` seconds.

    Example:
        A function defined in a session cannot be pickled for the children; a builtin can.
        ``math.log(rank, world_size)`` runs on both ranks and fails on rank 0 (``log(0)``):

        >>> import math
        >>> launch(math.log, 2, timeout=30)
        Traceback (most recent call last):
        ...
        graphdist.launch.WorkerFailed: worker rank 0 raised:
        ...ValueError: math domain error...
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1 (got {world_size})")
    with tempfile.TemporaryDirectory(prefix="graphdist-launch-") as tmp:
        init_file = os.path.join(tmp, "store")
        spawn(_child, world_size, args=(fn, world_size, init_file, backend, collective_timeout or timeout, args,
                                        peer_timeout), timeout=timeout)


@contextlib.contextmanager
def one_rank_group(timeout_s: float = 30.0) -> Iterator[None]:
    """A real one-rank gloo process group in this process (``file://`` init), left on exit.

    For examples and tests of collectives that need no peers. Inside an existing group it
    does nothing.

    Example:
        >>> import torch
        >>> from graphdist import comm
        >>> with one_rank_group():
        ...     comm.get_world_size(), comm.all_reduce(torch.ones(1)).item()
        (1, 1.0)
        >>> comm.is_initialized()
        False
    """
    from graphdist import comm

    if comm.is_initialized():
        yield
        return
    saved = os.environ.get("GLOO_SOCKET_IFNAME")
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    try:
        with tempfile.TemporaryDirectory(prefix="graphdist-one-rank-") as tmp:
            comm.init_process_group(0, 1, f"file://{os.path.join(tmp, 'store')}", timeout_s=timeout_s)
            try:
                yield
            finally:
                comm.shutdown()
    finally:
        if saved is None:
            os.environ.pop("GLOO_SOCKET_IFNAME", None)
        else:
            os.environ["GLOO_SOCKET_IFNAME"] = saved
