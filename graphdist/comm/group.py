"""Process-group set-up, teardown and role helpers."""

from __future__ import annotations

import datetime
import gc
import logging
import os
import socket
from typing import Any, Callable, Optional

import torch.distributed as dist

from graphdist.comm.heartbeat import STORE_TIMEOUT_S, PeerWatch, within
from graphdist.comm.heartbeat import start as start_heartbeat
from graphdist.comm.heartbeat import stop as stop_heartbeat
from graphdist.plugins import call as call_hook

logger = logging.getLogger(__name__)

# Under NCCL the default group only takes CUDA tensors; counts, metadata and the
# sampler's CPU traffic go through this gloo group over the same ranks instead.
_CPU_GROUP: Optional[object] = None
_PEER_ADDRESSES: list[str] = []
_TIMEOUT_S: Optional[float] = None  # the default group's, for the groups graphdist creates later


class CommError(RuntimeError):
    """A collective failed or timed out; the message names the rank and the operation."""


def init_process_group(
    rank: int,
    world_size: int,
    init_method: Optional[str] = None,
    backend: str = "gloo",
    timeout_s: float = 120.0,
    peer_timeout_s: float = 0.0,
) -> None:
    """Joins (or creates) the default process group.

    Args:
        rank: this process's rank in ``[0, world_size)``.
        world_size: number of processes.
        init_method: ``file://...`` or ``tcp://host:port``; default ``env://``
            (``MASTER_ADDR``/``MASTER_PORT``, as torchrun sets them).
        backend: ``gloo`` (CPU, or mixed CPU/GPU) or ``nccl`` (every rank has a GPU).
        timeout_s: every collective of this group fails after this many seconds
            instead of hanging.
        peer_timeout_s: a peer whose heartbeat stands still this long ends this rank at once, naming
            it (``heartbeat.PeerWatch``: a host that died without closing its sockets); 0: never.

    Raises:
        ValueError: on a rank outside ``[0, world_size)`` or an unknown backend.
        CommError: if the rendezvous does not complete within ``timeout_s``.
    """
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank must lie in [0, world_size) (got rank={rank}, world_size={world_size})")
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend must be 'gloo' or 'nccl' (got {backend!r})")
    if dist.is_initialized():
        return
    where = init_method or "env://"
    timeout = datetime.timedelta(seconds=timeout_s)
    try:
        # The rendezvous by hand (what init_process_group does inside), so that each rank can sign in
        # to the store first: a join that times out then names the ranks that never came.
        store, rank, world_size = next(dist.rendezvous(where, rank, world_size, timeout=timeout))
        store.set_timeout(timeout)
    except Exception as exc:  # noqa: BLE001 - turn any rendezvous failure into one clear error
        served = "" if where.startswith("file://") else " (rank 0, or torchrun's agent, serves it)"
        raise CommError(
            f"[rank {rank}] could not reach the job's store at {where}{served} within {timeout_s:.0f}s: {exc}"
        ) from exc
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    if attempt is not None and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        # torchrun's one agent store, for the whole job: a prefix per formation. Under
        # TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 each formation's rank 0 serves a store of its own (a new
        # port every round), and the agents' restart counts differ once a host joins: no prefix.
        store = dist.PrefixStore(formation_prefix(store, int(attempt), world_size), store)
    store.set(f"{JOINED}{rank}", "1")
    _import_group_defaults()
    _free_groups_at_exit()
    try:
        dist.init_process_group(backend=backend, store=store, rank=rank, world_size=world_size, timeout=timeout)
    except Exception as exc:  # noqa: BLE001 - turn any rendezvous failure into one clear error
        raise CommError(
            f"[rank {rank}] could not join the process group of {world_size} via {where} within "
            f"{timeout_s:.0f}s{_missing_ranks(store, world_size)}: {exc}"
        ) from exc
    global _CPU_GROUP, _PEER_ADDRESSES, _TIMEOUT_S
    _TIMEOUT_S = float(timeout_s)
    if backend == "nccl":
        _CPU_GROUP = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=timeout_s))
    # Every rank's address, so that a later "[10.0.0.2]:41672 connection timed out" from gloo
    # can be reported as the ranks behind that address.
    gathered: list[Optional[str]] = [None] * world_size
    dist.all_gather_object(gathered, local_address(), group=_CPU_GROUP)
    _PEER_ADDRESSES = [str(a) for a in gathered]
    if world_size > 1:  # so that a timeout can name a stopped peer, and a silent one ends the job sooner
        watch = PeerWatch(rank, world_size, peer_timeout_s, _end_for_silent_peer) if peer_timeout_s > 0 else None
        start_heartbeat(rank, watch=watch)


