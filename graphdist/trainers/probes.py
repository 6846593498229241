"""The start-up profiler's probe steps: timed mini-batch steps on a copy of the model, and their fits.

``graphdist.trainers.profile`` decides start shares and caches the profile; this module runs the
probes it asks for and leaves nothing behind. A probe trains a copy of the model
(:func:`probe_copy`: the hooks others attached are dropped) with its own optimizer under the
run's own gradient sync, samples with the run's sampler and gathers into buffers of its own,
then restores the global RNGs, the sampler's generator, the serving generator and the cache's
counters. :func:`probe` times the steps one at a time (sample, gather, compute apart) and again
as prefetch runs them (a loading thread beside the training thread); ``_measures`` turns both
into the ``(fixed, per_seed)`` fits ``placement.simulator`` reads.

Example (a probe copy trains without the hooks attached to the original):
    >>> m = torch.nn.Linear(2, 2)
    >>> calls = []
    >>> _ = m.register_forward_hook(lambda *_: calls.append("sync"))
    >>> _ = probe_copy(m)(torch.zeros(1, 2)); calls
    []
"""

from __future__ import annotations

import copy
import random
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch

from graphdist import comm
from graphdist.sync.tables import dense_parameters
from graphdist.trainers.row_adam import is_row_wise, mark_row_wise
from placement.shares import LinearCost, fit_cost

PROBE_STEPS = 4  # timed steps per batch size (after one untimed warm-up each)

__all__ = ["PROBE_STEPS", "ProbeTarget", "global_rng_state", "model_shape", "probe", "probe_copy",
           "restore_global_rng", "time_syncs"]


@dataclass(frozen=True)
class ProbeTarget:
    """What the start-up profiler times, as a strategy hands it to the loop (``Strategy.probe_target``).

    The probes sample with ``batches.sampler``, gather from ``batches.loader``'s feature source and
    step a copy of ``model``; they read nothing else of the strategy, and leave all of it as they
    found it.

    Attributes:
        batches: the strategy's ``DistributedBatches`` (sampler, loader, train seeds, neighbour source).
        model: the model the probes copy (never trained by them).
        device: where a step computes.
        with_degrees: whether the model reads global degrees (``trainers/features.model_inputs``).
        loss: the task's loss ``(out, y) -> tensor``.
        make_sync: ``make_sync(model, mode=None)``: the run's gradient sync around a model, or one of
            ``mode`` (``--sync auto``'s candidates); collective: every rank builds it alike.
        rank, precision, timeout: this worker, ``--precision``, ``--timeout``.
        stretch: the test slowdown this rank emulates (``GRAPHDIST_TEST_SLOWDOWN``), or None.
    """

    batches: Any
    model: torch.nn.Module
    device: torch.device
    with_degrees: bool
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    make_sync: Callable[..., Any]
    rank: int
    precision: str = "fp32"
    timeout: float = 300.0
    stretch: Optional[Any] = None


def model_shape(model: torch.nn.Module) -> dict[str, Any]:
    """The simulator's model shape: its Linear layers ``[name, out, in]`` and the bytes of the parameters a
    dense gradient exchange carries."""
    from graphdist.sync.sacp import is_linear

    return {"linears": [[name, int(m.weight.shape[0]), int(m.weight.shape[1])] for name, m in model.named_modules()
                        if is_linear(m)],
            # A sparse table's rows travel as touched rows, not as a dense gradient (sync/tables.py).
            "param_bytes": sum(p.numel() * p.element_size() for p in dense_parameters(model))}


