"""Start-up profiler: each rank times probe batches of the real model, the ranks fit costs and pick start shares.

``--placement profiled`` (HyScale-GNN's performance model, measured): before the first epoch
every rank trains a few probe steps on a *copy* of the model, with its own optimizer, sampler
generator and feature path, at two batch sizes (its share and twice that), timing sampling,
gathering (CPU time: their collectives may wait for other ranks, which is not this rank's
work) and compute (forward, backward under the run's own gradient sync, optimizer; wall time, the
wait for the exposed part of the gradient exchange excluded) apart. Each rank's
``T(b) = T_sample(b) + T_gather(b) + T_compute(b)`` (serial: the loader samples in the
training thread; with prefetch the larger of sampling+gather and compute) is fitted as a
:class:`placement.shares.LinearCost`; the costs are gathered and :func:`placement.shares.balanced_shares`
gives the start shares, the same on every rank. When the predicted times at the plan's shares
are already within ``1 + --rebalance-eps`` the plan's shares stay (homogeneous workers keep the
deterministic default). Probes leave the model, the optimizer and every RNG stream untouched:
the global generators are restored, the sampler's and the neighbour source's serving state too.

The profile is cached in the run directory (``profile.json``, keyed by what shapes the cost:
model, widths, fan-outs, batch, workers, devices, threads, replication), so a resumed run starts
from the same shares without probing again: resume stays bit-identical.

Example (reading a cached profile):
    >>> profile = Profile(key={"workers": 2}, costs=[(0.001, 1e-4), (0.002, 2e-4)], shares=[67, 33])
    >>> Profile.from_json(profile.to_json()).linear_costs()[1].per_seed_s
    0.0002
"""

from __future__ import annotations

import copy
import json
import logging
import random
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import torch

from graphdist import comm, runlog
from placement.shares import LinearCost, balanced_shares, fit_cost, imbalance

logger = logging.getLogger(__name__)

PROFILE_NAME = "profile.json"
PROBE_STEPS = 4  # timed steps per batch size (after one untimed warm-up each)

__all__ = ["PROFILE_NAME", "Profile", "profile_fullgraph", "profile_shares"]


@dataclass
class Profile:
    """Fitted per-rank costs and the start shares they gave.

    Attributes:
        key: what the costs depend on; a cached profile with another key is measured again.
        costs: per rank ``(fixed_s, per_seed_s)`` of a step.
        shares: the start shares chosen from them.
        parts: per rank ``{"sample": (a, c), "gather": ..., "compute": ...}`` (for the log and the simulator).
        measures: per rank what the simulator (``placement.simulator``) needs beyond CPU costs, each
            linear in the share as ``(fixed, per_seed)``: ``bytes`` this rank sends per step by tag
            (``sample``, ``feature``), ``wait`` (wall minus CPU time of sampling and gathering: time
            in exchanges), ``sync_wait`` (mean seconds a step waited for its gradient exchange), ``rows``
            per layer (the destination rows of each block: SACP's K), ``exchanges`` per step, the
            model's ``linears`` (``[name, out, in]``) and ``param_bytes``, and ``pipelined``: the probes again with a loading thread beside the training thread, as
            prefetch runs them (wall ``step``, each thread's CPU, the training thread's wall, the
            gradient wait).
        fullgraph: ``--strategy fullgraph`` instead: per rank its exact full-graph step
            (:func:`profile_fullgraph`): ``compute_s``, ``halo_wait_s``, ``sync_wait_s``,
            ``send_rows`` per rank, the exchanged layers' ``widths``, ``inner`` rows, ``linears``
            and ``param_bytes`` (``placement.profiled.fullgraph_costs_from_profile``).
    """

    key: dict[str, Any]
    costs: list[tuple[float, float]]
    shares: list[int]
    parts: Optional[list[dict[str, tuple[float, float]]]] = None
    measures: Optional[list[dict[str, Any]]] = None
    fullgraph: Optional[list[dict[str, Any]]] = None

    def linear_costs(self) -> list[LinearCost]:
        return [LinearCost(a, c) for a, c in self.costs]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> "Profile":
        d = json.loads(text)
        return cls(key=d["key"], costs=[tuple(c) for c in d["costs"]], shares=[int(s) for s in d["shares"]],
                   parts=d.get("parts"), measures=d.get("measures"), fullgraph=d.get("fullgraph"))


