"""Variable-size all-to-all: sizes first, then the payload, with timeouts, clear failures and byte counts.

What the distributed sampler, the feature fetch, SACP's all-gathers, int8 compression and the
full-graph halo exchange move. Like every collective in ``graphdist.comm`` (see
``graphdist.comm.collectives``), a failure names this rank and the operation, and the bytes
this rank sends are counted per tag. Over gloo a large payload goes as point-to-point messages
with every receive posted first (``duplex``), so a link carries both directions at once.

Example (one rank, a real gloo group):
    >>> import torch
    >>> from graphdist.testing import one_rank_group
    >>> with one_rank_group():
    ...     parts = all_to_all_v([torch.arange(3)], tag="doc")
    >>> parts[0].tolist()
    [0, 1, 2]
"""

from __future__ import annotations

import math
import time
from typing import Any, Optional, Sequence

import torch
import torch.distributed as dist

from graphdist.comm.collectives import Group, _backend, _fail, _route, _run, _staged, injection_point
from graphdist.comm.counters import COUNTER, byte_counts  # noqa: F401 - byte_counts: all_to_all_v's example

__all__ = ["all_to_all_v", "all_to_all_v_async", "all_to_all_counts_async", "exchange_rows", "joined_rows",
           "pack_rows", "unpack_rows", "PendingAllToAll", "PendingCounts", "DUPLEX_MIN_BYTES"]


def all_to_all_v(
    inputs: Sequence[torch.Tensor], group: Group = None, tag: str = "other",
    recv_rows: Optional[Sequence[int]] = None, duplex: Optional[bool] = None,
) -> list[torch.Tensor]:
    """Variable-size all-to-all: ``inputs[r]`` goes to rank ``r``; returns what each rank sent here.

    Tensors may have any trailing shape but must agree on it and on dtype across
    ranks. Sizes are exchanged first (one small all-to-all), then the payload: one
    ``all_to_all_single``, or point-to-point messages (``duplex``).

    Args:
        inputs: one tensor per rank (``len(inputs) == world_size``); the entry
            for this rank is copied locally.
        group: process group (default: the default group).
        tag: byte-counter tag.
        recv_rows: rows each rank will send here, when the caller knows them already
            (e.g. fixed-size replies): skips the size exchange, one collective fewer.
        duplex: over gloo, move the payload as point-to-point messages with every receive
            posted first (see :func:`_exchange_rows`: a link then carries both directions at
            once) instead of one ``all_to_all_single`` (less overhead for small messages).
            Must be the same on every rank. None: duplex when this call exchanges the sizes
            and some message reaches ``DUPLEX_MIN_BYTES`` (every rank sees the same counts),
            else not; callers of large exchanges whose sizes they know pass True.

    Returns:
        One tensor per source rank.

    Example (one rank: its own entry comes back; with P ranks, ``out[r]`` is what rank r sent here):
        >>> from graphdist.testing import one_rank_group
        >>> with one_rank_group():
        ...     out = all_to_all_v([torch.arange(4).view(2, 2)], tag="doc")
        ...     sent = byte_counts()["doc"]
        >>> out[0].tolist(), sent  # nothing crossed the network
        ([[0, 1], [2, 3]], 0)
    """
    return all_to_all_v_async(inputs, group, tag, recv_rows, duplex).wait()


class PendingAllToAll:
    """An all-to-all whose payload is in flight; ``wait()`` returns one tensor per source rank."""

    def __init__(self, work: Any, payload: torch.Tensor, out: torch.Tensor, recv_rows: list[int],
                 device: torch.device, tag: str, group: Group, started: float) -> None:
        # The payload must outlive the transfer: held here until wait().
        self._work, self._payload, self._out, self._recv_rows, self._device = work, payload, out, recv_rows, device
        self._tag, self._group, self._started = tag, group, started

    def wait(self) -> list[torch.Tensor]:
        """One tensor per source rank: consecutive views of one receive buffer (see :func:`joined_rows`)."""
        # Time the caller lost: the set-up (staging, launch) plus the wait, not the overlap.
        _timed_wait(self._work, "all_to_all_v", self._tag, self._group, already_s=self._started)
        self._payload = None
        out = self._out if self._out.device == self._device else self._out.to(self._device)
        return list(torch.split(out, self._recv_rows))


