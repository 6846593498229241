"""Collectives with timeouts, clear failures and byte counters.

Every collective here:
- fails with :class:`CommError` naming this rank and the operation (a peer that
  died or a link that broke surfaces as an error within the group's timeout,
  never as a hang);
- counts the bytes this rank sends, per tag (``grad``, ``feature``, ``sample``,
  ...), so trainers can report traffic by purpose (``graphdist.comm.counters``);
- stages CUDA tensors through host memory when the group is gloo (mixed
  CPU/GPU clusters run gloo: CPU ranks cannot join NCCL).

Allreduce is not here: each allreduce algorithm (``graphdist.comm.algorithms``) starts its
own work through :func:`start_all_reduce` and counts bytes by its own formula.

Variable-size all-to-alls are in ``graphdist.comm.alltoall``.

Example (one rank, a real gloo group):
    >>> from graphdist.testing import one_rank_group
    >>> with one_rank_group():
    ...     gathered = all_gather_object({"rank": 0})
    >>> gathered
    [{'rank': 0}]
"""

from __future__ import annotations

import datetime
import re
from typing import Any, Callable, Optional, Sequence

import torch
import torch.distributed as dist

from graphdist.comm.counters import COUNTER
from graphdist.comm.group import (CommError, cpu_group, get_rank, get_world_size, group_timeout_s, is_initialized,
                                  describe_addresses, ranks_at)
from graphdist.comm.heartbeat import describe_silent
from graphdist.comm.hostcopy import HostCopy
from graphdist.plugins import call as call_hook

Group = Optional[Any]  # a torch.distributed ProcessGroup, or None for the default group

# ------------------------------------------------------------------ helpers


def _backend(group: Group) -> str:
    return str(dist.get_backend(group))


def backend_name(group: Group = None) -> str:
    """``gloo`` or ``nccl``: the default group's backend ('' without a process group)."""
    return _backend(group) if is_initialized() else ""


def _route(group: Group, tensor: Optional[torch.Tensor] = None) -> Group:
    """The group to use: under an NCCL default group, CPU tensors and objects go over gloo."""
    if group is None and cpu_group() is not None and (tensor is None or not tensor.is_cuda):
        return cpu_group()
    return group


def _staged(tensor: torch.Tensor, group: Group, gloo_takes_cuda: bool = True) -> torch.Tensor:
    """The tensor to hand to the backend.

    gloo runs allreduce, broadcast and all-to-all on CUDA tensors itself, staging them through
    pinned memory on a stream of its own, so this thread does not wait for a copy (a blocking
    ``.cpu()`` here held every DWBP layer's hook for its copy). For the other operations
    (``gloo_takes_cuda=False``: point-to-point) a CUDA tensor is copied to host memory
    (``comm.hostcopy``); NCCL takes it as it is.
    """
    if tensor.is_cuda and _backend(group) == "gloo" and not gloo_takes_cuda:
        return HostCopy(tensor).wait()
    return tensor


def _fail(op: str, exc: BaseException, group: Group = None) -> CommError:
    size = get_world_size() if group is None else dist.get_world_size(group)
    return CommError(f"[rank {get_rank()}] {op} failed in a group of {size} ranks: {exc}. {_culprits(str(exc))}")


# What a backend's error says when a collective failed (a peer died, a link broke, a wait timed out),
# as torch re-raises it from a callback (DDP's reducer runs the comm hook's future inside backward).
_BACKEND_FAILURE = re.compile(r"gloo|NCCL|Connection closed|Connection reset|Timed out|CommError", re.IGNORECASE)


def comm_failure(exc: BaseException, op: str, group: Group = None) -> Optional[CommError]:
    """``exc`` as the ``CommError`` naming this rank and the peer, when it is a backend's failure that
    reached the caller wrapped (torch's autograd engine re-raises a hook's error as a ``RuntimeError``);
    None when it is anything else (a model's own error stays as it is).

    Example:
        >>> comm_failure(ValueError("shapes do not match"), "backward") is None
        True
    """
    if isinstance(exc, CommError):
        return exc
    if not isinstance(exc, RuntimeError) or not _BACKEND_FAILURE.search(str(exc)):
        return None
    return _fail(op, exc, group)


def _silent_peers(message: str) -> str:
    """After a plain timeout (no peer address to blame): the ranks whose heartbeat stopped."""
    if "timed out" not in message.lower():
        return ""
    return describe_silent(get_world_size(), describe_addresses)


def _culprits(message: str) -> str:
    """Names the ranks behind the peer addresses a backend error mentions (gloo: ``[10.0.0.2]:4167``)."""
    ranks = [r for address in dict.fromkeys(re.findall(r"\[([0-9A-Fa-f.:]+)\](?::\d+)?", message))
             for r in ranks_at(address)]
    if ranks:
        return f"Unreachable peer {describe_addresses(ranks)}: that host or its link is down; see its log."
    return _silent_peers(message) or "A peer rank probably died or its link is down; see that rank's log."


