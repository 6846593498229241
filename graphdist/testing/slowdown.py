"""Test-only emulation of a slow worker: ``GRAPHDIST_TEST_SLOWDOWN="1:2.0"`` (or ``"1:2.0@2"``).

A heterogeneous cluster on one homogeneous machine: rank 1's own work takes 2x as long, from
the start or from epoch 2 (so that the run-time rebalancer, not a start-up profile, has to find
it). "Own work" is the time a thread wanted the CPU: after each unit of work it sleeps
``(factor - 1)`` times what it spent since its last mark running or runnable (its CPU time plus
the run-queue delay Linux records in ``/proc/thread-self/schedstat``; CPU time alone where that
file is missing). Waiting for peers (blocked in a collective) is never stretched, while sampling, serving
other ranks' requests, gathering and computing all are, and so is the time the thread was ready
but another process held the core: with CPU time alone, 2 workers on 2 cores (plus gloo's
threads) made "2.0" a 1.88x slower worker (busy 1.13 s against 0.60 s an epoch at equal shares). The
training thread is stretched before each of its step's waits: when the model's forward returns
(:meth:`Stretch.attach`), after backward (before the wait for the gradient sync) and after the
optimizer step; the prefetch thread after every batch it hands over (the trainer wraps the
sampler with :class:`StretchedSampler`). One sleep per step at its end was not a slower machine: the slow rank's forward and backward ran at full speed, so
with balanced totals each phase between two collectives still waited for a different rank
(measured: 1.24x from rebalancing where the model's bound is 1.5x).

A thread on a core of its own (a worker bound with ``--bind-cores``, an emulated host pinned to
one core) holds the core for its stretch instead of sleeping, and its queueing behind its own
sibling threads is not counted (their ticks stretch that work). A sleep there lets the sibling
run through the stretch: two busy Python threads on one core took 1.66x their work for "2.0"
with sleeps, 2.03x spinning (the test in tests/trainers/test_rebalance.py). In training the
loader and the trainer overlap less: on ``bench/bench_simulator.py`` the bound slow worker's step
read 2.2x its CPU time (its gradient wait included) with either rule.

Nothing here is used unless the variable is set; it exists so tests and ``bench/bench_placement.py``
can make one worker slower on purpose. The trainers do not import it: a worker whose variable is set
installs :func:`stretch_for_rank` as the ``slowdown`` hook of ``graphdist.plugins`` on entry
(``load_plugins_from_environment``, which calls :func:`install`), and the minibatch trainer asks that
hook for its rank's :class:`Stretch`.

Example:
    >>> parse_slowdown("1:2.0@2, 3:1.5")
    {1: Slowdown(rank=1, factor=2.0, from_epoch=2), 3: Slowdown(rank=3, factor=1.5, from_epoch=1)}
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Optional

from graphdist.launch import usable_cores
from graphdist.plugins import install as install_hook
from sampling.base import SampledBatch, Sampler

ENV = "GRAPHDIST_TEST_SLOWDOWN"

__all__ = ["ENV", "Slowdown", "Stretch", "StretchedSampler", "install", "on_one_core", "parse_slowdown",
           "stretch_for_rank", "wanted_cpu_clock"]


@dataclass(frozen=True)
class Slowdown:
    """Rank ``rank`` works ``factor`` times slower from epoch ``from_epoch`` (1-based) on."""

    rank: int
    factor: float
    from_epoch: int = 1


def parse_slowdown(spec: str) -> dict[int, Slowdown]:
    """``"RANK:FACTOR[@EPOCH],..."`` -> per rank its slowdown.

    Raises:
        ValueError: a malformed entry, naming the variable and the entry.
    """
    out: dict[int, Slowdown] = {}
    for entry in (e.strip() for e in spec.split(",")):
        if not entry:
            continue
        try:
            rank_s, rest = entry.split(":", 1)
            factor_s, _, epoch_s = rest.partition("@")
            item = Slowdown(int(rank_s), float(factor_s), int(epoch_s) if epoch_s else 1)
        except ValueError:
            raise ValueError(f"{ENV}: expected RANK:FACTOR[@EPOCH] entries like 1:2.0@2 (got {entry!r})") from None
        if item.rank < 0 or item.factor < 1.0 or item.from_epoch < 1:
            raise ValueError(f"{ENV}: expected rank >= 0, factor >= 1 and epoch >= 1 (got {entry!r})")
        out[item.rank] = item
    return out


_SCHEDSTAT = "/proc/thread-self/schedstat"


def _queued_schedstat() -> float:
    # The file's on-CPU field is only brought up to date at scheduler events (it can lag a running
    # thread by a tick); its run-queue delay is final whenever the thread runs, as it does here.
    with open(_SCHEDSTAT, "rb") as f:
        return int(f.read().split()[1]) * 1e-9


def _no_queue() -> float:
    return 0.0


def _queue_clock() -> Callable[[], float]:
    """This thread's seconds ready to run but not running (schedstat), or a clock that stays 0 without it."""
    try:
        _queued_schedstat()
    except (OSError, ValueError):
        return _no_queue
    return _queued_schedstat


def wanted_cpu_clock() -> Callable[[], float]:
    """This thread's seconds running or ready to run (schedstat), else its CPU time (``time.thread_time``).

    Example:
        >>> clock = wanted_cpu_clock()
        >>> t0 = clock(); _ = sum(i * i for i in range(100_000)); clock() > t0
        True
    """
    queued = _queue_clock()
    if queued is _no_queue:
        return time.thread_time
    return lambda: time.thread_time() + queued()


