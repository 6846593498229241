"""Epoch time of a cluster from a profile: HyScale-GNN's performance model, run forward.

The start-up profiler (``--placement profiled``, ``graphdist/trainers/profile.py``) measures on
the workers it runs on, per worker and as linear functions of the batch share ``b``: the CPU
time of sampling, gathering and compute (forward, backward under the run's own gradient sync,
optimizer), the time its exchanges waited, the bytes it sends for sampling and features, the
destination rows of each layer (SACP's ``K``), the gradient wait, and the model's Linear
shapes. :func:`simulate` predicts the step and epoch time of the same workload on another
layout (hosts, link rates, cores, slow workers), per worker:

- ``load_i  = (sample + gather)(b_i) * s_i + wait_i(b_i) + net_i``: ``net_i`` is the time its
  host's uplink needs for the traffic that crosses hosts (each worker's bytes times the share of
  its partners' edges that live on other hosts), plus one link latency per exchange;
- ``compute_i = compute(b_i) * s_i``; ``s_i`` stretches a worker (``GRAPHDIST_TEST_SLOWDOWN``'s
  factor; a slower device);
- ``own_i = max(load_i, compute_i + sync)`` with prefetch (the loader samples the next batch
  while the model trains), ``load_i + compute_i + sync`` without;
- where the profile's pipelined probes (a loading thread beside the training thread) were
  measured on cores shared as in ``layout``, they replace these sums: ``own_i`` is the larger of
  the contended loading path, the measured contended step plus ``sync``, and the training
  thread's measured wall plus a slow worker's extra CPU work plus ``sync``;
- the cores of a machine bound all of its workers together: ``sum_i cpu_i / cores`` (slow
  workers' stretch is waiting, not CPU);
- a worker bound to its own core (``--bind-cores``: 2+ workers filling their machine's cores)
  takes turns on it with its loading thread: ``own_i >= cpu_i * s_i + sync``;
- ``step = max(own_i, machine bounds)``; ``epoch = steps * step``.

``--strategy fullgraph`` has its own probe (exact full-graph steps, :class:`FullGraphCosts`) and
:func:`simulate_fullgraph`: one step per epoch; per exchanged layer of width ``d`` each worker
sends its boundary rows ``x d x 4`` bytes to the ranks that hold them as halo (forward) and gets
the same rows' gradients back (backward), each exchange bound by the busiest host uplink. With
``staleness 0`` every exchange blocks its layer: ``step = compute + halo wait`` as profiled plus
what the slower links add; with ``staleness 1`` the exchanges travel during the step:
``step = max(compute + transfer, exchange)``, where ``transfer`` is the exchanges' own CPU work
(as profiled: the least wait of any rank, which waited for no peer), counted only where a
machine has no core to spare for it; both plus the gradient wait.

``sync`` is the gradient wait the profile measured (the least of any rank's: that rank arrived
last and waited for the exchange alone, the others' waits also hold its lateness, which their
measured step already does) plus what a slower link adds: the exchange is
scheduled as DWBP sends it (layer by layer as backward produces the gradients, last layer first,
each as soon as its weight gradient exists, before its input gradient: ``graphdist.sync.reorder``;
one layer after another on the wire; ``blocking`` and ``ddp`` after the whole backward), each
layer dense (ring allreduce, ``2 (P-1)/P`` of its bytes over the slowest link of the ring) or,
under SACP, as sufficient factors when Poseidon's rule picks them. Backward is taken as 2/3 of
compute, split over layers by their matmul work ``K * in * out``. These two, and the link
latency, are the model's stated assumptions; everything else is measured.

Bytes follow the run's ``--compress`` (:class:`Wire`): a dense gradient value costs 4 bytes, 2
under fp16/bf16, ``1 + 4/block`` under int8; SACP's factors travel in float32 or the 16-bit
cast, and its rule weighs them against the dense payload in those bytes, as the sync does; a
halo value costs 4 bytes, 2 under fp16/bf16. Aggregation's parameter averages are exact (float32).

Example:
    >>> w = WorkerCosts(sample=LinearCost(0.001, 1e-5), gather=LinearCost(0.0, 1e-5),
    ...                 compute=LinearCost(0.002, 4e-5), sent_bytes=LinearCost(0.0, 100.0))
    >>> fast = simulate([w, w], [256, 256], Layout.one_host(2, cores=4), steps=10)
    >>> slow = simulate([w, w], [256, 256], Layout.hosts_of([1, 1], link_bps=1e6), steps=10)
    >>> round(fast.step_s * 1e3, 2), slow.step_s > fast.step_s, slow.bottleneck
    (12.24, True, 'network')
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

from placement.layout import Layout
from placement.shares import LinearCost

__all__ = ["EpochPrediction", "FullGraphCosts", "Layout", "ModelShape", "Pipelined", "Wire", "WorkerCosts",
           "simulate", "simulate_fullgraph"]

BACKWARD_FRACTION = 2.0 / 3.0  # backward's share of forward + backward (about twice the forward FLOPs)


@dataclass(frozen=True)
class WorkerCosts:
    """One worker's measured costs per step, each linear in its share (``placement.shares.LinearCost``).

    ``sample``, ``gather``, ``compute`` are seconds; ``wait`` seconds its exchanges waited;
    ``sent_bytes`` bytes it sends for sampling and features; ``rows`` per layer its destination
    rows (SACP's ``K``); ``exchanges`` collectives per step; ``sync_wait_s`` the gradient wait
    measured where it was profiled.
    """

    sample: LinearCost
    gather: LinearCost
    compute: LinearCost
    wait: LinearCost = LinearCost(0.0, 0.0)
    sent_bytes: LinearCost = LinearCost(0.0, 0.0)
    rows: tuple[LinearCost, ...] = ()
    exchanges: float = 0.0
    sync_wait_s: float = 0.0
    pipelined: Optional["Pipelined"] = None


@dataclass(frozen=True)
class Pipelined:
    """The probe steps run as training runs them with prefetch (loading thread beside the training
    thread, on the cores they will share): wall ``step``, each thread's CPU, and the gradient wait."""

    step: LinearCost
    load_cpu: LinearCost
    compute_cpu: LinearCost
    compute_wall: LinearCost
    sync_wait_s: float = 0.0
    other_cpu: LinearCost = LinearCost(0.0, 0.0)  # the process's other threads (gloo's exchanges...)


@dataclass(frozen=True)
class FullGraphCosts:
    """One worker's measured full-graph step (``--strategy fullgraph`` probes: exact, staleness 0).

    ``compute_s`` its own work per step (forward, backward, optimizer; no waits); ``send_rows``
    per rank the boundary rows it sends that rank in each exchange (its own entry unused);
    ``widths`` each exchanged layer's width (the inputs of layers 1..L-1); ``inner`` its inner
    rows (every layer's destination rows); ``halo_wait_s`` and ``sync_wait_s`` what its halo
    exchanges and its gradient exchange waited where it was profiled.
    """

    compute_s: float
    send_rows: tuple[int, ...]
    widths: tuple[int, ...]
    inner: int
    halo_wait_s: float = 0.0
    sync_wait_s: float = 0.0


@dataclass(frozen=True)
class ModelShape:
    """The Linear layers ``(name, out, in)`` in forward order, and all parameter bytes (float32)."""

    linears: tuple[tuple[str, int, int], ...] = ()
    param_bytes: int = 0


@dataclass(frozen=True)
class Wire:
    """Bytes a value costs on the wire under the run's ``--compress``: a dense gradient's (``grad``),
    SACP's factors' (``factor``), a full-graph halo row's (``halo``). Float32 by default;
    ``graphdist.sync.compress.wire_bytes`` gives ``grad`` for a compression."""

    grad: float = 4.0
    factor: float = 4.0
    halo: float = 4.0


@dataclass
class EpochPrediction:
    """Predicted step and epoch time, per worker its critical path, and what bounds the step."""

    step_s: float
    epoch_s: float
    steps: int
    per_worker_s: list[float]
    sync_s: float
    bottleneck: str
    parts: dict[str, float] = field(default_factory=dict)

    def line(self) -> str:
        return (f"{self.epoch_s:.2f} s/epoch ({self.steps} steps of {1e3 * self.step_s:.1f} ms; bound by "
                f"{self.bottleneck}; gradient wait {1e3 * self.sync_s:.1f} ms)")


# cost model -> the profile it predicts from: "seeds" (per-seed costs of sampled steps, a --strategy
# minibatch or aggregation profile) or "fullgraph" (whole-part steps, a --strategy fullgraph profile).
# A strategy names its model (graphdist.options.StrategySpec.cost_model); placement.profiled.predict_from_profile
# runs it.
COST_MODELS: dict[str, str] = {"minibatch": "seeds", "aggregation": "seeds", "fullgraph": "fullgraph"}


def simulate(workers: Sequence[WorkerCosts], shares: Sequence[int], layout: Layout, steps: int,
             model: ModelShape = ModelShape(), overlap: bool = True, sacp: bool = True, prefetch: bool = True,
             slowdown: Optional[Sequence[float]] = None, profiled_layout: Optional[Layout] = None,
             strategy: str = "minibatch", avg_every: int = 10, avg_overlap: bool = False,
             wire: Wire = Wire(), loaders: Optional[Sequence[int]] = None) -> EpochPrediction:
    """The predicted minibatch epoch of ``workers`` with ``shares`` on ``layout`` (see the module doc).

    Args:
        workers: per worker its measured costs (``placement.profiled.costs_from_profile``).
        shares: per worker its seeds per step.
        layout: hosts, links and cores to predict for.
        steps: steps per epoch.
        model: the Linear shapes (the gradient exchange's bytes); empty: no gradient term beyond
            the measured wait.
        overlap: the sync hides each layer's exchange behind the rest of backward (DWBP:
            ``graphdist.sync.modes.SyncMode.overlaps_backward``); False: every exchange after backward.
        sacp: SACP's sufficient factors where Poseidon's rule picks them (the caller passes False
            where the sync does not send layer by layer: ``SyncMode.layerwise``).
        prefetch: the loader overlaps the next batch with compute.
        slowdown: per worker a factor >= 1 on its own work (default 1).
        profiled_layout: where the profile was measured (default one host): the gradient wait it
            measured is kept, the simulated difference between the two layouts added.
        strategy: ``minibatch``; or ``aggregation`` (each worker samples its own part only, no
            traffic per step; every ``avg_every`` steps the parameters are averaged by a ring
            allreduce, its time spread over those steps). ``fullgraph``: :func:`simulate_fullgraph`
            (its costs are per full-graph step, not per seed).
        avg_every: aggregation's steps between averages.
        avg_overlap: aggregation's ``--avg-overlap``: each average travels during the next step,
            and only what outlasts that step is exposed.
        wire: bytes a gradient value and a factor value cost (``--compress``); float32 by default.
        loaders: per worker its loader processes (``--loaders``; default none): K >= 1 spread the worker's
            sampling and gathering over K processes that overlap its step (the loading path is K times the
            measured one; their CPU still counts against the machine's cores).
    """
    if strategy == "fullgraph":
        raise ValueError("simulate: fullgraph's costs are per full-graph step: use simulate_fullgraph with "
                         "placement.profiled.fullgraph_costs_from_profile (a profile of --strategy fullgraph "
                         "--placement profiled)")
    if strategy not in ("minibatch", "aggregation"):
        raise ValueError(f"simulate: strategy {strategy!r} is not modelled (minibatch, aggregation, fullgraph)")
    n = len(workers)
    if len(shares) != n or len(layout.host_of) != n:
        raise ValueError(f"simulate: {n} workers but {len(shares)} shares and {len(layout.host_of)} placed workers")
    stretch = list(slowdown) if slowdown is not None else [1.0] * n
    base = profiled_layout if profiled_layout is not None else Layout.one_host(n)
    grad_s = [w.pipelined.sync_wait_s if prefetch and w.pipelined is not None else w.sync_wait_s for w in workers]
    if strategy == "aggregation":
        average = _ring_s(model.param_bytes, n, layout.ring_bps(), layout.latency_s) if n > 1 else 0.0
        exposed = 0.0 if avg_overlap else average / max(1, avg_every)
        net = [0.0] * n
    else:
        slower_link = max(0.0, _sync_exposed(workers, shares, layout, model, overlap, sacp, stretch, wire)
                          - _sync_exposed(workers, shares, base, model, overlap, sacp, stretch, wire))
        # The least wait: a rank that waited longer was waiting for a later one, and each rank's
        # measured step already holds its own wait (the largest counted it twice: +0.9 ms a step).
        exposed = min(grad_s) + slower_link
        net = _network_s(workers, shares, layout)
    own, cpu_of = [], []
    for i, (w, b) in enumerate(zip(workers, shares)):
        k = loaders[i] if loaders is not None else 0
        if k >= 1:  # K loader processes: the measured loading path K times over, beside the step
            load = (w.sample.time(b) + w.gather.time(b)) * stretch[i] / k + w.wait.time(b) + net[i]
            compute = w.compute.time(b) * stretch[i]
            cpu_of.append(w.sample.time(b) + w.gather.time(b) + w.compute.time(b))
            own.append(max(load, compute + exposed))
            continue
        p = w.pipelined if prefetch and _same_sharing(layout, base, i) else None
        if p is not None:  # measured on cores shared as here: contention is in the measures
            load = p.load_cpu.time(b) * stretch[i] + w.wait.time(b) + net[i]
            # The contended step as measured; a slow worker's training thread adds its emulated extra
            # work to its measured wall (its loading thread stretches beside it, off the critical path).
            train = p.compute_wall.time(b) + (stretch[i] - 1.0) * p.compute_cpu.time(b)
            threads = p.load_cpu.time(b) + p.compute_cpu.time(b)
            cpu_of.append(threads + p.other_cpu.time(b))
            own.append(max(load, p.step.time(b) - p.sync_wait_s + exposed, train + exposed,
                           _serial_s(threads, stretch[i], layout, i, p.other_cpu.time(b)) + exposed))
            continue
        load = (w.sample.time(b) + w.gather.time(b)) * stretch[i] + w.wait.time(b) + net[i]
        compute = w.compute.time(b) * stretch[i]
        cpu_of.append(w.sample.time(b) + w.gather.time(b) + w.compute.time(b))
        own.append(max(load, compute + exposed, _serial_s(cpu_of[-1], stretch[i], layout, i) + exposed)
                   if prefetch else load + compute + exposed)
    if strategy == "aggregation" and avg_overlap:
        # Each average travels during the step after it: only what outlasts that step is exposed.
        extra = [max(0.0, average - o) / max(1, avg_every) for o in own]
        own = [o + e for o, e in zip(own, extra)]
        exposed = max(extra)
    machines = sorted({layout.machine(i) for i in range(n)})
    cores_s = max(sum(cpu_of[i] for i in range(n) if layout.machine(i) == m) / layout.cores_of(m) for m in machines)
    slowest = max(range(n), key=lambda i: own[i])
    step = max(own[slowest], cores_s)
    if cores_s > own[slowest]:
        bottleneck = "cores"
    elif net[slowest] > 0.5 * own[slowest]:
        bottleneck = "network"
    elif exposed > 0.5 * own[slowest]:
        bottleneck = "sync"
    else:
        bottleneck = f"worker {slowest}"
    return EpochPrediction(step_s=step, epoch_s=step * steps, steps=steps, per_worker_s=own, sync_s=exposed,
                           bottleneck=bottleneck, parts={"network_s": max(net), "cores_s": cores_s})


def simulate_fullgraph(workers: Sequence[FullGraphCosts], layout: Layout, model: ModelShape = ModelShape(),
                       staleness: int = 0, overlap: bool = True, profiled_layout: Optional[Layout] = None,
                       wire: Wire = Wire()) -> EpochPrediction:
    """The predicted full-graph epoch (one step) of ``workers`` on ``layout`` (see the module doc).

    Args:
        workers: per rank its measured step (:func:`fullgraph_costs_from_profile`), ranks as profiled.
        layout: hosts, links and cores to predict for.
        model: the Linear shapes (the gradient exchange); empty: the measured gradient wait only.
        staleness: 0 (each layer waits for its exchange) or 1 (the exchanges travel during the step).
        overlap: the gradient sync hides its exchanges behind backward (see :func:`simulate`).
        profiled_layout: where the profile was measured (default one host): the waits it measured
            are kept, the simulated difference between the two layouts added.
        wire: bytes a halo value and a gradient value cost (``--compress``); float32 by default.

    Example:
        >>> w = FullGraphCosts(compute_s=0.5, send_rows=(0, 20_000), widths=(128, 128), inner=50_000)
        >>> v = FullGraphCosts(compute_s=0.5, send_rows=(20_000, 0), widths=(128, 128), inner=50_000)
        >>> lay = Layout.hosts_of([1, 1], link_bps=1e9, latency_s=0.0)
        >>> s0, s1 = (simulate_fullgraph([w, v], lay, staleness=s) for s in (0, 1))
        >>> round(s0.step_s, 3), round(s1.step_s, 3), s1.bottleneck
        (0.824, 0.5, 'worker 0')
    """
    n = len(workers)
    if len(layout.host_of) != n or any(len(w.send_rows) != n for w in workers):
        raise ValueError(f"simulate_fullgraph: {n} profiled ranks but {len(layout.host_of)} placed workers "
                         "(the halo plan is per profiled rank: profile on as many workers)")
    if staleness not in (0, 1):
        raise ValueError(f"simulate_fullgraph: staleness must be 0 or 1 (got {staleness})")
    base = profiled_layout if profiled_layout is not None else Layout.one_host(n)
    halo = _halo_s(workers, layout, layout.duplex_stream if staleness else layout.duplex, wire.halo)
    slower_halo = max(0.0, halo - _halo_s(workers, base, base.duplex, wire.halo))
    per_step = [WorkerCosts(sample=LinearCost(0.0, 0.0), gather=LinearCost(0.0, 0.0),
                            compute=LinearCost(w.compute_s, 0.0),
                            rows=tuple(LinearCost(float(w.inner), 0.0) for _ in model.linears)) for w in workers]
    ones = [1] * n
    slower_sync = max(0.0, _sync_exposed(per_step, ones, layout, model, overlap, False, (), wire)
                      - _sync_exposed(per_step, ones, base, model, overlap, False, (), wire))
    exposed = max(w.sync_wait_s for w in workers) + slower_sync
    if staleness == 0:
        # Every exchange blocks its layer: the profiled wait (transfer, and the peers' imbalance)
        # plus what the slower links add.
        own = [w.compute_s + w.halo_wait_s + slower_halo + exposed for w in workers]
    else:
        # Last step's halo is what a layer reads: this step's exchanges overlap the whole step,
        # but their own CPU work (copies, the network stack) overlaps compute only on a spare core.
        transfer = min(w.halo_wait_s for w in workers)
        # (A machine with at least one worker per core has none to spare.)
        own = [max(w.compute_s + (transfer if layout.workers_per_core(i) >= 1.0 else 0.0), halo) + exposed
               for i, w in enumerate(workers)]
    slowest = max(range(n), key=lambda i: own[i])
    step = own[slowest]
    # Stale: the exchange bounds the step once it outlasts the compute it overlaps.
    exchange = halo if staleness else workers[slowest].halo_wait_s + slower_halo
    if (exchange + exposed >= step) if staleness else (exchange > 0.5 * step):
        bottleneck = "network"
    elif exposed > 0.5 * step:
        bottleneck = "sync"
    else:
        bottleneck = f"worker {slowest}"
    return EpochPrediction(step_s=step, epoch_s=step, steps=1, per_worker_s=own, sync_s=exposed,
                           bottleneck=bottleneck, parts={"halo_s": halo, "compute_s": workers[slowest].compute_s})


def _halo_s(workers: Sequence[FullGraphCosts], layout: Layout, duplex: float, value_bytes: float = 4.0) -> float:
    """A step's halo exchanges on ``layout``: per exchanged layer, forward then backward, each as long
    as its busiest host link (uplink or downlink, at ``duplex`` of its rate when it carries both) or
    its busiest worker's local copies, plus latency; ``value_bytes`` a value."""
    n, hosts = len(workers), layout.num_hosts
    total = 0.0
    for width in workers[0].widths if workers else ():
        for forward in (True, False):  # gradients go back along the rows' way in reverse
            up, down, local = [0.0] * hosts, [0.0] * hosts, [0.0] * n
            for i, w in enumerate(workers):
                for j, rows in enumerate(w.send_rows):
                    if j == i or not rows:
                        continue
                    src, dst = (i, j) if forward else (j, i)
                    bits = 8.0 * value_bytes * rows * width
                    if layout.host_of[src] != layout.host_of[dst]:
                        up[layout.host_of[src]] += bits
                        down[layout.host_of[dst]] += bits
                    else:
                        local[src] += bits
            remote = max((max(up[h], down[h]) / (layout.link_bps[h] * (duplex if up[h] and down[h] else 1.0))
                          for h in range(hosts)), default=0.0)
            total += max(remote, max(local, default=0.0) / layout.local_bps) + (layout.latency_s if any(up) else 0.0)
    return total


def _serial_s(cpu_s: float, stretch: float, layout: Layout, worker: int, other_s: float = 0.0) -> float:
    """A bound worker's loading and training work one after the other on its own core (0: not bound).

    Bound to one core, a worker's loading thread and training thread take turns on it, so a step
    lasts at least their CPU work together, stretched as a slower machine's would be (measured in
    three ``bench/bench_simulator.py`` runs: a 2x slower worker bound to its core stepped at
    2.0-2.6x its two threads' CPU work, gradient wait included, where the overlap of loading and
    training alone had predicted 1.9-2.1x), and its other threads' CPU ``other_s`` (gloo's, running
    the exchanges), which the test slowdown does not stretch. An unbound worker's threads may run
    on a core another worker leaves idle, so it is not bounded this way.
    """
    return cpu_s * stretch + other_s if layout.bound(worker) else 0.0


def _same_sharing(layout: Layout, base: Layout, worker: int) -> bool:
    """Whether ``worker`` shares its machine's cores with at least as many workers per core as where it was profiled."""
    return layout.workers_per_core(worker) >= base.workers_per_core(worker) * 0.999


def _network_s(workers: Sequence[WorkerCosts], shares: Sequence[int], layout: Layout) -> list[float]:
    """Per worker: its host uplink's time for the step's cross-host sampling and feature bytes, plus latency."""
    if layout.num_hosts < 2:
        return [0.0] * len(workers)
    out_bits = [0.0] * layout.num_hosts
    for i, (w, b) in enumerate(zip(workers, shares)):
        out_bits[layout.host_of[i]] += 8.0 * w.sent_bytes.time(b) * layout.cross_share(i)
    return [out_bits[layout.host_of[i]] / layout.link_bps[layout.host_of[i]]
            + (w.exchanges * layout.latency_s if layout.cross_share(i) > 0 else 0.0)
            for i, w in enumerate(workers)]


def _sync_exposed(workers: Sequence[WorkerCosts], shares: Sequence[int], layout: Layout, model: ModelShape,
                  overlap: bool, sacp: bool, stretch: Sequence[float] = (), wire: Wire = Wire()) -> float:
    """Seconds the gradient exchange runs past the end of backward on ``layout`` (transfer only).

    ``stretch``: per worker the factor on its own work (default 1): the slowest worker's compute
    is what the link idles through and what backward's exchanges overlap.
    """
    n = len(workers)
    if n < 2 or not model.linears:
        return 0.0
    factors = list(stretch) or [1.0] * n
    compute = max(w.compute.time(b) * f for w, b, f in zip(workers, shares, factors))
    sent = [_layer_seconds(workers, shares, layout, model, i, sacp, wire)
            for i in reversed(range(len(model.linears)))]  # in the order they go out: the last layer first
    # The token bucket refills while the link idles: through compute, less what the link carries
    # meanwhile (the step's sampling and feature traffic; under DWBP every layer's gradients but
    # the last to go out). With short steps on a slow link it never fills (measured on
    # synthetic-100k at 20 Mbit/s: a 56 KiB bucket, 13 ms steps, every gradient byte at the
    # link's rate), with long ones it always does (at 100 Mbit/s the full bucket's 4 ms were seen).
    busy = max(_network_s(workers, shares, layout)) + (sum(sent[:-1]) if overlap else 0.0)
    layers = _burst(sent, layout, refill_s=max(0.0, compute - busy))[::-1]
    # (param_bytes counts float32: the other parameters' values, at the wire's bytes each)
    other = max(0, model.param_bytes - sum(4 * (out * inp + out) for _, out, inp in model.linears)) * wire.grad / 4
    ring_bps = layout.ring_bps()
    other_s = _ring_s(other, n, ring_bps, layout.latency_s) if other else 0.0
    if not overlap:
        return sum(layers) + other_s
    backward = BACKWARD_FRACTION * compute
    work = [_layer_work(workers, shares, model, i) for i in range(len(model.linears))]
    total = sum(work) or 1.0
    ready, wire = 0.0, 0.0
    for i in reversed(range(len(layers))):  # backward reaches the last layer first
        own = backward * work[i] / total
        # Weight gradients first (graphdist.sync.reorder): a layer leaves after its weight-gradient
        # GEMM, half its backward where an input gradient follows (every layer but the first).
        launch = ready + (own / 2 if i > 0 else own)
        ready += own
        wire = max(wire, launch) + layers[i]
    return max(0.0, wire + other_s - backward)


def _burst(seconds: list[float], layout: Layout, refill_s: float = float("inf")) -> list[float]:
    """Transfers in the order they go out, less what the token bucket of ``layout.burst_bytes`` carries at
    once: full after ``refill_s`` seconds of idle link (it refills at the link's rate), partly before."""
    if layout.num_hosts < 2 or layout.burst_bytes <= 0:
        return seconds
    credit = min(8.0 * layout.burst_bytes / layout.ring_bps(), refill_s)
    out = []
    for t in seconds:
        saved = min(credit, max(0.0, t - layout.latency_s))
        credit -= saved
        out.append(t - saved)
    return out


def _layer_work(workers: Sequence[WorkerCosts], shares: Sequence[int], model: ModelShape, layer: int) -> float:
    _, out, inp = model.linears[layer]
    rows = max((w.rows[layer].time(b) if layer < len(w.rows) else b) for w, b in zip(workers, shares))
    return rows * out * inp


def _layer_seconds(workers: Sequence[WorkerCosts], shares: Sequence[int], layout: Layout, model: ModelShape,
                   layer: int, sacp: bool, wire: Wire = Wire()) -> float:
    """One layer's exchange on ``layout``: dense ring allreduce, or SACP's factors when Poseidon's rule
    (in bytes, as ``graphdist.sync.sacp_capture.sacp_choice`` weighs them) picks them."""
    n = len(workers)
    _, out, inp = model.linears[layer]
    dense = wire.grad * (out * inp + out)
    rows = [w.rows[layer].time(b) if layer < len(w.rows) else float(b) for w, b in zip(workers, shares)]
    if sacp and max(rows) * (out + inp) * wire.factor <= 2 * out * inp * wire.grad / n:
        # Every worker sends its K (out + in) factors to every peer; a host's uplink carries its
        # workers' copies to the peers on other hosts.
        bits = [0.0] * layout.num_hosts
        for i, k in enumerate(rows):
            peers = sum(layout.host_of[j] != layout.host_of[i] for j in range(n))
            bits[layout.host_of[i]] += 8.0 * wire.factor * k * (out + inp) * peers
        remote = max(bits[h] / layout.link_bps[h] for h in range(layout.num_hosts)) if layout.num_hosts > 1 else 0.0
        local = 8.0 * wire.factor * max(rows) * (out + inp) * (n - 1) / layout.local_bps
        return max(remote, local) + layout.latency_s  # the bias gradient is the sum of the factors' rows
    return _ring_s(dense, n, layout.ring_bps(), layout.latency_s)


def _ring_s(nbytes: float, n: int, bps: float, latency_s: float) -> float:
    """A ring allreduce of ``nbytes`` over ``n`` workers whose slowest link is ``bps``."""
    return 2 * (n - 1) * (8.0 * nbytes / n / bps + latency_s)