def profile_key(cfg: Any, world_size: int, plan_shares: list[int]) -> dict[str, Any]:
    """The config fields a step's cost depends on (a JSON-able dict)."""
    return {"model": cfg.model, "hidden": cfg.hidden, "layers": cfg.layers, "fanouts": list(cfg.fanouts),
            "heads": cfg.heads, "batch_size": cfg.batch_size, "workers": world_size, "devices": list(cfg.devices),
            "threads": cfg.threads, "replicate": cfg.replicate, "prefetch": cfg.prefetch, "shares": plan_shares,
            "partitions": cfg.partitions}


def profile_shares(strategy: Any, run_dir: Optional[Path]) -> list[int]:
    """Start shares for ``strategy`` (a ``MinibatchStrategy``): from the cached profile or fresh probes.

    Collective: every rank calls it at the same point, after the strategy is built.
    """
    cfg, world = strategy.ctx.cfg, strategy.ctx.world_size
    plan_shares = [r.batch_share for r in strategy.ctx.plan.ranks]
    key = profile_key(cfg, world, plan_shares)
    cached = _read_cached(run_dir, key)
    if comm.all_gather_object(cached is not None) != [True] * world:
        cached = None  # one rank could not read it: all probe, or they would disagree
    if cached is not None:
        return cached.shares
    mine, measures = probe(strategy, plan_shares[strategy.ctx.rank])
    gathered, measured = zip(*comm.all_gather_object((mine, measures)))
    costs = [_total(parts, strategy.loader.prefetch, share) for parts, share in zip(gathered, plan_shares)]
    shares = plan_shares
    if imbalance([c.time(s) for c, s in zip(costs, plan_shares)]) > 1.0 + cfg.rebalance_eps:
        shares = balanced_shares(costs, total=sum(plan_shares))
    profile = Profile(key=key, costs=[(c.fixed_s, c.per_seed_s) for c in costs], shares=shares,
                      parts=[{k: (v.fixed_s, v.per_seed_s) for k, v in p.items()} for p in gathered],
                      measures=list(measured))
    if comm.is_main_process():
        logger.info("profile: %s -> start shares %s (plan %s)",
                    [f"{c.fixed_s * 1e3:.1f}ms+{c.per_seed_s * 1e6:.0f}us/seed" for c in costs], shares, plan_shares)
        if run_dir is not None:
            _write(run_dir, profile)
    return shares


def profile_fullgraph(strategy: Any, run_dir: Optional[Path]) -> Profile:
    """``--strategy fullgraph --placement profiled``: the cached profile, or exact probe steps on every rank.

    A full-graph step has no batch share to choose: the profile is what ``graphdist-plan`` and
    ``placement.simulator.simulate_fullgraph`` predict other layouts and staleness from. Collective:
    every rank calls it at the same point, after the strategy is built.
    """
    cfg, world = strategy.ctx.cfg, strategy.ctx.world_size
    plan_shares = [r.batch_share for r in strategy.ctx.plan.ranks]
    key = {**profile_key(cfg, world, plan_shares), "strategy": "fullgraph", "sync": cfg.sync}
    cached = _read_cached(run_dir, key)
    if comm.all_gather_object(cached is not None) == [True] * world:
        return cached  # type: ignore[return-value]
    measured = comm.all_gather_object(probe_fullgraph(strategy))
    profile = Profile(key=key, costs=[(m["compute_s"] + m["halo_wait_s"] + m["sync_wait_s"], 0.0) for m in measured],
                      shares=plan_shares, fullgraph=list(measured))
    if comm.is_main_process():
        logger.info("profile: full-graph step per rank %s (compute + halo wait + gradient wait, staleness 0)",
                    ", ".join(f"{1e3 * m['compute_s']:.0f}+{1e3 * m['halo_wait_s']:.0f}+{1e3 * m['sync_wait_s']:.0f} ms"
                              for m in measured))
        if run_dir is not None:
            _write(run_dir, profile)
    return profile