def probe(target: ProbeTarget, share: int) -> tuple[dict[str, LinearCost], dict[str, Any]]:
    """This rank's fitted sample / gather / compute costs from probe steps at two batch sizes, and
    the simulator's measures (``Profile.measures``).

    Every rank runs the same number of probe batches (the distributed sampler and the feature
    fetch are collectives). Nothing the training depends on is touched: a model copy with its
    own optimizer; global RNGs, the sampler's generator and the serving generator restored.
    """
    batches = target.batches
    states = _rng_states(batches)
    stretch = target.stretch
    if stretch is not None:
        stretch.set_epoch(1)  # a slowdown from the start shows in the probes
    # The copy trains under the run's own gradient sync (hooks, SACP's capture, the allreduce):
    # what a step costs beyond forward and backward is measured, not guessed.
    sync = target.make_sync(probe_copy(target.model))
    from graphdist.trainers.base import adam

    optimizer = adam(sync.model.parameters(), lr=1e-6)
    seeds = batches.train_seeds
    rng = torch.Generator().manual_seed(12345 + target.rank)
    samples: dict[str, list[tuple[float, float]]] = {"sample": [], "gather": [], "compute": []}
    seen: dict[str, list[tuple[float, float]]] = {"sample": [], "feature": [], "wait": [], "exchanges": [],
                                                  "sync_wait": []}
    rows: list[list[tuple[float, float]]] = []
    # A stretch spun on a core of its own is in thread_time already; only a slept one is added.
    slept = (lambda: stretch.slept_s) if stretch is not None else (lambda: 0.0)
    gather = _gatherer(batches.loader, target.device)
    try:
        sizes = (max(1, share), max(2, 2 * share))
        # Alternating sizes, after one warm-up step at each: warm-up effects (allocator growth,
        # first-touch pages) then fall on both sizes alike instead of inflating the first's fixed part.
        order = list(sizes) + [sizes[k % 2] for k in range(2 * PROBE_STEPS)]
        for step, size in enumerate(order):
            n, batch_seeds = _draw(seeds, size, rng)
            if stretch is not None:
                stretch.mark()
            # Sampling and gathering may wait for other ranks (their collectives): this rank's
            # own share of them is its CPU time (gloo blocks without spinning), plus any
            # emulated slowdown. Compute has no collective here: its wall time (a GPU's too).
            sent, calls = comm.byte_counts(), comm.call_counts()
            w0, c0, s0 = time.perf_counter(), time.thread_time(), slept()
            batch = batches.sampler.sample(batch_seeds)
            c1, s1 = time.thread_time(), slept()
            x = gather(batch.input_nodes)
            y = batches.loader.labels_of(batch.seed_nodes) if n else None
            c2 = time.thread_time()
            t2 = time.perf_counter()
            sent_now, calls_now = comm.byte_counts(), comm.call_counts()
            compute_s, sync_wait = _train_step(target, sync, optimizer, batch, x, y, n)
            t3 = t2 + compute_s
            if stretch is not None:  # the emulated slowdown of gather + compute (slept or spun)
                before = time.perf_counter()
                stretch.tick()
                t3 += time.perf_counter() - before
            if step >= len(sizes) and n:
                samples["sample"].append((n, (c1 - c0) + (s1 - s0)))
                samples["gather"].append((n, c2 - c1))
                samples["compute"].append((n, t3 - t2))
                for tag in ("sample", "feature"):
                    seen[tag].append((n, sent_now.get(tag, 0) - sent.get(tag, 0)))
                seen["wait"].append((n, max(0.0, (t2 - w0) - (c2 - c0) - (s1 - s0))))
                seen["sync_wait"].append((n, sync_wait))
                seen["exchanges"].append((n, sum(calls_now.get(t, 0) - calls.get(t, 0) for t in ("sample", "feature"))))
                rows.append([(n, b.num_dst) for b in batch.blocks])
        pipelined = _pipelined(target, sync, optimizer, sizes, seeds, rng)
    finally:
        sync.close()
        _restore(batches, states)
    if not samples["compute"]:
        return {k: LinearCost(0.0, 1e-6) for k in samples}, {}
    return {k: fit_cost(v) for k, v in samples.items()}, _measures(target.model, seen, rows, pipelined)


