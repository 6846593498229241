"""``NodeLoader``: batches of seeds -> sampled blocks with features and labels, prefetched.

A background thread samples and gathers batch t+1 while the caller trains on batch t
(HyScale-GNN's two-stage prefetch: gather into a host buffer, pinned only when a CUDA device
is the target, then copy to the device). ``loader.stats`` says how long the caller waited.

Buffers: with ``reuse_buffers=True`` (the default) ``batch.x`` is a view into one of a few
host buffers that are recycled, because allocating a fresh ``[num_input_nodes, F]`` tensor per
batch costs page faults comparable to the gather itself. The ``x`` of batch t therefore stays
valid until batch t+1 is requested (t+2 with prefetch, whose thread fills buffers ahead); clone
it to keep it longer, or pass ``reuse_buffers=False``. Without prefetch one buffer serves every
batch: the largest tensor of a step exists once (a second would cost ~150 MB per worker here).

Distributed use: the loader itself never communicates, but a distributed sampler or feature
source called from the prefetch thread does. Those collectives must run on a process group of
their own, never the one gradient sync uses: within one group every rank must issue
collectives in the same order, which two threads sharing a group cannot promise (it deadlocks
or mismatches silently). ``num_batches`` makes every worker run the same number of steps: a short
worker's last steps get empty batches (never repeated seeds: a seed trains once per epoch, and
seed-weighted gradient averaging makes an empty step contribute nothing), long ones stop early. The prefetch
thread starts batch k only once the caller has asked for batch k - ``prefetch_depth``, so ranks
that leave an epoch early at the same batch have issued the same collectives.

Thread counts: the prefetch thread uses torch's intra-op pool like the caller, so with
``torch.set_num_threads(1)`` the two threads simply share the process; sampling kernels release
the GIL, so the overlap is real on two or more cores, and on fewer the background thread slows
the step it overlaps.

Example:
    >>> from graphdist.testing import random_graph
    >>> from sampling import NeighborSampler
    >>> g = random_graph(100, seed=0)
    >>> loader = NodeLoader(g, torch.arange(100), NeighborSampler(g, [5, 5], seed=0), batch_size=32, seed=0)
    >>> sizes = [b.seed_nodes.numel() for b in loader]
    >>> batch = next(iter(loader))
    >>> sizes, bool((batch.x[:, 0] == batch.input_nodes).all())
    ([32, 32, 32, 4], True)
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Union

import torch
from torch import Tensor

from graphdist.comm.counters import COUNTER
from graphdist.data.graph import Graph
from sampling.base import FeatureSource, LocalFeatureSource, SampledBatch, Sampler
from sampling.epoch_plan import EpochPlan, resolve_seeds
from sampling.loader_procs import LoaderProcesses, pin_shared
from sampling.prefetch import DONE, POLL_S, BufferRing, Failure, acquire, put
from sampling.staging import DeviceStager, StreamOps

__all__ = ["NodeLoader", "LoaderStats"]

logger = logging.getLogger(__name__)

LabelSource = Union[Tensor, Callable[[Tensor], Tensor]]


@dataclass
class LoaderStats:
    """Where a loader's time went since the last ``reset()``.

    Attributes:
        batches: batches handed to the caller.
        wait_s: time the caller spent blocked waiting for a batch (all of sampling and
            gathering when ``prefetch=False``).
        sample_s: time spent in the sampler (``sample_stream``; in the prefetch thread when prefetching).
        gather_s: time spent gathering features/labels and copying to the device.
    """

    batches: int = 0
    wait_s: float = 0.0
    sample_s: float = 0.0
    gather_s: float = 0.0

    @property
    def prefetch_hidden_fraction(self) -> float:
        """Share of sampling + gathering time the caller did not wait for (1.0 = fully hidden by prefetch)."""
        work = self.sample_s + self.gather_s
        return 0.0 if work <= 0 else max(0.0, 1.0 - self.wait_s / work)

    def reset(self) -> None:
        self.batches, self.wait_s, self.sample_s, self.gather_s = 0, 0.0, 0.0, 0.0


class NodeLoader(EpochPlan):
    """Iterates over seed nodes in batches, yielding ``SampledBatch`` with ``x`` and ``y`` filled.

    Args:
        data: a ``Graph`` (features ``graph.x``, labels ``graph.y``), a ``FeatureSource``
            (e.g. a partition's distributed one; give ``labels``), or None for no features.
        seeds: int64 node ids, or a bool mask over nodes (e.g. ``graph.train_mask``).
        sampler: any ``Sampler`` (neighbour, cluster, distributed).
        batch_size: seeds per batch (>= 1).
        shuffle: new random order each epoch. Default True.
        drop_last: drop the last incomplete batch. Default False.
        prefetch: sample and gather the next batch in a background thread. Default True.
        labels: label per seed id: a tensor indexed by node id or a function ``ids -> labels``;
            default ``graph.y`` for a ``Graph``. None with a ``FeatureSource``: no ``y``.
        seed: seeds the loader's shuffle generator (the sampler has its own); None
            draws one from torch's global RNG. Default None.
        num_batches: exact batches per epoch, so that every distributed worker runs the same
            number of steps: extra batches are empty (no seed repeats); fewer drop the rest of
            the epoch. Default None (``ceil`` or ``floor`` of ``len(seeds)/batch_size``).
        device: move each batch there in the prefetch thread. CUDA: gathered into pinned buffers and
            copied on a side stream; the step calls ``sampling.staging.on_device`` before reading it.
        reuse_buffers: gather ``x`` into recycled buffers (valid until batch t+1 is requested, t+2 with prefetch).
            Default True.
        prefetch_depth: batches prepared ahead. Default 1.
        stream_ops: the device's streams for staging (``sampling.staging``; default CUDA's on a CUDA
            device, none elsewhere: a plain copy). Tests pass fakes.
        loaders: processes that sample and gather the batches (``sampling.loader_procs``) instead of the
            prefetch thread; 0 (default) none. 1 gives the batches 0 gives; 2+ are deterministic per count.
        name: who the loader works for, in its loader processes' errors (``worker 0``).
        timeout_s: seconds a loader process may take for a batch before it is declared stuck.
        loader_join: what each loader process calls first with its index: its sampling group
            (``graphdist.comm.join_loader_group``), for a sampler or feature source that communicates.
            Given, the loaders are spawned and get the sampler and features pickled (``loader_procs``).

    Raises:
        ValueError: on bad arguments, naming the argument and what was received.

    Example:
        >>> from graphdist.testing import tiny_graph
        >>> from sampling import NeighborSampler
        >>> g = tiny_graph()
        >>> loader = NodeLoader(g, g.train_mask, NeighborSampler(g, [2], seed=0), batch_size=2, shuffle=False)
        >>> [b.seed_nodes.tolist() for b in loader], len(loader)
        ([[0, 2], [4, 6], [8]], 3)
    """

    def __init__(
        self,
        data: Union[Graph, FeatureSource, None],
        seeds: Any,
        sampler: Sampler,
        batch_size: int,
        shuffle: bool = True,
        drop_last: bool = False,
        prefetch: bool = True,
        labels: Optional[LabelSource] = None,
        seed: Optional[int] = None,
        num_batches: Optional[int] = None,
        device: Optional[Union[str, torch.device]] = None,
        reuse_buffers: bool = True,
        prefetch_depth: int = 1,
        stream_ops: Optional[StreamOps] = None,
        loaders: int = 0,
        name: str = "",
        timeout_s: float = 180.0,
        loader_join: Optional[Callable[[int], None]] = None,
    ) -> None:
        self.features, default_labels = _resolve_data(data)
        self.labels: Optional[LabelSource] = labels if labels is not None else default_labels
        self.seeds = resolve_seeds(seeds)
        if not isinstance(sampler, Sampler):
            raise ValueError(f"sampler: expected a sampling.Sampler (got {type(sampler).__name__})")
        if batch_size < 1:
            raise ValueError(f"batch_size: expected >= 1 (got {batch_size})")
        if num_batches is not None and num_batches < 0:
            raise ValueError(f"num_batches: expected >= 0 or None (got {num_batches})")
        if prefetch_depth < 1:
            raise ValueError(f"prefetch_depth: expected >= 1 (got {prefetch_depth})")
        if loaders < 0:
            raise ValueError(f"loaders: expected >= 0 (got {loaders})")
        self.sampler, self.batch_size = sampler, int(batch_size)
        self.shuffle, self.drop_last, self.prefetch = bool(shuffle), bool(drop_last), bool(prefetch)
        self.num_batches, self.prefetch_depth = num_batches, int(prefetch_depth)
        self.device = torch.device(device) if device is not None else None
        staged = self.device is not None and (self.device.type == "cuda" or stream_ops is not None)
        self._stager = DeviceStager(self.device, stream_ops) if staged else None
        self.reuse_buffers = bool(reuse_buffers)
        if seed is None:
            seed = int(torch.randint(0, 2**62, (1,)).item())
        self.generator = torch.Generator().manual_seed(seed)
        self.loaders, self.name, self.timeout_s, self.loader_join = int(loaders), name, float(timeout_s), loader_join
        self._procs: Optional[LoaderProcesses] = None
        self.epoch = 0
        self.stats = LoaderStats()
        self._ring: Optional[BufferRing] = None
        # This epoch's plan (None between epochs), the fresh seeds used before each batch, and
        # how many batches the caller has received: what set_batch_size needs to replan.
        self._batches: Optional[list[Tensor]] = None
        self._consumed: list[int] = []
        self._shuffled: Tensor = self.seeds
        self._yielded = 0
        self._stop: Optional[threading.Event] = None
        self._thread: Optional[threading.Thread] = None

    # ------------------------------------------------------------- one batch
    def _prepared(self, plan: list[Tensor]) -> Iterator[SampledBatch]:
        """The plan's batches, sampled (``sampler.sample_stream``, which may pipeline) and gathered.

        The plan is read by index when the sampler asks for a batch, so ``set_batch_size`` can
        replan batches the sampler has not reached.
        """
        stream = self.sampler.sample_stream(plan[k] for k in range(len(plan)))
        # A sampler on the device samples and gathers on the staging stream, beside the step (sampling.device).
        on_device = self._stager is not None and getattr(self.sampler, "device", None) == self.device
        try:
            while True:
                t0 = time.perf_counter()
                with self._stager.side() if on_device else contextlib.nullcontext():
                    batch = next(stream, None)
                if batch is None:
                    return
                t1 = time.perf_counter()
                with self._stager.side() if on_device else contextlib.nullcontext():
                    self._gather(batch)
                self.stats.sample_s += t1 - t0
                self.stats.gather_s += time.perf_counter() - t1
                yield batch
        finally:
            stream.close()  # an early stop resets the sampler's scratch state in this thread

    def _gather(self, batch: SampledBatch) -> None:
        if self.features is not None:
            out = None
            if self.reuse_buffers:
                out = self._buffers().take(batch.input_nodes.numel())
            batch.x = self.rows_of(batch.input_nodes, out=out)
        self._finish(batch)

    def rows_of(self, nodes: Tensor, out: Optional[Tensor] = None) -> Tensor:
        """The feature rows of ``nodes`` from the loader's source, wherever each lies. A batch sampled on the device
        with host rows: the ids come to the host (the calling thread waits for the sampling, not the step)."""
        assert self.features is not None
        return self.features.gather(nodes if nodes.device == self.features.device else nodes.to(self.features.device),
                                    out=out)

    def labels_of(self, seeds: Tensor) -> Optional[Tensor]:
        """The labels of ``seeds``: a tensor by node id, or a function of ids on its ``device`` (the host's without
        one); either is asked with the ids on its own device."""
        lab = self.labels
        if lab is None:
            return None
        device = getattr(lab, "device", torch.device("cpu"))
        ids = seeds if seeds.device == device else seeds.to(device)
        return lab.index_select(0, ids) if isinstance(lab, Tensor) else lab(ids)

    def _finish(self, batch: SampledBatch) -> Any:
        """Labels, and the copy to the device; returns the copy's event (None: no staged copy)."""
        event = None
        if self.labels is not None:
            batch.y = self.labels_of(batch.seed_nodes)
        if self._stager is not None:
            # On a side stream; the step's stream waits for the copy's event (sampling.staging), and
            # the pinned buffer is taken again only once the copy out of it is done.
            moved, event = self._stager.stage(batch)
            batch.blocks, batch.input_nodes, batch.seed_nodes = moved.blocks, moved.input_nodes, moved.seed_nodes
            batch.x, batch.y, batch.meta = moved.x, moved.y, moved.meta
            if self._ring is not None and self.features is not None and self.reuse_buffers and not self.loaders:
                self._ring.fence(event)
        elif self.device is not None and self.device.type != "cpu":
            moved = batch.to(self.device)
            batch.blocks, batch.input_nodes, batch.seed_nodes = moved.blocks, moved.input_nodes, moved.seed_nodes
            batch.x, batch.y = moved.x, moved.y
        return event

    def _buffers(self) -> BufferRing:
        if self._ring is None:
            assert self.features is not None
            # With prefetch, batch t's slot is rewritten only after batch t+2 is requested; without,
            # batch t+1 is gathered only once the caller asked for it (see module doc).
            slots = self.prefetch_depth + 3 if self.prefetch else 1
            pin = self.device is not None and self.device.type == "cuda"
            self._ring = BufferRing(slots, self.features.num_features, self.features.dtype, pin)
        return self._ring

    # ------------------------------------------------------------- iteration
    def __iter__(self) -> Iterator[SampledBatch]:
        self._stop_previous()
        self._yielded = 0
        plan = self._plan()
        self.epoch += 1
        if self.loaders:
            return self._iter_loaders(plan)
        return self._iter_prefetch(plan) if self.prefetch else self._iter_sync(plan)

    def _iter_loaders(self, plan: list[Tensor]) -> Iterator[SampledBatch]:
        procs = self._loader_procs()
        batches = procs.iterate(self.epoch, plan, self._ahead(), self.sampler.lookahead * self.loaders)
        try:
            while True:
                t0 = time.perf_counter()
                got = next(batches, None)
                if got is None:
                    return
                batch, layout = got
                event = self._finish(batch)
                if event is not None:
                    procs.fence(event)
                self.stats.wait_s += time.perf_counter() - t0
                self.stats.sample_s += layout.sample_s
                self.stats.gather_s += layout.gather_s
                if layout.counters and getattr(self.features, "stats", None) is not None:
                    for key, value in layout.counters.items():  # the loader's cache traffic, on this source
                        setattr(self.features.stats, key, getattr(self.features.stats, key) + value)
                if layout.traffic:  # the bytes its collectives sent, in this worker's records
                    COUNTER.merge(layout.traffic)
                self.stats.batches += 1
                self._yielded += 1
                yield batch
        finally:
            batches.close()
            self._end_epoch(plan)

    def _loader_procs(self) -> LoaderProcesses:
        """The loader processes, forked at the first epoch (each takes the sampler as it is then)."""
        if self._procs is None:
            procs = LoaderProcesses(self.loaders, self.sampler, self.features, slots=self.prefetch_depth + 3,
                                    name=self.name, timeout_s=self.timeout_s, join=self.loader_join)
            if self.device is not None and self.device.type == "cuda":
                procs.on_new_slot = pin_shared
            procs.start()
            self._procs = procs
            weakref.finalize(self, procs.close)  # a loader dropped without close() still stops its processes
        return self._procs

    def close(self) -> None:
        """Stops the loader processes, if any (a later epoch starts new ones)."""
        self._stop_previous()
        if self._procs is not None:
            self._procs.close()
            self._procs = None

    def _iter_sync(self, plan: list[Tensor]) -> Iterator[SampledBatch]:
        prepared = self._prepared(plan)
        try:
            while True:
                t0 = time.perf_counter()
                batch = next(prepared, None)
                self.stats.wait_s += time.perf_counter() - t0
                if batch is None:
                    return
                self.stats.batches += 1
                self._yielded += 1
                yield batch
        finally:
            prepared.close()
            self._end_epoch(plan)

    def _iter_prefetch(self, plan: list[Tensor]) -> Iterator[SampledBatch]:
        q: queue.Queue = queue.Queue(maxsize=self.prefetch_depth)
        stop = threading.Event()
        requested = threading.Semaphore(0)
        thread = threading.Thread(target=self._produce, args=(plan, q, stop, requested), name="graphdist-prefetch",
                                  daemon=True)
        self._stop, self._thread = stop, thread
        thread.start()
        try:
            while True:
                requested.release()  # lets the producer start batch (this one + prefetch_depth)
                t0 = time.perf_counter()
                item = q.get()
                self.stats.wait_s += time.perf_counter() - t0
                if item is DONE:
                    return
                if isinstance(item, Failure):
                    raise item.exc
                self.stats.batches += 1
                self._yielded += 1
                yield item
        finally:
            # Early exit (break, exception): unblock the producer and wait for it, so the
            # sampler's scratch state is never used by two threads at once.
            stop.set()
            while thread.is_alive():
                try:
                    q.get_nowait()
                except queue.Empty:
                    thread.join(timeout=POLL_S)
            self._stop, self._thread = None, None
            self._end_epoch(plan)

    def _end_epoch(self, plan: list[Tensor]) -> None:
        if self._batches is plan:  # not a newer epoch's plan (an old generator closed late)
            self._batches = None

    def _produce(self, plan: list[Tensor], q: queue.Queue, stop: threading.Event, requested: threading.Semaphore) -> None:
        """Prepares batch k only once the caller has asked for batch k - prefetch_depth.

        So how far the producer got when the caller stops early depends only on how many
        batches the caller asked for, not on thread timing: with a distributed sampler every
        rank that stops at the same batch has issued the same collectives (a producer that
        raced one batch further on one rank would wait forever for its peers).
        """
        prepared = self._prepared(plan)
        try:
            for k in range(len(plan)):
                if k >= self.prefetch_depth and not acquire(requested, stop):
                    return
                item = next(prepared)
                if stop.is_set() or not put(q, item, stop):
                    return
            put(q, DONE, stop)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            put(q, Failure(exc), stop)
        finally:
            prepared.close()

    def _stop_previous(self) -> None:
        # A new epoch started before the last one was exhausted: its producer must be gone
        # before a new one touches the sampler (whose scratch state is single-threaded).
        if self._stop is not None and self._thread is not None:
            self._stop.set()
            self._thread.join()
        self._stop, self._thread = None, None

    # ------------------------------------------------------------- checkpoint
    def state_dict(self) -> dict[str, Any]:
        """Epoch counter and RNG states (loader and sampler), for resuming at an epoch boundary.

        With one loader process its sampler is the stream (asked for); with more, each loader's stream
        derives from this process's sampler state, which does not advance, and the epoch.
        """
        state = {"epoch": self.epoch, "generator": self.generator.get_state(), "sampler": self.sampler.get_state()}
        if self._procs is not None and self.loaders == 1:  # the loader's streams: the sampler's, its source's
            state["sampler"], state["source"] = self._procs.get_state()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch = int(state["epoch"])
        self.generator.set_state(state["generator"])
        self.sampler.set_state(state.get("sampler"))
        if self._procs is not None:
            self._procs.set_state(state.get("sampler"), state.get("source"))


def _resolve_data(data: Union[Graph, FeatureSource, None]) -> tuple[Optional[FeatureSource], Optional[LabelSource]]:
    if data is None:
        return None, None
    if isinstance(data, Graph):
        features = LocalFeatureSource(data.x) if data.x is not None else None
        return features, data.y
    if isinstance(data, FeatureSource):
        return data, None
    raise ValueError(f"data: expected a Graph, a FeatureSource or None (got {type(data).__name__})")