def pack_rows(index: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """Rows as one byte table for one message: each row's int64 index (8 bytes), then its values as float32.

    Example:
        >>> index, values = unpack_rows(pack_rows(torch.tensor([7]), torch.tensor([[0.5, 2.0]])), dim=2)
        >>> index.tolist(), values.tolist()
        ([7], [[0.5, 2.0]])
    """
    return torch.cat([index.to(torch.int64).reshape(-1, 1).view(torch.uint8),
                      values.float().contiguous().view(torch.uint8)], dim=1)


def unpack_rows(packed: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(index, float32 values [k, dim])`` from :func:`pack_rows`' byte table (or several joined)."""
    if not packed.shape[0]:  # an empty slice's strides would not view as int64
        return torch.empty(0, dtype=torch.int64), torch.empty((0, dim), dtype=torch.float32)
    return (packed[:, :8].contiguous().view(torch.int64).view(-1),
            packed[:, 8:].contiguous().view(torch.float32).view(-1, dim))


def exchange_rows(index: torch.Tensor, values: torch.Tensor, send_to: Optional[Sequence[int]] = None,
                  group: Group = None, tag: str = "other") -> tuple[torch.Tensor, torch.Tensor]:
    """Sends this rank's rows (an int64 ``index`` and float ``values[k, D]``, one message) to ``send_to``
    (default: every rank); returns every sender's ``(index, values)`` joined in rank order.

    What sparse tables move: their touched rows' gradients and their updated rows. ``D`` must be the same
    on every rank; values travel as float32 and come back in ``values``' dtype and device.

    Example (one rank, a real gloo group):
        >>> from graphdist.testing import one_rank_group
        >>> with one_rank_group():
        ...     index, values = exchange_rows(torch.tensor([4, 1]), torch.tensor([[1.0], [2.0]]), tag="doc")
        >>> index.tolist(), values.view(-1).tolist()
        ([4, 1], [1.0, 2.0])
    """
    size = dist.get_world_size(_route(group, values))
    packed = pack_rows(index, values).cpu()
    targets = range(size) if send_to is None else set(send_to)
    got = torch.cat(all_to_all_v([packed if r in targets else packed[:0] for r in range(size)], group=group, tag=tag))
    rows, got_values = unpack_rows(got, values.shape[1])
    return rows.to(index.device), got_values.to(values.device, values.dtype)


def joined_rows(parts: Sequence[torch.Tensor]) -> Optional[torch.Tensor]:
    """The one tensor that ``parts`` are consecutive row blocks of (as ``torch.split`` makes them), else None.

    An all-to-all's answers are such views of its receive buffer, and a reply built as one
    gather can be handed over the same way: joining them is then free, where ``torch.cat``
    would copy every byte (430 MB per layer for layer-at-a-time inference's halo on 1M nodes).

    Example:
        >>> x = torch.arange(6).view(3, 2)
        >>> joined_rows(torch.split(x, [1, 2])) is not None, joined_rows([x[2:], x[:2]])
        (True, None)
        >>> joined_rows([torch.empty(0, 2, dtype=x.dtype), x[1:]]).tolist()  # an empty block is skipped
        [[2, 3], [4, 5]]
    """
    if not parts or any(not t.is_contiguous() or t.dim() == 0 or t.shape[1:] != parts[0].shape[1:]
                        or t.dtype != parts[0].dtype for t in parts):
        return None
    # Empty blocks hold no bytes wherever they live (a rank's own, empty entry of a request list
    # is a tensor of its own): only the others must be consecutive in one storage.
    full = [t for t in parts if t.numel()]
    if not full:
        return None
    first = full[0]
    storage, ptr = first.untyped_storage().data_ptr(), first.data_ptr()
    for t in full:
        if t.untyped_storage().data_ptr() != storage or t.data_ptr() != ptr:
            return None
        ptr += t.numel() * t.element_size()
    rows = sum(int(t.shape[0]) for t in full)
    return first.as_strided((rows, *first.shape[1:]), first.stride(), first.storage_offset())


class PendingCounts:
    """The size exchange of an all-to-all in flight; ``wait()`` returns the rows each rank sends here.

    Every rank receives every rank's whole row-count vector (P*P integers, negligible next to a
    payload), so after ``wait()`` the ``matrix`` (``matrix[s, d]``: rows rank s sends to rank d) is
    the same on every rank: a decision taken from it (skip an exchange nobody sends in) is taken
    alike everywhere, which a rank's own counts alone cannot guarantee.
    """

    def __init__(self, work: Any, counts_out: torch.Tensor, counts_in: torch.Tensor, tag: str, group: Group) -> None:
        self._work, self._counts_out, self._counts_in, self._tag, self._group = work, counts_out, counts_in, tag, group
        self.matrix: Optional[torch.Tensor] = None

    def wait(self) -> list[int]:
        _timed_wait(self._work, "all_to_all_v(sizes)", self._tag, self._group)
        size = dist.get_world_size(self._group)
        self.matrix = self._counts_in.view(size, size).cpu()
        return self.matrix[:, dist.get_rank(self._group)].tolist()


def _timed_wait(work: Any, op: str, tag: str, group: Group, already_s: float = 0.0) -> None:
    """Waits for backend work, adding the wait (plus ``already_s``) to ``tag``'s time; errors name the rank."""
    t0 = time.perf_counter()
    try:
        work.wait()
    except Exception as exc:  # noqa: BLE001
        raise _fail(op, exc, group) from exc
    finally:
        COUNTER.add_time(tag, already_s + time.perf_counter() - t0)


def all_to_all_counts_async(send_rows: Sequence[int], group: Group = None, tag: str = "other") -> PendingCounts:
    """Starts the size exchange of a variable-size all-to-all and returns at once.

    Lets a caller overlap the exchange with other work (the distributed sampler keeps
    two batches in flight), then hand the result to :func:`all_to_all_v_async` as
    ``recv_rows``. Every rank must call it at the same point of its collective sequence.

    Args:
        send_rows: rows this rank will send to each rank (``len == world_size``).
        group: process group; must be the one the payload goes over.
        tag: time-counter tag.

    Example:
        >>> from graphdist.testing import one_rank_group
        >>> with one_rank_group():
        ...     requests = [torch.tensor([7, 8, 9])]
        ...     sizes = all_to_all_counts_async([len(r) for r in requests])  # ...other work here...
        ...     answers = all_to_all_v_async(requests, recv_rows=sizes.wait()).wait()
        >>> answers[0].tolist()
        [7, 8, 9]
    """
    group = _route(group)
    size = dist.get_world_size(group)
    if len(send_rows) != size:
        raise ValueError(f"all_to_all_v: expected one row count per rank ({size}) (got {len(send_rows)})")
    # NCCL moves device tensors only; gloo host tensors.
    device = torch.device("cuda", torch.cuda.current_device()) if _backend(group) == "nccl" else torch.device("cpu")
    # Each rank's whole vector to every rank (see PendingCounts.matrix).
    counts_out = torch.tensor([int(r) for r in send_rows] * size, dtype=torch.int64, device=device)
    counts_in = torch.empty_like(counts_out)
    work = _run("all_to_all_v(sizes)", group,
                lambda: dist.all_to_all_single(counts_in, counts_out, group=group, async_op=True))
    return PendingCounts(work, counts_out, counts_in, tag, group)


def all_to_all_v_async(
    inputs: Sequence[torch.Tensor], group: Group = None, tag: str = "other",
    recv_rows: Optional[Sequence[int]] = None, duplex: Optional[bool] = None,
) -> PendingAllToAll:
    """:func:`all_to_all_v` that returns once the payload is in flight (the size exchange, if
    any, is done first), so the caller can compute while the data moves. Inputs that are
    consecutive row blocks of one tensor (:func:`joined_rows`) are sent from it without a copy:
    leave them unmodified until ``wait()``.

    Example:
        >>> from graphdist.testing import one_rank_group
        >>> with one_rank_group():
        ...     pending = all_to_all_v_async([torch.ones(2, 3)])
        ...     busy = sum(range(1000))  # work on own nodes while the payload travels
        ...     asked = pending.wait()
        >>> asked[0].shape
        torch.Size([2, 3])
    """
    injection_point(f"exchange:{tag}")
    group = _route(group, inputs[0] if inputs else None)
    size = dist.get_world_size(group)
    if len(inputs) != size:
        raise ValueError(f"all_to_all_v: expected one tensor per rank ({size}) (got {len(inputs)})")
    trailing = tuple(inputs[0].shape[1:])
    dtype, device = inputs[0].dtype, inputs[0].device
    send_rows = [int(t.shape[0]) for t in inputs]
    row_bytes = int(torch.tensor([], dtype=dtype).element_size() * max(1, math.prod(trailing)))
    if recv_rows is None:
        sizes = all_to_all_counts_async(send_rows, group, tag)
        recv_rows = sizes.wait()
        if duplex is None:
            duplex = int(sizes.matrix.max()) * row_bytes >= DUPLEX_MIN_BYTES  # type: ignore[union-attr]
    else:
        recv_rows = [int(r) for r in recv_rows]
        if len(recv_rows) != size:
            raise ValueError(f"all_to_all_v: expected recv_rows for each of {size} ranks (got {len(recv_rows)})")
    t0 = time.perf_counter()
    payload = joined_rows(inputs)
    if payload is None:
        payload = torch.cat([t.reshape(-1, *trailing) for t in inputs]) if inputs else torch.empty(0)
    me = dist.get_rank(group)
    COUNTER.add(tag, row_bytes * (sum(send_rows) - send_rows[me]))
    by_p2p = bool(duplex) and _backend(group) == "gloo"  # point-to-point: gloo needs host memory
    staged = _staged(payload, group, gloo_takes_cuda=not by_p2p).contiguous()
    out = torch.empty((sum(recv_rows), *trailing), dtype=dtype, device=staged.device)
    if by_p2p:
        work = _run("all_to_all_v", group, lambda: _exchange_rows(out, staged, send_rows, recv_rows, me, group))
    else:
        work = _run(
            "all_to_all_v",
            group,
            lambda: dist.all_to_all_single(
                out, staged, output_split_sizes=recv_rows, input_split_sizes=send_rows, group=group, async_op=True
            ),
        )
    return PendingAllToAll(work, staged, out, recv_rows, device, tag, group, time.perf_counter() - t0)


# Point-to-point messages of all_to_all_v (apart from other point-to-point users of a group).
EXCHANGE_TAG = 0xA2A
# From this message size on, gloo's all_to_all_single stops using both directions of a link at
# once (64 KiB each way still ran at the link's rate on the emulated 100 Mbit/s link, 128 KiB did
# not); below it, its one collective costs less than point-to-point messages: the distributed
# sampler's exchanges ran 17% slower one batch at a time as point-to-point messages.
DUPLEX_MIN_BYTES = 64 * 1024


class _Works:
    """Several backend works waited as one (an all-to-all made of point-to-point messages)."""

    def __init__(self, works: list[Any]) -> None:
        self.works = works

    def wait(self) -> bool:
        for work in self.works:
            work.wait()
        return True

    def is_completed(self) -> bool:
        return all(work.is_completed() for work in self.works)


def _exchange_rows(out: torch.Tensor, payload: torch.Tensor, send_rows: Sequence[int], recv_rows: Sequence[int],
                   me: int, group: Group) -> _Works:
    """The gloo all-to-all with every receive posted before any send; the own block is copied here.

    gloo's ``all_to_all_single`` posts each send before its receive, and a message larger than
    the receiver's socket buffer then waits until the receive is posted, so the two directions
    of a link take turns: on the emulated 100 Mbit/s link a 9.35 MB exchange between two hosts
    took 777 ms in 5 of 7 tries (6.0 MB/s each way) against 397 ms (11.8 MB/s, the link's rate)
    with receives first (``bench/bench_comm.py --algorithms alltoall``). Empty messages are not
    sent: both ends know the size (the count exchange), so both skip it.
    """
    size = len(send_rows)
    outs = torch.split(out, list(recv_rows))
    ins = torch.split(payload, list(send_rows))
    works = [dist.irecv(outs[src], group=group, tag=EXCHANGE_TAG, group_src=src)
             for src in ((me - k) % size for k in range(1, size)) if recv_rows[src]]
    works += [dist.isend(ins[dst], group=group, tag=EXCHANGE_TAG, group_dst=dst)
              for dst in ((me + k) % size for k in range(1, size)) if send_rows[dst]]
    if recv_rows[me]:
        outs[me].copy_(ins[me])
    return _Works(works)
