"""Bytes sent, calls and seconds spent in collectives, per purpose tag (``grad``, ``feature``...).

Every collective in ``graphdist.comm`` counts what this rank sends by the formula of the
algorithm that moves it; allreduce algorithms also count the share that crosses hosts
(``inter_host``), read from the ``Topology``. Trainers report traffic by purpose from here.

Example:
    >>> c = ByteCounter()
    >>> c.add("grad", 100, inter_host=40); c.add("grad", 50)
    >>> c.snapshot(), c.inter_host_snapshot()
    ({'grad': 150}, {'grad': 40})
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass, field


@dataclass
class ByteCounter:
    """Bytes sent (all, and across hosts), calls, and seconds inside blocking collectives, per tag.

    Thread-safe (the prefetch thread counts too). Seconds are wall time in the
    call, waiting for slower peers included: what the caller lost to the exchange.
    """

    sent: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    inter_host: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    calls: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, tag: str, nbytes: int, inter_host: int = 0) -> None:
        with self._lock:
            self.sent[tag] += int(nbytes)
            self.calls[tag] += 1
            if inter_host:
                self.inter_host[tag] += int(inter_host)

    def add_time(self, tag: str, seconds: float) -> None:
        with self._lock:
            self.seconds[tag] += seconds

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.sent)

    def inter_host_snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.inter_host)

    def calls_snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.calls)

    def time_snapshot(self) -> dict[str, float]:
        with self._lock:
            return dict(self.seconds)

    def reset(self) -> None:
        with self._lock:
            self.sent.clear()
            self.inter_host.clear()
            self.calls.clear()
            self.seconds.clear()

    def take(self) -> dict[str, dict[str, float]]:
        """Everything counted since the last take or reset, and a reset: what a loader process hands its
        worker (:meth:`merge`), so that the worker's records count the bytes its loaders sent.

        Example:
            >>> c = ByteCounter(); c.add("sample", 10)
            >>> moved = c.take(); d = ByteCounter(); d.merge(moved); d.snapshot(), c.snapshot()
            ({'sample': 10}, {})
        """
        with self._lock:
            out = {"sent": dict(self.sent), "inter_host": dict(self.inter_host), "calls": dict(self.calls),
                   "seconds": dict(self.seconds)}
        self.reset()
        return out

    def merge(self, taken: dict[str, dict[str, float]]) -> None:
        """Adds counts another process took (:meth:`take`)."""
        with self._lock:
            for name in ("sent", "inter_host", "calls", "seconds"):
                mine = getattr(self, name)
                for tag, value in taken.get(name, {}).items():
                    mine[tag] += value


COUNTER = ByteCounter()


def byte_counts() -> dict[str, int]:
    """Bytes this rank has sent, per tag, since the last :func:`reset_byte_counts`."""
    return COUNTER.snapshot()


def inter_host_byte_counts() -> dict[str, int]:
    """The part of :func:`byte_counts` that crossed to another host (allreduce traffic), per tag."""
    return COUNTER.inter_host_snapshot()


def time_counts() -> dict[str, float]:
    """Seconds this rank spent inside blocking collectives (all_to_all_v), per tag."""
    return COUNTER.time_snapshot()


def call_counts() -> dict[str, int]:
    """Collectives this rank has started, per tag, since the last :func:`reset_byte_counts`."""
    return COUNTER.calls_snapshot()


def reset_byte_counts() -> None:
    COUNTER.reset()


__all__ = ["COUNTER", "ByteCounter", "byte_counts", "call_counts", "inter_host_byte_counts", "reset_byte_counts",
           "time_counts"]