def _end_for_silent_peer(silent: list[int], seconds: float) -> None:
    """``PeerWatch``'s verdict: one line naming the silent peer (or the store), then this process ends at
    once (its main thread may be blocked in a collective for ``--timeout``). Checkpoints are written
    atomically: the last complete one stays."""
    import sys

    rank = dist.get_rank() if dist.is_initialized() else -1
    if silent:
        where = describe_addresses(silent)
        what = (f"rank{'s' if len(silent) > 1 else ''} {', '.join(map(str, silent))}{f' ({where})' if where else ''} "
                f"sent no heartbeat for {seconds:.0f} s (--peer-timeout): its host died or lost its link, or the "
                "process is stopped")
    else:
        what = (f"the job's store answered no heartbeat for {seconds:.0f} s (--peer-timeout): the host serving it "
                "(torchrun's rendezvous host, or rank 0) is gone")
    sys.stderr.write(f"graphdist-train: error: [rank {rank}] {what}; ending this rank so that the job can be formed "
                     "again (torchrun --max-restarts) or resumed (--resume)\n")
    sys.stderr.flush()
    sys.stdout.flush()
    try:
        call_hook("before_exit")  # a checkpoint being written is finished first (bounded)
    finally:
        os._exit(1)


JOINED = "graphdist-joined/"


def formation_prefix(store: Any, attempt: int, world_size: int) -> str:
    """The store prefix of this formation of a torchrun job: ``graphdist/attempt-R/world-W/formation-F``.

    torchrun keeps one agent store (same address, same keys) for the whole job: across restarts
    (``--max-restarts``: the restart count ``R`` grows) and across membership changes of a
    ``--nnodes MIN:MAX`` job (``R`` stays). Without a prefix per formation a rank reads gloo's
    addresses, the join marks and the heartbeats of a formation that is gone. The formations
    that share ``R`` and ``W`` follow one another, each with every rank joining once, so the
    ``F``-th one's ranks draw tickets ``F*W+1 .. (F+1)*W`` from one counter.

    Example:
        >>> import torch.distributed as dist
        >>> store = dist.HashStore()
        >>> [formation_prefix(store, 0, 2) for _ in range(3)]
        ['graphdist/attempt-0/world-2/formation-0', 'graphdist/attempt-0/world-2/formation-0', \
'graphdist/attempt-0/world-2/formation-1']
    """
    ticket = int(store.add(f"graphdist/tickets/attempt-{attempt}/world-{world_size}", 1))
    return f"graphdist/attempt-{attempt}/world-{world_size}/formation-{(ticket - 1) // world_size}"


def _import_group_defaults() -> None:
    """Imports, before the default group exists, the torch modules that take it as a default argument.

    ``torch.distributed.nn.functional`` writes ``group=group.WORLD`` in its signatures, so importing
    it once the group exists (``torch.optim`` does, through ``torch._dynamo``, when a trainer builds
    its optimizer) keeps the group alive for the rest of the process. Its gloo worker threads then
    outlive :func:`shutdown` into the interpreter's finalisation, and one that is still releasing a
    finished collective's tensors aborts the process there ("terminate called without an active
    exception"): it needs the GIL, and a finalising interpreter ends any thread that asks for it.
    Imported first, the defaults are ``None`` (the default group, looked up at each call).
    """
    import torch.distributed.nn.functional  # noqa: F401


_EXIT_HOOKED = False


def _free_groups_at_exit() -> None:
    """Registers :func:`_collect_live_groups` to run at exit (atexit handlers run before finalisation)."""
    global _EXIT_HOOKED
    if not _EXIT_HOOKED:
        import atexit

        atexit.register(_collect_live_groups)
        _EXIT_HOOKED = True


def _collect_live_groups() -> None:
    """Frees the groups still alive at exit, kept only by reference cycles (a strategy dropped after
    :func:`shutdown`, its sampling group inside): destroyed now, their worker threads are joined
    while they can still take the GIL. A full collection costs ~0.2 s once torch._dynamo is loaded,
    so it runs only while gloo threads are left (or where their names cannot be read)."""
    if _gloo_threads() != 0:
        gc.collect()