def probe_fullgraph(strategy: Any) -> dict[str, Any]:
    """This rank's exact (staleness 0) full-graph step, timed on a model copy with its own optimizer.

    Two untimed warm-up steps (a process's first full-graph steps grow its heap), then
    ``PROBE_STEPS`` timed ones; medians. The halo plan is the
    run's (a copy without its stale buffers); the global RNGs are restored (dropout draws).
    """
    from graphdist.sync import make_sync
    from graphdist.trainers.base import gradient_allreduce, sync_options
    from graphdist.trainers.fullgraph import FullGraphNet

    cfg = strategy.ctx.cfg
    states = _global_rng()
    model = probe_copy(strategy.model)
    halo = copy.copy(strategy.halo)
    halo.staleness, halo._stale, halo.widths = 0, {}, {}
    net = FullGraphNet(model, halo, strategy.x0, strategy.net.block, strategy.device)
    sync = make_sync(cfg.sync, net, seed_weighted=False, algorithm=gradient_allreduce(strategy.ctx, net),
                     **sync_options(cfg))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-6)
    n = int(strategy.train.numel())
    timed: list[tuple[float, float, float]] = []
    try:
        for step in range(2 + PROBE_STEPS):
            before = comm.time_counts().get("halo", 0.0)
            t0 = time.perf_counter()
            optimizer.zero_grad()
            sync.begin_step(n)
            strategy.loss(sync.model()).backward()
            t_wait = time.perf_counter()
            sync.finish()
            t_synced = time.perf_counter()
            optimizer.step()
            wall = time.perf_counter() - t0
            halo_wait = comm.time_counts().get("halo", 0.0) - before
            if step >= 2:
                timed.append((wall - (t_synced - t_wait) - halo_wait, halo_wait, t_synced - t_wait))
    finally:
        sync.close()
        _restore_global(states)
    median = [float(np.median([t[k] for t in timed])) for k in range(3)]
    return {"compute_s": median[0], "halo_wait_s": median[1], "sync_wait_s": median[2],
            "send_rows": list(halo.send_rows), "widths": [halo.widths[k] for k in sorted(halo.widths)],
            "inner": int(halo.num_inner), **_model_shape(model)}


def _model_shape(model: torch.nn.Module) -> dict[str, Any]:
    """The simulator's model shape: its Linear layers ``[name, out, in]`` and all parameter bytes."""
    from graphdist.sync.sacp import is_linear

    return {"linears": [[name, int(m.weight.shape[0]), int(m.weight.shape[1])] for name, m in model.named_modules()
                        if is_linear(m)],
            "param_bytes": sum(p.numel() * p.element_size() for p in model.parameters())}


def _total(parts: dict[str, LinearCost], prefetch: bool, share: int) -> LinearCost:
    """A step's cost from its parts: serial, or with prefetch the larger of loading and compute at ``share``."""
    load = LinearCost(parts["sample"].fixed_s + parts["gather"].fixed_s,
                      parts["sample"].per_seed_s + parts["gather"].per_seed_s)
    compute = parts["compute"]
    if not prefetch:
        return LinearCost(load.fixed_s + compute.fixed_s, load.per_seed_s + compute.per_seed_s)
    return max(load, compute, key=lambda c: c.time(share))