def on_one_core() -> bool:
    """Whether the calling thread may run on one core only (a bound worker, a pinned emulated host).

    Example:
        >>> isinstance(on_one_core(), bool)
        True
    """
    return len(usable_cores()) == 1


def _spin(seconds: float) -> None:
    """Holds the core for ``seconds`` of this thread's CPU time."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


class Stretch:
    """Makes the calling thread's work since its last mark take ``factor`` x as long; off before ``from_epoch``.

    Where the thread may use several cores it sleeps ``(factor - 1)`` x its work (``slept_s``).
    On a core of its own (a bound worker, a pinned emulated host) it holds the core instead, by
    spinning for that much CPU time, as a slower core would: a sleep there would hand the core to
    the worker's other threads (its loader, gloo's), so the stretched work would overlap theirs
    and the worker would be less than ``factor`` x slower. Time the thread queued behind those
    siblings is their work, stretched by their own ticks: only the rest of its queueing (another
    process on its core) counts as its own there.

    Example:
        >>> s = Stretch(Slowdown(0, 3.0))
        >>> s.set_epoch(1); s.mark()
        >>> _ = sum(i * i for i in range(200_000))
        >>> s.tick()
        >>> s.extra_s > 0
        True
    """

    def __init__(self, slowdown: Slowdown) -> None:
        self.slowdown = slowdown
        self.active = False
        self.slept_s = 0.0  # emulated extra work spent asleep: not in CPU time (the rebalancer adds it)
        self.spun_s = 0.0  # emulated extra work spun on a core of its own: in CPU time already
        self._local = threading.local()
        self._lock = threading.Lock()
        self._queued = _queue_clock()

    @property
    def extra_s(self) -> float:
        """All emulated extra work, slept or spun."""
        return self.slept_s + self.spun_s

    def set_epoch(self, epoch: int) -> None:
        self.active = epoch >= self.slowdown.from_epoch

    def _read(self) -> tuple[float, float, float]:
        return time.thread_time(), self._queued(), time.process_time()

    def mark(self) -> None:
        """Starts this thread's clock (e.g. at the start of an epoch: earlier work is not stretched)."""
        self._local.last = self._read()

    def tick(self) -> None:
        """Stretches this thread's work since its last mark or tick."""
        now = self._read()
        cpu, queued, process = (a - b for a, b in zip(now, getattr(self._local, "last", now)))
        one_core = on_one_core()
        if one_core:  # queued behind its own siblings: their work, which their ticks stretch
            queued = max(0.0, queued - (process - cpu))
        extra = (self.slowdown.factor - 1.0) * (cpu + queued)
        if self.active and extra > 0:
            if one_core:
                _spin(extra)
            else:
                time.sleep(extra)
            with self._lock:
                if one_core:
                    self.spun_s += extra
                else:
                    self.slept_s += extra
        self._local.last = self._read()

    def attach(self, model: Any) -> Any:
        """Ticks whenever ``model``'s training forward returns (before any hook that starts a collective).

        Under ``--sacp`` the step's row counts are all-reduced when the forward returns: without
        this tick the slow rank's forward ran at full speed and it waited there for the fast rank.
        Returns the hook's handle.
        """
        def on_forward(module: Any, _inputs: Any, _output: Any) -> None:
            if module.training:
                self.tick()

        return model.register_forward_hook(on_forward, prepend=True)

    def wrap_sampler(self, sampler: Sampler) -> "StretchedSampler":
        """``sampler`` ticking this stretch after every batch it hands over (:class:`StretchedSampler`)."""
        return StretchedSampler(sampler, self)


class StretchedSampler(Sampler):
    """A sampler whose stream ticks a :class:`Stretch` after every batch (sampling, serving, gather).

    The loader gathers batch t's features between handing it over and asking for batch t+1, so
    the tick before batch t+1 counts that gather too.
    """

    def __init__(self, inner: Sampler, stretch: Stretch) -> None:
        self.inner, self.stretch = inner, stretch

    def sample(self, seeds: Any) -> SampledBatch:
        self.stretch.mark()
        batch = self.inner.sample(seeds)
        self.stretch.tick()
        return batch

    @property
    def lookahead(self) -> int:
        return self.inner.lookahead

    def sample_stream(self, seed_batches: Iterable[Any]) -> Iterator[SampledBatch]:
        self.stretch.mark()
        for batch in self.inner.sample_stream(seed_batches):
            self.stretch.tick()
            yield batch

    def get_state(self) -> Any:
        return self.inner.get_state()

    def set_state(self, state: Any) -> None:
        self.inner.set_state(state)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def stretch_for_rank(rank: int, environ: Optional[dict[str, str]] = None) -> Optional[Stretch]:
    """This rank's :class:`Stretch` when ``GRAPHDIST_TEST_SLOWDOWN`` names it, else None."""
    spec = (environ if environ is not None else os.environ).get(ENV, "")
    entry = parse_slowdown(spec).get(rank) if spec else None
    return Stretch(entry) if entry is not None else None


def install() -> None:
    """Installs :func:`stretch_for_rank` as the ``slowdown`` hook (``graphdist.plugins``), which the trainer asks."""
    install_hook("slowdown", stretch_for_rank)