def _gloo_threads() -> Optional[int]:
    """How many of this process's threads are gloo's (by the names torch gives them); None off Linux."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    count = 0
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                count += f.read().startswith(("pt_gloo", "gloo"))
        except OSError:  # the thread ended meanwhile
            continue
    return count


def _missing_ranks(store: Any, world_size: int) -> str:
    """``; rank 2 never joined (...)`` for the ranks that did not sign in to ``store``, else ''."""
    try:
        store.set_timeout(datetime.timedelta(seconds=STORE_TIMEOUT_S))
        missing = within(lambda: [r for r in range(world_size) if not store.check([f"{JOINED}{r}"])],
                         STORE_TIMEOUT_S)
    except Exception:  # noqa: BLE001 - the store is gone too: say nothing more
        return ""
    if not missing:
        return ""
    who = ", ".join(map(str, missing))
    return (f"; rank{'s' if len(missing) > 1 else ''} {who} never joined (not started, stopped or crashed "
            f"before joining)")


def local_address() -> str:
    """This process's address as peers see it: the IPv4 of ``GLOO_SOCKET_IFNAME``, else the hostname's."""
    iface = os.environ.get("GLOO_SOCKET_IFNAME", "").split(",")[0]
    if iface:
        try:
            import fcntl
            import struct

            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                siocgifaddr = 0x8915
                packed = fcntl.ioctl(s.fileno(), siocgifaddr, struct.pack("256s", iface[:15].encode()))
                return socket.inet_ntoa(packed[20:24])
        except OSError:
            pass
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return socket.gethostname()


def ranks_at(address: str) -> list[int]:
    """The ranks whose address is ``address`` (empty before the group is set up).

    Example:
        >>> ranks_at("192.0.2.1")
        []
    """
    return [r for r, a in enumerate(_PEER_ADDRESSES) if a == address]


def describe_addresses(ranks: list[int]) -> str:
    """``"10.0.0.2 = ranks 2, 3"`` for the hosts of ``ranks`` ('' before the group is set up).

    Example:
        >>> describe_addresses([2, 3])  # no group: addresses unknown
        ''
    """
    by_address: dict[str, list[int]] = {}
    for r in ranks:
        if r < len(_PEER_ADDRESSES):
            by_address.setdefault(_PEER_ADDRESSES[r], []).append(r)
    return "; ".join(f"{a} = rank{'s' if len(rs) > 1 else ''} {', '.join(map(str, rs))}"
                     for a, rs in by_address.items())


def peer_addresses() -> list[str]:
    """Every rank's address, by rank (empty before the group is set up)."""
    return list(_PEER_ADDRESSES)


def cpu_group() -> Optional[object]:
    """The gloo group for CPU tensors when the default group is NCCL (None: the default group works)."""
    return _CPU_GROUP


def group_timeout_s() -> Optional[float]:
    """Seconds before a collective of the default group fails (None before the group is set up)."""
    return _TIMEOUT_S


_AT_SHUTDOWN: list[Callable[[], None]] = []


def at_shutdown(fn: Callable[[], None]) -> None:
    """Has every later :func:`shutdown` call ``fn()`` before the group is destroyed (once, however often
    registered): a module above this one drops its state of the group (``p2p``: its channels) without
    ``group`` importing it.
    """
    if fn not in _AT_SHUTDOWN:
        _AT_SHUTDOWN.append(fn)


def shutdown() -> None:
    """Leaves the process group if one is set up."""
    stop_heartbeat()
    for fn in _AT_SHUTDOWN:
        fn()
    global _CPU_GROUP, _PEER_ADDRESSES, _TIMEOUT_S
    _CPU_GROUP, _PEER_ADDRESSES, _TIMEOUT_S = None, [], None
    if dist.is_initialized():
        dist.destroy_process_group()


def is_initialized() -> bool:
    return dist.is_available() and dist.is_initialized()


def get_rank() -> int:
    """This process's rank (0 without a process group)."""
    if is_initialized():
        return dist.get_rank()
    return int(os.environ.get("RANK", 0))


def get_world_size() -> int:
    """The number of processes (1 without a process group)."""
    if is_initialized():
        return dist.get_world_size()
    return int(os.environ.get("WORLD_SIZE", 1))


def is_main_process() -> bool:
    return get_rank() == 0


def barrier() -> None:
    """Waits for every rank; a no-op without a process group."""
    if is_initialized():
        try:
            dist.barrier()
        except Exception as exc:  # noqa: BLE001
            raise CommError(f"[rank {get_rank()}] barrier failed: {exc}") from exc