def probe(strategy: Any, share: int) -> tuple[dict[str, LinearCost], dict[str, Any]]:
    """This rank's fitted sample / gather / compute costs from probe steps at two batch sizes, and
    the simulator's measures (``Profile.measures``).

    Every rank runs the same number of probe batches (the distributed sampler and the feature
    fetch are collectives). Nothing the training depends on is touched: a model copy with its
    own optimizer; global RNGs, the sampler's generator and the serving generator restored.
    """
    batches = strategy.batches
    states = _rng_states(batches)
    stretch = getattr(strategy, "stretch", None)
    if stretch is not None:
        stretch.set_epoch(1)  # a slowdown from the start shows in the probes
    # The copy trains under the run's own gradient sync (hooks, SACP's capture, the allreduce):
    # what a step costs beyond forward and backward is measured, not guessed.
    sync = _probe_sync(strategy, probe_copy(strategy.model))
    optimizer = torch.optim.Adam(sync.model.parameters(), lr=1e-6)
    seeds = batches.train_seeds
    rng = torch.Generator().manual_seed(12345 + strategy.ctx.rank)
    samples: dict[str, list[tuple[float, float]]] = {"sample": [], "gather": [], "compute": []}
    seen: dict[str, list[tuple[float, float]]] = {"sample": [], "feature": [], "wait": [], "exchanges": [],
                                                  "sync_wait": []}
    rows: list[list[tuple[float, float]]] = []
    # A stretch spun on a core of its own is in thread_time already; only a slept one is added.
    slept = (lambda: stretch.slept_s) if stretch is not None else (lambda: 0.0)
    gather = _gatherer(batches.loader, strategy.device)
    try:
        sizes = (max(1, share), max(2, 2 * share))
        # Alternating sizes, after one warm-up step at each: warm-up effects (allocator growth,
        # first-touch pages) then fall on both sizes alike instead of inflating the first's fixed part.
        order = list(sizes) + [sizes[k % 2] for k in range(2 * PROBE_STEPS)]
        for step, size in enumerate(order):
            n = min(size, int(seeds.numel()))
            batch_seeds = seeds[torch.randperm(seeds.numel(), generator=rng)[:n]] if n else seeds[:0]
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
            y = batches.loader.labels(batch.seed_nodes) if n else None
            c2 = time.thread_time()
            t2 = time.perf_counter()
            sent_now, calls_now = comm.byte_counts(), comm.call_counts()
            compute_s, sync_wait = _train_step(strategy, sync, optimizer, batch, x, y, n)
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
        pipelined = _pipelined(strategy, sync, optimizer, sizes, seeds, rng, stretch)
    finally:
        sync.close()
        _restore(batches, states)
    if not samples["compute"]:
        return {k: LinearCost(0.0, 1e-6) for k in samples}, {}
    return {k: fit_cost(v) for k, v in samples.items()}, _measures(strategy.model, seen, rows, pipelined)


def _train_step(strategy: Any, sync: Any, optimizer: torch.optim.Optimizer, batch: Any, x: Any, y: Any,
                n: int) -> tuple[float, float]:
    """One probe step of the model copy as training runs it: ``(seconds without the gradient wait, that wait)``."""
    from graphdist.trainers.features import model_inputs

    t0 = time.perf_counter()
    inputs, blocks = model_inputs(x, batch.blocks, strategy.with_degrees)
    optimizer.zero_grad()
    sync.begin_step(n)
    out = sync.model(inputs.to(strategy.device), [b.to(strategy.device) for b in blocks])
    loss = strategy.task.loss(out, y.to(strategy.device)) if n else out.sum() * 0.0
    loss.backward()
    t_wait = time.perf_counter()
    sync.finish()  # the exposed part of the gradient exchange: the simulator's, per link
    t_synced = time.perf_counter()
    optimizer.step()
    float(loss.detach())  # waits for a device's kernels
    return time.perf_counter() - t0 - (t_synced - t_wait), t_synced - t_wait


