"""The prefetch thread's plumbing: host buffers reused across batches, and stop-aware queue waits.

Private to ``sampling.loader``: ``NodeLoader`` hands batches from its producer thread to the
caller through a bounded queue; these helpers never block for longer than a poll interval
without checking the stop event, so an early exit (break, exception) can always join the
thread.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Optional

import torch
from torch import Tensor

# How long the prefetch thread waits on a full queue before re-checking for a stop request.
POLL_S = 0.05

__all__ = ["DONE", "POLL_S", "BufferRing", "Failure", "acquire", "put"]


class Failure:
    """An exception raised in the prefetch thread, re-raised in the caller's."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


DONE = object()  # the producer's end-of-epoch marker


class BufferRing:
    """A few reusable host buffers (pinned when copying to CUDA), grown on demand.

    A buffer a device copy reads from is fenced with the copy's event (:meth:`fence`): taking it
    again waits for that copy to finish (in the thread that takes it, never the step's).
    """

    def __init__(self, slots: int, num_features: int, dtype: torch.dtype, pin: bool) -> None:
        self.buffers: list[Optional[Tensor]] = [None] * slots
        self.fences: list[Any] = [None] * slots
        self.num_features, self.dtype, self.pin = num_features, dtype, pin
        self.next = 0

    def fence(self, event: Any) -> None:
        """The buffer :meth:`take` returned last is read by a copy that ends with ``event``."""
        self.fences[(self.next - 1) % len(self.buffers)] = event

    def take(self, rows: int) -> Tensor:
        slot = self.next
        self.next = (self.next + 1) % len(self.buffers)
        if self.fences[slot] is not None:
            self.fences[slot].synchronize()  # the copy out of this buffer must be done before it is rewritten
            self.fences[slot] = None
        buf = self.buffers[slot]
        if buf is None or buf.shape[0] < rows:
            # 25% headroom: input-node counts vary from batch to batch.
            cap = max(rows + rows // 4, 1)
            buf = torch.empty((cap, self.num_features), dtype=self.dtype, pin_memory=self.pin)
            self.buffers[slot] = buf
        return buf[:rows]


def acquire(semaphore: threading.Semaphore, stop: threading.Event) -> bool:
    """Takes ``semaphore``; False if ``stop`` is set first."""
    while not stop.is_set():
        if semaphore.acquire(timeout=POLL_S):
            return True
    return False


def put(q: queue.Queue, item: Any, stop: threading.Event) -> bool:
    """Puts ``item`` into ``q``; False if ``stop`` is set first."""
    while not stop.is_set():
        try:
            q.put(item, timeout=POLL_S)
            return True
        except queue.Full:
            continue
    return False