def time_syncs(target: ProbeTarget, modes: Sequence[str], rounds: int = PROBE_STEPS) -> dict[str, float]:
    """``--sync auto``'s probe: steps of a model copy under each sync mode, alternating, at this rank's
    batch share; per mode the slowest rank's median step in seconds (the same on every rank).

    Collective: every rank calls it at the same point and runs the same steps. Like :func:`probe`,
    it leaves the model, the RNG streams and the sampler's state as it found them.
    """
    from graphdist.sync.choice import probe_order

    from graphdist.trainers.base import adam

    batches = target.batches
    states = _rng_states(batches)
    syncs = {mode: target.make_sync(probe_copy(target.model), mode=mode) for mode in modes}
    optimizers = {mode: adam(sync.model.parameters(), lr=1e-6) for mode, sync in syncs.items()}
    seeds = batches.train_seeds
    rng = torch.Generator().manual_seed(54321 + target.rank)
    gather = _gatherer(batches.loader, target.device)
    order = probe_order(list(modes), rounds)
    timed: dict[str, list[float]] = {mode: [] for mode in modes}
    try:
        for k, mode in enumerate(order):
            n, batch_seeds = _draw(seeds, max(1, batches.loader.batch_size), rng)
            batch = batches.sampler.sample(batch_seeds)
            x = gather(batch.input_nodes)
            y = batches.loader.labels_of(batch.seed_nodes) if n else None
            if target.stretch is not None:
                target.stretch.mark()
            t0 = time.perf_counter()
            _train_step(target, syncs[mode], optimizers[mode], batch, x, y, n)
            if target.stretch is not None:
                target.stretch.tick()
            if k >= len(modes):  # the first step of each is a warm-up
                timed[mode].append(time.perf_counter() - t0)
    finally:
        for sync in syncs.values():
            sync.close()
        _restore(batches, states)
    mine = {mode: statistics.median(v) if v else 0.0 for mode, v in timed.items()}
    gathered = comm.all_gather_object(mine)
    return {mode: max(g[mode] for g in gathered) for mode in modes}


def _draw(seeds: torch.Tensor, size: int, rng: torch.Generator) -> tuple[int, torch.Tensor]:
    """A probe batch: ``min(size, len(seeds))`` of ``seeds`` at random from ``rng`` (none drawn from it when empty)."""
    n = min(size, int(seeds.numel()))
    return n, (seeds[torch.randperm(seeds.numel(), generator=rng)[:n]] if n else seeds[:0])


def _train_step(target: ProbeTarget, sync: Any, optimizer: torch.optim.Optimizer, batch: Any, x: Any, y: Any,
                n: int) -> tuple[float, float]:
    """One probe step of the model copy as training runs it: ``(seconds without the gradient wait, that wait)``."""
    from graphdist.trainers.features import model_inputs
    from graphdist.trainers.precision import autocast

    t0 = time.perf_counter()
    inputs, blocks = model_inputs(x, batch.blocks, target.with_degrees)
    optimizer.zero_grad()
    sync.begin_step(n)
    with autocast(target.precision, target.device):  # timed as training runs it
        out = sync.model(inputs.to(target.device), [b.to(target.device) for b in blocks])
        loss = target.loss(out, y.to(target.device)) if n else out.sum() * 0.0
    loss.backward()
    t_wait = time.perf_counter()
    sync.finish()  # the exposed part of the gradient exchange: the simulator's, per link
    t_synced = time.perf_counter()
    optimizer.step()
    float(loss.detach())  # waits for a device's kernels
    return time.perf_counter() - t0 - (t_synced - t_wait), t_synced - t_wait