def _pipelined(strategy: Any, sync: Any, optimizer: torch.optim.Optimizer, sizes: tuple[int, int],
               seeds: torch.Tensor, rng: torch.Generator, stretch: Any) -> list[tuple[float, ...]]:
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

    batches = strategy.batches
    group = 1 + max(0, int(getattr(batches.sampler, "lookahead", 0)))
    # Timed groups of each size (one untimed group each first). Steps inside a group wait on the
    # stream's exchanges unevenly (6-19 ms around a 10 ms mean, measured), so a group mean is noisy:
    # four per size, not two (about 0.4 s more at start-up on synthetic-100k).
    per_size = max(4, 2 * PROBE_STEPS // group)
    order = [size for k in range(2 + 2 * per_size) for size in [sizes[k % 2]] * group]
    plan = []
    for size in order:
        n = min(size, int(seeds.numel()))
        plan.append((n, seeds[torch.randperm(seeds.numel(), generator=rng)[:n]] if n else seeds[:0]))
    ready: queue.Queue = queue.Queue(maxsize=1)
    gather = _gatherer(batches.loader, strategy.device)

    def load() -> None:
        try:
            if stretch is not None:
                stretch.mark()
            c0 = time.thread_time()
            stream = batches.sampler.sample_stream(ids for _, ids in plan)
            for (n, _), batch in zip(plan, stream):
                x = gather(batch.input_nodes)
                y = batches.loader.labels(batch.seed_nodes) if n else None
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
    spun = (lambda: stretch.extra_s - stretch.slept_s) if stretch is not None else (lambda: 0.0)
    last, last_cpu = time.perf_counter(), time.process_time() - spun()
    for _ in range(len(plan)):
        item = ready.get(timeout=strategy.ctx.cfg.timeout)
        if isinstance(item, BaseException):
            raise item
        n, batch, x, y, load_cpu = item
        c0, t_got = time.thread_time(), time.perf_counter()
        _, sync_wait = _train_step(strategy, sync, optimizer, batch, x, y, n)
        cpu = time.thread_time() - c0
        if stretch is not None:
            stretch.tick()
        now, now_cpu = time.perf_counter(), time.process_time() - spun()
        steps.append((n, now - last, load_cpu, cpu, sync_wait, now - t_got - sync_wait, now_cpu - last_cpu))
        last, last_cpu = now, now_cpu
    thread.join(timeout=strategy.ctx.cfg.timeout)
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
    ring = BufferRing(4, features.num_features, features.dtype, pin=device.type == "cuda")
    return lambda ids: features.gather(ids, out=ring.take(ids.numel()))


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
            **_model_shape(model),
            "pipelined": {"step": typical([(r[0], r[1]) for r in pipelined]),
                          "load_cpu": typical([(r[0], r[2]) for r in pipelined]),
                          "compute_cpu": typical([(r[0], r[3]) for r in pipelined]),
                          "compute_wall": typical([(r[0], r[5]) for r in pipelined]),
                          "other_cpu": typical([(r[0], max(0.0, r[6] - r[2] - r[3])) for r in pipelined]),
                          "sync_wait": sum(r[4] for r in pipelined) / max(1, len(pipelined)),
                          # The timed groups themselves, so a reader can see the scatter behind the fits.
                          "groups": [[round(v, 7) for v in r] for r in pipelined]} if pipelined else None}


def _probe_sync(strategy: Any, model: torch.nn.Module) -> Any:
    """The run's gradient sync around the probes' model copy (collective: built on every rank alike)."""
    from graphdist.sync import make_sync
    from graphdist.trainers.base import gradient_allreduce, sync_options

    cfg = strategy.ctx.cfg
    return make_sync(cfg.sync, model, algorithm=gradient_allreduce(strategy.ctx, model), **sync_options(cfg))


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
    return clone.train()


def _global_rng() -> tuple[Any, Any, Any]:
    return torch.get_rng_state(), np.random.get_state(), random.getstate()


def _restore_global(states: tuple[Any, Any, Any]) -> None:
    torch.set_rng_state(states[0])
    np.random.set_state(states[1])
    random.setstate(states[2])


def _rng_states(batches: Any) -> dict[str, Any]:
    return {"global": _global_rng(), "sampler": batches.sampler.get_state(),
            "serve": batches.neighbor_source.get_state(),
            "cache": copy.copy(getattr(batches.features, "stats", None))}


def _restore(batches: Any, s: dict[str, Any]) -> None:
    _restore_global(s["global"])
    batches.sampler.set_state(s["sampler"])
    if s["serve"] is not None:
        batches.neighbor_source.set_state(s["serve"])
    if s["cache"] is not None:
        batches.features.stats = s["cache"]


def _read_cached(run_dir: Optional[Path], key: dict[str, Any]) -> Optional[Profile]:
    path = Path(run_dir) / PROFILE_NAME if run_dir is not None else None
    if path is None or not path.exists():
        return None
    try:
        profile = Profile.from_json(path.read_text())
    except (OSError, ValueError, KeyError, TypeError):
        logger.warning("%s: unreadable; profiling again", path)
        return None
    return profile if profile.key == key else None


def _write(run_dir: Path, profile: Profile) -> None:
    runlog.write_text_atomic(Path(run_dir) / PROFILE_NAME, profile.to_json(), "the placement profile")