def _run(op: str, group: Group, call: Callable[[], Any]) -> Any:
    try:
        return call()
    except CommError:
        raise
    except Exception as exc:  # noqa: BLE001 - every backend error becomes a CommError
        raise _fail(op, exc, group) from exc


# -------------------------------------------------------------- handles


class Handle:
    """An in-flight asynchronous collective. ``wait()`` finishes it and copies back.

    ``future()`` gives the same completion as a ``torch.futures.Future`` of the result
    tensor, the currency of communication hooks (``graphdist.sync.hooks``).

    Example:
        >>> import torch
        >>> from graphdist.testing import one_rank_group
        >>> with one_rank_group():
        ...     h = start_all_reduce(torch.ones(2))
        ...     value = h.future().wait()
        >>> value.tolist(), h.done
        ([1.0, 1.0], True)
    """

    def __init__(self, op: str, work: Any, group: Group, on_done: Optional[Callable[[], None]] = None,
                 result: Optional[torch.Tensor] = None) -> None:
        self.op = op
        self._work = work
        self._group = group
        self._on_done = on_done
        self._result = result
        self.done = False

    def is_completed(self) -> bool:
        return self.done or bool(self._work is None or self._work.is_completed())

    def wait(self, timeout_s: Optional[float] = None) -> Optional[torch.Tensor]:
        """Waits for the backend (within the group's timeout, or ``timeout_s``); returns the result tensor.

        Raises:
            CommError: naming this rank and the operation, if the collective failed or timed out.
        """
        if self.done:
            return self._result
        try:
            if self._work is not None:
                if timeout_s is None:
                    self._work.wait()
                else:
                    self._work.wait(timeout=datetime.timedelta(seconds=timeout_s))
        except Exception as exc:  # noqa: BLE001
            raise _fail(self.op, exc, self._group) from exc
        self._finish()
        return self._result

    def _finish(self) -> None:
        if not self.done:
            if self._on_done is not None:
                self._on_done()
            self.done = True

    def future(self) -> torch.futures.Future:
        """A future of the result tensor, completed by the backend's thread (copy-back included).

        Wait on it with :func:`wait_future`, which turns a backend error into a ``CommError``.
        """
        if self._work is None:
            fut: torch.futures.Future = torch.futures.Future()
            self._finish()
            fut.set_result(self._result)
            return fut

        def completed(backend: torch.futures.Future) -> Optional[torch.Tensor]:
            backend.value()  # re-raises the backend's error, if any
            self._finish()
            return self._result

        return self._work.get_future().then(completed)


def wait_future(future: torch.futures.Future, op: str = "collective", group: Group = None) -> Any:
    """``future.wait()``, with a backend error (a dead peer, a timeout) as a ``CommError`` naming the rank.

    Example:
        >>> import torch
        >>> f = torch.futures.Future(); f.set_result(3)
        >>> wait_future(f)
        3
    """
    try:
        return future.wait()
    except CommError:
        raise
    except Exception as exc:  # noqa: BLE001 - every backend error becomes a CommError
        raise _fail(op, exc, group) from exc


# ------------------------------------------------------------ collectives

REDUCE_OPS = ("sum", "max", "min")


def injection_point(point: str, rank: Optional[int] = None) -> None:
    """A named point where a test may inject a fault: calls the ``fault`` hook of ``graphdist.plugins``.

    ``graphdist.testing.faults`` installs that hook in a worker whose ``GRAPHDIST_TEST_FAULT`` is set;
    with none installed a point costs one dictionary lookup.
    """
    call_hook("fault", point, rank)


# Two gloo ranks reduce a tensor of this size or less by one exchange (``_exchange_all_reduce``).
EXCHANGE_MAX_BYTES = 256 << 10
_REDUCE_FNS = {"sum": torch.add, "max": torch.maximum, "min": torch.minimum}


def start_all_reduce(tensor: torch.Tensor, op: str = "sum", group: Group = None) -> Handle:
    """Starts an in-place all-reduce on the backend and returns at once; counts nothing.

    The building block of the allreduce algorithms (``graphdist.comm.algorithms``), which
    count their bytes by their own formulas; callers use ``comm.all_reduce`` or an algorithm.
    """
    injection_point("allreduce")
    if op not in REDUCE_OPS:
        raise ValueError(f"Expected op one of {REDUCE_OPS} (got {op!r})")
    reduce_op = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}[op]
    group = _route(group, tensor)
    staged = _staged(tensor, group)
    if _by_exchange(staged, group):
        return _exchange_all_reduce(tensor, staged, op, group)
    work = _run("all_reduce", group, lambda: dist.all_reduce(staged, op=reduce_op, group=group, async_op=True))
    on_done = (lambda: tensor.copy_(staged)) if staged is not tensor else None
    return Handle("all_reduce", work, group, on_done, result=tensor)