def _pipelined(target: ProbeTarget, sync: Any, optimizer: torch.optim.Optimizer, sizes: tuple[int, int],
               seeds: torch.Tensor, rng: torch.Generator) -> list[tuple[float, ...]]:
    """The probe steps again as training runs them with prefetch: a thread samples (``sample_stream``,
    as the loader does: a pipelined sampler keeps ``lookahead`` more batches in flight and shares their
    exchanges, about a third cheaper per batch than one at a time on the distributed sampler) and
    gathers the next batch while this one trains, so the cores are shared as they will be. Batches
    come in groups of one size, as many as the stream has in flight, sizes alternating by group; a
    group's loading CPU and step walls are averaged over it (the stream samples a group at once).
    Per timed group, its mean step ``(seeds, wall s, loading thread CPU s, training thread CPU s,
    gradient wait s, training wall s, process CPU s)`` (training wall: from the batch's arrival to
    the step's end, the gradient wait excluded; process CPU: every thread's, from step end to step
    end, an emulated stretch spun on the core left out)."""
    import queue
    import threading

    batches, stretch = target.batches, target.stretch
    group = 1 + max(0, int(getattr(batches.sampler, "lookahead", 0)))
    # Timed groups of each size (one untimed group each first). Steps inside a group wait on the
    # stream's exchanges unevenly (6-19 ms around a 10 ms mean, measured), so a group mean is noisy:
    # four per size, not two (about 0.4 s more at start-up on synthetic-100k).
    per_size = max(4, 2 * PROBE_STEPS // group)
    order = [size for k in range(2 + 2 * per_size) for size in [sizes[k % 2]] * group]
    plan = [_draw(seeds, size, rng) for size in order]
    ready: queue.Queue = queue.Queue(maxsize=1)
    gather = _gatherer(batches.loader, target.device)

    def load() -> None:
        try:
            if stretch is not None:
                stretch.mark()
            c0 = time.thread_time()
            stream = batches.sampler.sample_stream(ids for _, ids in plan)
            for (n, _), batch in zip(plan, stream):
                x = gather(batch.input_nodes)
                y = batches.loader.labels_of(batch.seed_nodes) if n else None
                c1 = time.thread_time()
                if stretch is not None:
                    stretch.tick()
                ready.put((n, batch, x, y, c1 - c0))
                c0 = time.thread_time()
        except BaseException as exc:  # noqa: BLE001 - handed to the training thread
            ready.put(exc)

    thread = threading.Thread(target=load, name="graphdist-probe-loader", daemon=True)
    thread.start()
    steps: list[tuple[float, ...]] = []
    if stretch is not None:
        stretch.mark()
    # The process's CPU besides the two threads (gloo's threads running the exchanges, the
    # allocator, the interpreter between them): on a core of its own it takes turns with them too.
    # A stretch spun on the core is the threads' emulated work, not this.
    spun = (lambda: stretch.spun_s) if stretch is not None else (lambda: 0.0)
    last, last_cpu = time.perf_counter(), time.process_time() - spun()
    for _ in range(len(plan)):
        item = ready.get(timeout=target.timeout)
        if isinstance(item, BaseException):
            raise item
        n, batch, x, y, load_cpu = item
        c0, t_got = time.thread_time(), time.perf_counter()
        _, sync_wait = _train_step(target, sync, optimizer, batch, x, y, n)
        cpu = time.thread_time() - c0
        if stretch is not None:
            stretch.tick()
        now, now_cpu = time.perf_counter(), time.process_time() - spun()
        steps.append((n, now - last, load_cpu, cpu, sync_wait, now - t_got - sync_wait, now_cpu - last_cpu))
        last, last_cpu = now, now_cpu
    thread.join(timeout=target.timeout)
    # Timed: every group after the first of each size, as its mean step (groups are all one length,
    # so the fits and averages over these weigh every group alike, as over its steps).
    groups = [steps[start:start + group] for start in range(2 * group, len(steps), group)]
    return [tuple(sum(col) / len(members) for col in zip(*members)) for members in groups if members[0][0]]


def _gatherer(loader: Any, device: torch.device) -> Callable[[torch.Tensor], Optional[torch.Tensor]]:
    """Gathers a batch's input features as the loader does: into a few recycled buffers.

    A fresh ``[inputs, F]`` tensor per batch costs page faults comparable to the gather itself
    (``sampling/loader.py``), which training does not pay: probes that allocated read the loading
    thread's CPU at 2.2-2.7 ms a batch of 255 seeds, 1.9-2.3 ms with buffers (synthetic-100k, GraphSAGE
    [10, 5]). Four buffers: the batch training, the one queued, the one gathering, and one spare.
    """
    from sampling.prefetch import BufferRing

    features = loader.features
    if features is None:
        return lambda _ids: None
    if features.device.type != "cpu":  # rows on the device (--sample-on device): gathered there, as training does
        return lambda ids: loader.rows_of(ids)
    ring = BufferRing(4, features.num_features, features.dtype, pin=device.type == "cuda")
    return lambda ids: loader.rows_of(ids, out=ring.take(ids.numel()))


def _measures(model: torch.nn.Module, seen: dict[str, list[tuple[float, float]]],
              rows: list[list[tuple[float, float]]], pipelined: list[tuple[float, ...]]) -> dict[str, Any]:
    """The probes' traffic, waits and rows as ``(fixed, per_seed)`` fits, and the model's shape."""

    def fit(v: list[tuple[float, float]]) -> tuple[float, float]:
        if not any(y > 0 for _, y in v):  # nothing sent (one worker, or every remote row cached)
            return (0.0, 0.0)
        c = fit_cost(v)
        return (c.fixed_s, c.per_seed_s)

    def typical(v: list[tuple[float, float]]) -> tuple[float, float]:
        # Through each size's median group: one group in four often waits 20-30% longer on the
        # stream's exchanges (measured: 9.0-13.1 ms around 10 ms at one size), and a mean carries it.
        by_size: dict[float, list[float]] = {}
        for x, y in v:
            by_size.setdefault(x, []).append(y)
        return fit([(x, statistics.median(ys)) for x, ys in by_size.items()])

    layers = [fit([step[layer] for step in rows]) for layer in range(len(rows[0]))] if rows else []
    return {"bytes": {tag: fit(seen[tag]) for tag in ("sample", "feature")}, "wait": fit(seen["wait"]),
            "sync_wait": sum(w for _, w in seen["sync_wait"]) / max(1, len(seen["sync_wait"])),
            "exchanges": sum(c for _, c in seen["exchanges"]) / max(1, len(seen["exchanges"])), "rows": layers,
            **model_shape(model),
            "pipelined": {"step": typical([(r[0], r[1]) for r in pipelined]),
                          "load_cpu": typical([(r[0], r[2]) for r in pipelined]),
                          "compute_cpu": typical([(r[0], r[3]) for r in pipelined]),
                          "compute_wall": typical([(r[0], r[5]) for r in pipelined]),
                          "other_cpu": typical([(r[0], max(0.0, r[6] - r[2] - r[3])) for r in pipelined]),
                          "sync_wait": sum(r[4] for r in pipelined) / max(1, len(pipelined)),
                          # The timed groups themselves, so a reader can see the scatter behind the fits.
                          "groups": [[round(v, 7) for v in r] for r in pipelined]} if pipelined else None}


def probe_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A training copy of ``model`` for probe steps, without the hooks others attached to it.

    A plain deep copy keeps every module hook (not the parameters' hooks): made after the run's
    sync (SACP's capture and its weight exchange) or the test slowdown's tick is attached, the
    probes would run that machinery too, against the original's state, and time it as the model's
    own compute. Hooks bound to a module of the model itself (PyG's lazy initialisation) are the
    model's own and are kept.

    >>> m = torch.nn.Linear(2, 2)
    >>> _ = m.register_forward_hook(lambda *_: print("hook"))
    >>> _ = probe_copy(m)(torch.zeros(1, 2))
    """
    own = {id(m) for m in model.modules()}
    memo: dict[int, Any] = {}
    kept: list[tuple[Any, Any, Any]] = []
    for m in model.modules():
        for d in (m._forward_hooks, m._forward_pre_hooks, m._backward_hooks, m._backward_pre_hooks):
            # Empty hook dicts seeded into the copy's memo: foreign hooks, and the objects they are
            # bound to, are never copied; the model's own are copied once its modules are.
            memo[id(d)] = type(d)()
            kept += [(memo[id(d)], k, h) for k, h in d.items() if id(getattr(h, "__self__", None)) in own]
    clone = copy.deepcopy(model, memo)
    for d, k, h in kept:
        d[k] = copy.deepcopy(h, memo)  # bound to the copy's module: the memo maps each module to its copy
    for p, q in zip(model.parameters(), clone.parameters()):  # a Parameter's deep copy drops its attributes
        if is_row_wise(p):
            mark_row_wise(q)
    return clone.train()


def global_rng_state() -> tuple[Any, Any, Any]:
    """torch's, numpy's and Python's global generator states (dropout and shuffles draw from them)."""
    return torch.get_rng_state(), np.random.get_state(), random.getstate()


def restore_global_rng(states: tuple[Any, Any, Any]) -> None:
    """Puts back what :func:`global_rng_state` read."""
    torch.set_rng_state(states[0])
    np.random.set_state(states[1])
    random.setstate(states[2])


def _rng_states(batches: Any) -> dict[str, Any]:
    return {"global": global_rng_state(), "sampler": batches.sampler.get_state(),
            "serve": batches.neighbor_source.get_state(),
            "cache": copy.copy(getattr(batches.features, "stats", None))}


def _restore(batches: Any, s: dict[str, Any]) -> None:
    restore_global_rng(s["global"])
    batches.sampler.set_state(s["sampler"])
    if s["serve"] is not None:
        batches.neighbor_source.set_state(s["serve"])
    if s["cache"] is not None:
        batches.features.stats = s["cache"]
