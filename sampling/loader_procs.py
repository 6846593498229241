"""Loader processes: K processes sample and gather one worker's batches into shared-memory slots.

HyScale-GNN's CPU side: the cores a worker's device leaves idle prepare its batches. Each loader
process owns a sampler (a copy of the worker's, taken at start) and reads the worker's feature
table, which it shares rather than copies. Over local sources the processes are forked, so the
CSR, the features (memory-mapped or not) and the cache are the worker's own pages; where sources
communicate they are spawned into sampling groups of their own (``join``,
``graphdist.comm.loader_groups``) and get the sampler and sources through a queue, their tensors
moved into shared memory once for all of a worker's loaders. A loader writes
a batch's features and its id arrays (seeds, input nodes, every block's ``src``, ``dst`` and
``indptr``) into one of its slots, a pair of shared-memory tensors, and sends the slot's layout
through a queue; the worker builds the batch from views into the slot (no copy on a CPU worker;
on a CUDA worker the slots are pinned, ``cudaHostRegister``, and copied on a side stream).

Who does what, batch by batch (``NodeLoader`` drives it; batch ``b`` of an epoch goes to loader
``b mod K``):

- the worker draws the epoch's plan (its shuffle), as without loaders, and sends batch ``b``'s
  seeds only once they can no longer change (``NodeLoader.earliest_batch_size_change``);
- a loader starts batch ``b`` once the worker allows it (when the caller asks for batch
  ``b - depth``), so how far the loaders got depends on how many batches were asked for, never
  on timing: the rule the prefetch thread follows, which keeps ranks' collectives in step;
- the worker frees a batch's slot when the batch after next is asked for (a batch's ``x`` is
  valid until then, as with the prefetch thread's buffers); labels are looked up in the worker
  (the rebalancer hands seeds, with their labels, to the worker, not to its loaders).

Streams: one loader continues the worker's sampler stream, so ``K = 1`` gives the batches of the
prefetch thread, bit for bit. With ``K >= 2`` loader ``k`` restarts its sampler each epoch from a
state derived from (the worker's sampler state, which then never advances, the epoch, ``k``): a
run is deterministic and resumable from an epoch's end for a given K (the checkpoint holds the
worker's state as it does without loaders), and differs from K = 1's.

A loader that dies or stays silent for ``timeout_s`` fails the worker's next batch, naming the
loader; a loader dies with its worker (``PR_SET_PDEATHSIG``, and a check of its parent while it
waits), and torchrun's kill of the worker's process group reaches it. ``ps`` shows it as ``gd-loader-<k>``.

Example:
    >>> from graphdist.testing import random_graph
    >>> from sampling import NeighborSampler, NodeLoader
    >>> g = random_graph(100, seed=0)
    >>> one = NodeLoader(g, torch.arange(100), NeighborSampler(g, [3], seed=0), batch_size=32, seed=0, loaders=1)
    >>> plain = NodeLoader(g, torch.arange(100), NeighborSampler(g, [3], seed=0), batch_size=32, seed=0)
    >>> all(torch.equal(a.x, b.x) for a, b in zip(one, plain))
    True
    >>> one.close()
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import multiprocessing
import os
import queue
import signal
import struct
import time
import traceback
from collections import deque
from typing import Any, Callable, Iterator, Optional

import torch
import torch.multiprocessing  # noqa: F401 - registers the tensor reductions the slots travel by
from torch import Tensor

from graphdist.comm.counters import COUNTER
from sampling.base import FeatureSource, SampledBatch, Sampler
from sampling.prefetch import POLL_S
from sampling.slots import Layout, Slot, assemble, id_arrays, to_plain

__all__ = ["LoaderDied", "LoaderProcesses", "derived_state", "pin_shared"]

logger = logging.getLogger(__name__)


class LoaderDied(RuntimeError):
    """A loader process exited, failed or stayed silent past the timeout."""


def derived_state(base: Optional[Tensor], epoch: int, loader: int, stream: int = 0) -> Optional[Tensor]:
    """The generator state loader ``loader`` samples ``epoch`` with (K >= 2), from the worker's sampler state ``base``
    (which the worker never advances while loaders sample, and which its checkpoint holds); None: an unseeded sampler.
    ``stream`` tells apart the generators of one loader (1: its neighbour source's, which answers other workers).

    Example:
        >>> s = torch.Generator().manual_seed(0).get_state()
        >>> torch.equal(derived_state(s, 2, 0), derived_state(s, 2, 0)), torch.equal(
        ...     derived_state(s, 2, 0), derived_state(s, 2, 1))
        (True, False)
    """
    if base is None:
        return None
    digest = hashlib.blake2b(base.numpy().tobytes() + struct.pack("<qqq", epoch, loader, stream), digest_size=8).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest, "little") >> 1).get_state()


class _Abort(Exception):
    """The worker stopped this epoch early: the loader drops it and waits for the next."""


class _Child:
    """What runs in loader process ``k``: waits for commands, samples and gathers its batches."""

    def __init__(self, k: int, count: int, sampler: Optional[Sampler], features: Optional[FeatureSource], slots: int,
                 inbox: Any, outbox: Any, parent: int) -> None:
        self.k, self.count, self.sampler, self.features = k, count, sampler, features
        self.slots = [Slot() for _ in range(slots)]
        self.inbox, self.outbox, self.parent = inbox, outbox, parent
        self.free: deque[int] = deque(range(slots))
        self.epoch = -1
        self.seeds: dict[int, Tensor] = {}
        self.allowed = -1

    def main(self) -> None:
        while True:
            msg = self._next()
            if msg is None:
                continue
            if msg[0] == "stop":
                return
            if msg[0] == "epoch":
                self._epoch(msg[1], msg[2], msg[3])

    def _next(self) -> Optional[tuple]:
        """Waits for one command and handles it (state requests, frees, seeds, permissions); returns the
        others ("epoch", "stop") to the caller, None after handling one."""
        while True:
            try:
                msg = self.inbox.get(timeout=1.0)
                break
            except queue.Empty:
                if os.getppid() != self.parent:  # the worker is gone (and PR_SET_PDEATHSIG did not reach us)
                    os._exit(1)
        kind, current = msg[0], len(msg) > 1 and msg[1] == self.epoch
        if kind == "setup":  # a spawned loader's sampler and features (a queue passes shared storages once each)
            self.sampler, self.features = msg[1], msg[2]
        elif kind == "state":
            self.outbox.put(("state", self.sampler.get_state(), _source_state(self.sampler)))
        elif kind == "set_state":
            self.sampler.set_state(msg[1])
            if msg[2] is not None:
                self.sampler.source.set_state(msg[2])
        elif kind == "free" and current:
            self.free.append(msg[2])
        elif kind == "seeds" and current:
            self.seeds[msg[2]] = torch.from_numpy(msg[3])
        elif kind == "go" and current:
            self.allowed = max(self.allowed, msg[2])
        elif kind == "abort" and current:
            raise _Abort()
        elif kind in ("epoch", "stop"):
            return msg
        return None

    def _feed(self, mine: list[int]) -> Any:
        for b in mine:
            while b not in self.seeds:
                self._next()
            yield self.seeds.pop(b)

    def _epoch(self, epoch: int, num_batches: int, base: Optional[Tensor]) -> None:
        self.epoch, self.seeds, self.allowed = epoch, {}, -1
        self.free = deque(range(len(self.slots)))  # the worker holds none of this loader's batches now
        if self.count > 1:
            self.sampler.set_state(derived_state(base, epoch, self.k))
            if _source_state(self.sampler) is not None:
                self.sampler.source.set_state(derived_state(base, epoch, self.k, stream=1))
        mine = list(range(self.k, num_batches, self.count))
        stream = self.sampler.sample_stream(self._feed(mine))
        try:
            for b in mine:
                while self.allowed < b:
                    self._next()
                t0 = time.perf_counter()
                batch = next(stream)
                t1 = time.perf_counter()
                while not self.free:
                    self._next()
                slot = self.free.popleft()
                layout = self._write(slot, batch)
                layout.sample_s, layout.gather_s = t1 - t0, time.perf_counter() - t1
                self.outbox.put(("batch", epoch, b, slot, layout))
        except _Abort:
            pass
        finally:
            stream.close()

    def _write(self, slot: int, batch: SampledBatch) -> Layout:
        arrays = id_arrays(batch)
        lengths = [int(a.numel()) for a in arrays]
        rows = int(batch.input_nodes.numel())
        width = self.features.num_features if self.features is not None else 0
        dtype = self.features.dtype if self.features is not None else torch.float32
        buf = self.slots[slot]
        t0 = time.perf_counter()
        if buf.fit(rows, width, dtype, sum(lengths)):
            self.outbox.put(("slot", slot, buf.x, buf.ids))  # shared once, by file descriptor
        if self.features is not None:
            self.features.gather(batch.input_nodes, out=buf.x[:rows])
        torch.cat([a.view(-1).to(torch.int64) for a in arrays], out=buf.ids[: sum(lengths)])
        counters = None
        stats = getattr(self.features, "stats", None)
        if stats is not None:  # a distributed source's cache counters, handed to the worker's copy batch by batch
            counters = dict(vars(stats))
            self.features.stats = type(stats)()
        return Layout(rows, lengths, [(b.num_src, b.num_dst) for b in batch.blocks], to_plain(batch.meta),
                       0.0, time.perf_counter() - t0, counters, COUNTER.take(), typed=len(arrays) > 2 + 3 * len(batch.blocks))


def _die_with_parent(k: int) -> None:
    """SIGKILL this process when the process that forked it dies (Linux; elsewhere the parent check remains),
    and name it ``gd-loader-<k>`` where ``ps`` and ``top`` show it."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        libc.prctl(15, f"gd-loader-{k}".encode()[:15], 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass


def _source_state(sampler: Sampler) -> Optional[Tensor]:
    """The state of the sampler's neighbour source, where it draws on its own (serving other workers)."""
    source = getattr(sampler, "source", None)
    return source.get_state() if source is not None else None


def _run_child(child: _Child, threads: int, join: Optional[Callable[[int], None]]) -> None:
    _die_with_parent(child.k)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the worker, which stops its loaders
    torch.set_num_threads(threads)
    COUNTER.reset()  # a forked loader starts with its worker's counts, which are the worker's to report
    try:
        if join is not None:
            join(child.k)
        child.main()
    except BaseException:  # noqa: BLE001 - reported to the worker, which names this loader
        child.outbox.put(("error", traceback.format_exc()))
        raise SystemExit(1)


class LoaderProcesses:
    """``count`` forked loader processes over ``sampler`` and ``features`` (see the module doc).

    Args:
        count: loader processes (>= 1).
        sampler: the worker's sampler, copied into each loader at :meth:`start`.
        features: the worker's feature source (its pages shared with the loaders), or None.
        slots: shared-memory slots per loader.
        name: who the loaders work for, in error messages (``worker 0``).
        timeout_s: seconds a batch may take before the loader is declared stuck.
        threads: torch threads in each loader.
        join: what each loader calls first with its index (its sampling group, ``graphdist.comm.join_loader_group``).
            Given: the loaders are spawned, and the sampler and features reach them pickled (their tensors moved
            to shared memory once, for all loaders; a source drops its process group when pickled and uses the
            loader's). None: forked (the worker's pages shared as they are).
    """

    def __init__(self, count: int, sampler: Sampler, features: Optional[FeatureSource], slots: int,
                 name: str = "", timeout_s: float = 180.0, threads: int = 1,
                 join: Optional[Callable[[int], None]] = None) -> None:
        if count < 1:
            raise ValueError(f"loaders: expected >= 1 (got {count})")
        self.count, self.sampler, self.features, self.num_slots = count, sampler, features, slots
        self.name, self.timeout_s, self.threads, self.join = name, timeout_s, threads, join
        self.procs: list[Any] = []
        self.inboxes: list[Any] = []
        self.outboxes: list[Any] = []
        self.slots: list[list[tuple[Optional[Tensor], Optional[Tensor]]]] = []
        self.pending: list[dict[int, tuple]] = []
        self.on_new_slot: Optional[Any] = None  # called with each new shared tensor (pinning for CUDA)
        self.epoch = -1

    @property
    def started(self) -> bool:
        return bool(self.procs)

    def start(self) -> None:
        """Forks the loaders (each takes a copy of the sampler as it is now)."""
        ctx = multiprocessing.get_context("spawn" if self.join is not None else "fork")
        for k in range(self.count):
            inbox, outbox = ctx.Queue(), ctx.Queue()
            spawned = self.join is not None
            child = _Child(k, self.count, None if spawned else self.sampler, None if spawned else self.features,
                           self.num_slots, inbox, outbox, os.getpid())
            proc = ctx.Process(target=_run_child, args=(child, self.threads, self.join), name=f"graphdist-loader-{k}",
                               daemon=True)
            proc.start()
            if spawned:
                # Through the queue, not the process's arguments: a spawn passes each shared storage's descriptor
                # as often as a tensor views it, which the exec refuses; the queue's sharer hands out copies.
                inbox.put(("setup", self.sampler, self.features))
            self.procs.append(proc)
            self.inboxes.append(inbox)
            self.outboxes.append(outbox)
            self.slots.append([(None, None)] * self.num_slots)
            self.pending.append({})

    def who(self, k: int) -> str:
        return f"{self.name + ': ' if self.name else ''}loader {k} of {self.count}"

    # ------------------------------------------------------------- one epoch
    def begin_epoch(self, epoch: int, num_batches: int) -> None:
        self.epoch = epoch
        base = self.sampler.get_state() if self.count > 1 else None  # what K >= 2 derive the epoch's streams from
        for k in range(self.count):
            self.pending[k] = {}
            self.inboxes[k].put(("epoch", epoch, num_batches, base))

    def send_seeds(self, b: int, seeds: Tensor) -> None:
        self.inboxes[b % self.count].put(("seeds", self.epoch, b, seeds.numpy()))

    def allow(self, b: int) -> None:
        self.inboxes[b % self.count].put(("go", self.epoch, b))

    def release(self, b: int, slot: int) -> None:
        self.inboxes[b % self.count].put(("free", self.epoch, slot))

    def abort(self) -> None:
        for inbox in self.inboxes:
            inbox.put(("abort", self.epoch))

    def receive(self, b: int) -> tuple[SampledBatch, int, Layout]:
        """Batch ``b`` of this epoch as views into its slot, the slot, and its layout."""
        k = b % self.count
        msg = self.pending[k].pop(b, None)
        while msg is None:
            got = self._get(k)
            if got[0] == "batch" and got[1] == self.epoch:
                if got[2] == b:
                    msg = got
                else:
                    self.pending[k][got[2]] = got
        _, _, _, slot, layout = msg
        x, ids = self.slots[k][slot]
        return assemble(x, ids, layout), slot, layout

    def _get(self, k: int) -> tuple:
        """The next message of loader ``k`` (new slots recorded on the way); fails naming a dead or silent loader."""
        start = time.monotonic()
        while True:
            try:
                msg = self.outboxes[k].get(timeout=POLL_S)
            except queue.Empty:
                self._check_alive(k)
                if time.monotonic() - start > self.timeout_s:
                    raise LoaderDied(f"{self.who(k)} sent nothing for {self.timeout_s:g} s (--timeout); "
                                     f"it is stuck or far too slow (pid {self.procs[k].pid})") from None
                continue
            except (OSError, EOFError) as exc:  # died mid-message (a shared slot's descriptor half sent)
                self.procs[k].join(timeout=1.0)
                self._check_alive(k)
                raise LoaderDied(f"{self.who(k)}: its queue broke ({exc}) (pid {self.procs[k].pid})") from exc
            if msg[0] == "slot":
                for t in msg[2:]:
                    if t is not None and self.on_new_slot is not None:
                        self.on_new_slot(t)
                self.slots[k][msg[1]] = (msg[2], msg[3])
                continue
            if msg[0] == "error":
                raise LoaderDied(f"{self.who(k)} failed:\n{msg[1]}")
            return msg

    def iterate(self, epoch: int, plan: list[Tensor], depth: int, lookahead: int) -> Iterator[tuple[SampledBatch, Layout]]:
        """The batches of ``plan`` in order (views into slots), as the caller asks for them.

        On the caller's request for batch ``t``: loaders may start batches up to ``t + depth``; seeds are sent up
        to ``t + depth + lookahead`` (a pipelined sampler reads that far ahead), read from ``plan`` only then
        (it may be replanned up to there); the slot of batch ``t - 2`` goes back to its loader (after its device
        copy, :meth:`fence`). An early stop aborts the loaders' epoch.
        """
        n = len(plan)
        self.begin_epoch(epoch, n)
        allowed = sent = 0
        self._held: deque[list] = deque()  # [batch index, slot, copy event] of batches the caller may still read
        finished = False
        try:
            for t in range(n):
                while self._held and self._held[0][0] <= t - 2:
                    b, slot, event = self._held.popleft()
                    if event is not None:
                        event.synchronize()  # the copy out of the slot must be done before a loader rewrites it
                    self.release(b, slot)
                while allowed < min(n, t + depth + 1):
                    self.allow(allowed)
                    allowed += 1
                while sent < min(n, t + depth + lookahead + 1):
                    self.send_seeds(sent, plan[sent])
                    sent += 1
                batch, slot, layout = self.receive(t)
                self._held.append([t, slot, None])
                yield batch, layout
            finished = True
        finally:
            if not finished and self.started:
                self.abort()

    def fence(self, event: Any) -> None:
        """The batch :meth:`iterate` yielded last is copied out of its slot by a copy that ends with ``event``."""
        self._held[-1][2] = event

    def _check_alive(self, k: int) -> None:
        code = self.procs[k].exitcode
        if code is not None:
            how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
            raise LoaderDied(f"{self.who(k)} {how} (pid {self.procs[k].pid})") from None

    # ------------------------------------------------------------- state
    def get_state(self) -> tuple[Optional[Tensor], Optional[Tensor]]:
        """Loader 0's sampler state and its neighbour source's (K = 1: the worker's streams, continued)."""
        self.inboxes[0].put(("state",))
        while True:
            msg = self._get(0)
            if msg[0] == "state":
                return msg[1], msg[2]
            if msg[0] == "batch" and msg[1] == self.epoch:
                self.pending[0][msg[2]] = msg

    def set_state(self, state: Optional[Tensor], source: Optional[Tensor] = None) -> None:
        for inbox in self.inboxes:
            inbox.put(("set_state", state, source))

    def close(self) -> None:
        """Stops the loaders (waits a moment, then kills)."""
        for inbox in self.inboxes:
            try:
                inbox.put(("stop",))
            except (OSError, ValueError):
                pass
        for proc in self.procs:
            proc.join(timeout=2.0)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=2.0)
        for q in self.inboxes + self.outboxes:
            q.close()
            q.cancel_join_thread()
        self.procs, self.inboxes, self.outboxes, self.slots, self.pending = [], [], [], [], []


def pin_shared(tensor: Tensor) -> None:
    """Page-locks a shared slot for fast, asynchronous copies to a CUDA device (``cudaHostRegister``)."""
    if torch.cuda.is_available() and tensor.numel():
        code = torch.cuda.cudart().cudaHostRegister(tensor.data_ptr(), tensor.numel() * tensor.element_size(), 0)
        if int(code) != 0:
            logger.warning("could not pin a loader slot (cudaHostRegister: %s): its copies to the GPU block", code)