def _by_exchange(staged: torch.Tensor, group: Group) -> bool:
    """Whether two gloo ranks reduce ``staged`` by one exchange: 3 elements to ``EXCHANGE_MAX_BYTES``.

    gloo's allreduce runs a ring of segmented steps (a reduce-scatter, then an all-gather) with a
    thread hand-off at each. With one core per worker, two gloo ranks took 1.3-1.9 ms to reduce
    64 B to 256 KiB, and 1.1-1.3 ms as one all-to-all: 1.14-1.56x (``bench/bench_small_allreduce.py``).
    gloo's own path stays for 1-2 elements (0.2-0.4 ms there) and for larger tensors, where the ring
    moves the same bytes without the exchange's copies (16 MB: 13 ms, against 51 ms by exchange).
    """
    nbytes = staged.numel() * staged.element_size()
    return (staged.device.type == "cpu" and staged.numel() >= 3 and nbytes <= EXCHANGE_MAX_BYTES
            and staged.dtype != torch.bool and staged.is_contiguous() and _backend(group) == "gloo"
            and dist.get_world_size(group) == 2)


def _exchange_all_reduce(tensor: torch.Tensor, staged: torch.Tensor, op: str, group: Group) -> Handle:
    """An all-reduce over two ranks as one all-to-all: each sends its whole tensor, both reduce the two
    copies in rank order. The ring's bytes (each rank sends the tensor once) in one step, not two.
    Every rank ends with the same values, and with the ring's: ``a + b`` is ``b + a`` in floating point."""
    flat = staged.view(-1)
    send = flat.repeat(2)  # the part for rank 0, then for rank 1: the whole tensor each
    received = torch.empty_like(send)
    work = _run("all_reduce", group, lambda: dist.all_to_all_single(received, send, group=group, async_op=True))

    def reduce() -> None:
        first, second = received.view(2, -1)
        _REDUCE_FNS[op](first, second, out=flat)
        if staged is not tensor:
            tensor.copy_(staged)

    return Handle("all_reduce", work, group, reduce, result=tensor)


def group_size(group: Group = None, tensor: Optional[torch.Tensor] = None) -> int:
    """Ranks in ``group`` (the group a tensor of this kind is routed to)."""
    return dist.get_world_size(_route(group, tensor))


def group_rank(group: Group = None, tensor: Optional[torch.Tensor] = None) -> int:
    """This process's rank within ``group``."""
    return dist.get_rank(_route(group, tensor))


def all_gather_object(obj: Any, group: Group = None) -> list[Any]:
    """Every rank's ``obj``, in rank order (small metadata: pickled)."""
    group = _route(group)
    out: list[Any] = [None] * dist.get_world_size(group)
    _run("all_gather_object", group, lambda: dist.all_gather_object(out, obj, group=group))
    return out


def broadcast_object(obj: Any, src: int = 0, group: Group = None) -> Any:
    """Rank ``src``'s ``obj`` on every rank."""
    group = _route(group)
    box = [obj]
    _run("broadcast_object", group, lambda: dist.broadcast_object_list(box, src=src, group=group))
    return box[0]


def broadcast(tensor: torch.Tensor, src: int = 0, group: Group = None, tag: str = "other") -> torch.Tensor:
    """In-place broadcast from ``src``."""
    group = _route(group, tensor)
    if get_rank() == src:
        COUNTER.add(tag, tensor.numel() * tensor.element_size() * (dist.get_world_size(group) - 1))
    staged = _staged(tensor, group)
    _run("broadcast", group, lambda: dist.broadcast(staged, src=src, group=group))
    if staged is not tensor:
        tensor.copy_(staged)
    return tensor


def new_group(timeout_s: Optional[float] = None, ranks: Optional[Sequence[int]] = None) -> Group:
    """A new gloo group over all ranks, or over ``ranks`` (e.g. for a prefetch thread's collectives).

    ``timeout_s`` defaults to the default group's timeout (torch's own default is 30 minutes).

    Collectives within one group must be issued in the same order on every rank;
    two threads sharing a group cannot promise that, so each thread gets its own.
    Must be called by every rank, in the same order.
    """
    if not is_initialized():
        return None
    # gloo: what runs on these groups (sampling, feature fetch) moves CPU tensors.
    kwargs: dict[str, Any] = {"backend": "gloo"}
    timeout_s = timeout_s if timeout_s is not None else group_timeout_s()
    if timeout_s is not None:
        kwargs["timeout"] = datetime.timedelta(seconds=timeout_s)
    if ranks is not None:
        kwargs["ranks"] = [int(r) for r in ranks]
    return _run("new_group", None, lambda: dist.new_group(**kwargs))
