"""Batches onto an accelerator without blocking it: copies on a side stream, an event the step waits on.

HyScale-GNN's second prefetch stage. The loader gathers a batch's features into a pinned host
buffer (``sampling.prefetch.BufferRing``) and :meth:`DeviceStager.stage` copies the batch on a
stream of its own, recording an event after the copy. The training step calls :func:`on_device`,
which makes its own stream wait for that event: the GPU orders the two, and no thread ever
synchronises the default stream (which would stall the step the copy was meant to overlap).

Two rules make it safe:

- a pinned buffer is rewritten only after the copy out of it finished: the ring holds each
  slot's last copy event and waits for it before handing the slot out again (the prefetch
  thread waits, never the step);
- memory the side stream allocated is used by the step's stream: :func:`on_device` records
  that stream on every tensor of the batch (``Tensor.record_stream``), so the caching allocator
  does not hand the memory out again while the step still reads it.

The streams are reached through :class:`StreamOps` so that tests check the ordering with fakes
on a CPU-only machine (``tests/sampling/test_staging.py``); :class:`CudaStreams` is the real one.

Example (a CPU target needs no staging: the batch is returned as it is):
    >>> from graphdist.testing import tiny_graph
    >>> from sampling import NeighborSampler
    >>> batch = NeighborSampler(tiny_graph(), [2], seed=0).sample(torch.tensor([0]))
    >>> on_device(batch, torch.device("cpu")) is batch
    True
"""

from __future__ import annotations

from typing import Any, ContextManager, Iterator, Optional, Protocol

import torch
from torch import Tensor

from sampling.base import SampledBatch

__all__ = ["CudaStreams", "DeviceStager", "StreamOps", "on_device", "READY"]

# The key of ``SampledBatch.meta`` that holds a staged batch's copy event.
READY = "ready_event"


class StreamOps(Protocol):
    """What staging needs from a device's streams (``torch.cuda``'s, or a test's fakes)."""

    def side_stream(self, device: torch.device) -> Any:
        """A new stream on ``device`` for copies."""

    def current_stream(self, device: torch.device) -> Any:
        """The calling thread's current stream on ``device`` (the step's)."""

    def use(self, stream: Any) -> ContextManager[Any]:
        """Makes ``stream`` the calling thread's current stream inside the block."""

    def new_event(self) -> Any:
        """An event with ``record(stream)`` and ``synchronize()``; streams have ``wait_event(event)``."""

    def record(self, tensor: Tensor, stream: Any) -> None:
        """Tells the allocator that ``stream`` uses ``tensor`` (``Tensor.record_stream``)."""


class CudaStreams:
    """:class:`StreamOps` over ``torch.cuda``."""

    def side_stream(self, device: torch.device) -> Any:
        return torch.cuda.Stream(device=device)

    def current_stream(self, device: torch.device) -> Any:
        return torch.cuda.current_stream(device)

    def use(self, stream: Any) -> ContextManager[Any]:
        return torch.cuda.stream(stream)

    def new_event(self) -> Any:
        return torch.cuda.Event()

    def record(self, tensor: Tensor, stream: Any) -> None:
        tensor.record_stream(stream)


def _tensors(batch: SampledBatch) -> Iterator[Tensor]:
    for block in batch.blocks:
        yield from (t for t in (block.src, block.dst, block.indptr, block.edge_weight, block.edge_type,
                                block.node_type, block.type_index) if t is not None)
    yield from (t for t in (batch.input_nodes, batch.seed_nodes, batch.x, batch.y) if t is not None)


class DeviceStager:
    """Copies batches to ``device`` on a side stream (``ops``: default the CUDA streams).

    Call :meth:`stage` from the thread that prepares batches; hand the result to the step, which
    calls :func:`on_device` before reading it.

    Args:
        device: the accelerator the step runs on.
        ops: the streams (:class:`CudaStreams` by default; a test passes fakes).
    """

    def __init__(self, device: torch.device, ops: Optional[StreamOps] = None) -> None:
        self.device, self.ops = torch.device(device), ops if ops is not None else CudaStreams()
        self._stream: Optional[Any] = None  # made in the first staging thread (a stream is per device, not thread)

    def side(self) -> ContextManager[Any]:
        """Makes the side stream current: work a sampler does on the device runs there, beside the step."""
        if self._stream is None:
            self._stream = self.ops.side_stream(self.device)
        return self.ops.use(self._stream)

    def stage(self, batch: SampledBatch) -> tuple[SampledBatch, Any]:
        """``batch`` on the device, copied on the side stream, and the event that marks the copy's end.

        The event is also in ``meta[READY]`` of the returned batch (what :func:`on_device` waits for);
        the caller keeps it to know when the host buffers it read may be reused.
        """
        if self._stream is None:
            self._stream = self.ops.side_stream(self.device)
        with self.ops.use(self._stream):
            moved = batch.to(self.device, non_blocking=True)
            event = self.ops.new_event()
            event.record(self._stream)
        moved.meta = {**batch.meta, READY: event}
        return moved, event


def on_device(batch: SampledBatch, device: torch.device, ops: Optional[StreamOps] = None) -> SampledBatch:
    """``batch`` ready for the calling thread's stream on ``device``.

    A staged batch (:meth:`DeviceStager.stage`): the current stream waits for its copy event (the
    GPU orders them; the host does not wait), and every tensor is marked as used by that stream.
    An unstaged one on another device: copied here (blocking). On the device already, or a CPU
    target: as it is.
    """
    event = batch.meta.get(READY)
    if event is None:
        return batch if device.type == "cpu" else batch.to(device)
    ops = ops if ops is not None else CudaStreams()
    stream = ops.current_stream(device)
    stream.wait_event(event)
    for t in _tensors(batch):
        ops.record(t, stream)
    return batch
