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
import time
from dataclasses import asdict, dataclass
from typing import Any, Optional

import numpy as np

from graphdist import comm
from graphdist.rundir import RunDir
from graphdist.trainers.probes import (PROBE_STEPS, ProbeTarget, global_rng_state, model_shape, probe, probe_copy,
                                      restore_global_rng)
from placement.plan import Plan
from placement.shares import LinearCost, balanced_shares, imbalance

logger = logging.getLogger(__name__)

PROFILE_NAME = "profile.json"

__all__ = ["PROFILE_NAME", "Profile", "profile_fullgraph", "profiled_plan", "start_plan", "use_profile"]


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


# Key fields added after profiles were first written, with the value those profiles were measured
# under when the field was at its default: an older profile.json still matches a run at the defaults.
KEY_DEFAULTS = {"sync": "dwbp", "compress": "none", "sacp": "auto", "precision": "fp32", "loaders": None}


def profile_key(cfg: Any, world_size: int, plan_shares: list[int]) -> dict[str, Any]:
    """The config fields a step's cost depends on (a JSON-able dict): the model and batch, the
    workers, and what the probes' steps compute in (``--precision``) and sync with (``--sync``,
    ``--compress``, ``--sacp``), so a profile measured under other ones is measured again."""
    return {"model": cfg.model, "hidden": cfg.hidden, "layers": cfg.layers, "fanouts": list(cfg.fanouts),
            "heads": cfg.heads, "batch_size": cfg.batch_size, "workers": world_size, "devices": list(cfg.devices),
            "threads": cfg.threads, "replicate": cfg.replicate, "prefetch": cfg.prefetch, "shares": plan_shares,
            "partitions": cfg.partitions, "sync": cfg.sync, "compress": cfg.compress, "sacp": cfg.sacp,
            "precision": cfg.precision, "loaders": cfg.loaders}


def use_profile(placement: str, heterogeneous: bool) -> bool:
    """Whether start shares come from the profiler: ``profiled``, or ``auto`` with unlike workers.

    Example:
        >>> use_profile("auto", True), use_profile("auto", False), use_profile("profiled", False)
        (True, False, True)
    """
    return placement == "profiled" or (placement == "auto" and heterogeneous)


def start_plan(ctx: Any, target: Optional[ProbeTarget]) -> Plan:
    """The plan the first epoch trains under: ``ctx.plan``, or it with profiled shares.

    Profiled (``--placement profiled``, or ``auto`` on unlike workers) where the strategy has
    shares to set (``target``: its ``probe_target()``, None without) and more than one worker;
    the shares chosen are kept in ``ctx.decisions`` (a resumed run starts from them, not probing
    again). Collective: every rank calls it at the same point, after the strategy is built.
    """
    from graphdist.trainers.devices import heterogeneous

    cfg = ctx.cfg
    if target is None or ctx.world_size == 1 or not use_profile(cfg.placement, heterogeneous(cfg)):
        return ctx.plan
    if "start_shares" not in ctx.decisions:  # else profiled at the run's start: a resume keeps them
        plan = profiled_plan(target, ctx.plan, cfg, ctx.run_dir)
        ctx.decisions["start_shares"] = list(plan.shares)
    return ctx.plan.with_shares(ctx.decisions["start_shares"])


def profiled_plan(target: ProbeTarget, plan: Plan, cfg: Any, run_dir: Optional[RunDir]) -> Plan:
    """``plan`` with start shares from the cached profile or fresh probes of ``target``.

    Collective: every rank calls it at the same point, with its own target and the same plan.
    """
    world = plan.world_size
    plan_shares = list(plan.shares)
    key = profile_key(cfg, world, plan_shares)
    cached = _read_cached(run_dir, key)
    if comm.all_gather_object(cached is not None) != [True] * world:
        cached = None  # one rank could not read it: all probe, or they would disagree
    if cached is not None:
        return plan.with_shares(cached.shares)
    mine, measures = probe(target, plan_shares[target.rank])
    loader = target.batches.loader
    gathered, measured, prefetched, loaders = zip(*comm.all_gather_object((mine, measures, loader.prefetch,
                                                                           loader.loaders)))
    costs = [_total(parts, p, share, k) for parts, share, p, k in zip(gathered, plan_shares, prefetched, loaders)]
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
    return plan.with_shares(shares)


def profile_fullgraph(strategy: Any, run_dir: Optional[RunDir]) -> Profile:
    """``--strategy fullgraph --placement profiled``: the cached profile, or exact probe steps on every rank.

    A full-graph step has no batch share to choose: the profile is what ``graphdist-plan`` and
    ``placement.simulator.simulate_fullgraph`` predict other layouts and staleness from. Collective:
    every rank calls it at the same point, after the strategy is built.
    """
    cfg, world = strategy.ctx.cfg, strategy.ctx.world_size
    plan_shares = list(strategy.ctx.plan.shares)
    key = {**profile_key(cfg, world, plan_shares), "strategy": "fullgraph"}
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
    from graphdist.trainers.base import adam, job_sync
    from graphdist.trainers.fullgraph_net import FullGraphNet
    from graphdist.trainers.precision import autocast

    states = global_rng_state()
    model = probe_copy(strategy.model)
    halo = copy.copy(strategy.halo)
    halo.staleness, halo._stale, halo.widths = 0, {}, {}
    net = FullGraphNet(model, halo, strategy.x0, strategy.net.block, strategy.device)
    sync = job_sync(strategy.ctx, net, seed_weighted=False)
    optimizer = adam(model.parameters(), lr=1e-6)
    n = int(strategy.train.numel())
    timed: list[tuple[float, float, float]] = []
    try:
        for step in range(2 + PROBE_STEPS):
            before = comm.time_counts().get("halo", 0.0)
            t0 = time.perf_counter()
            optimizer.zero_grad()
            sync.begin_step(n)
            with autocast(strategy.ctx.cfg.precision, strategy.device):
                loss = strategy.loss(sync.model())
            loss.backward()
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
        restore_global_rng(states)
    median = [float(np.median([t[k] for t in timed])) for k in range(3)]
    return {"compute_s": median[0], "halo_wait_s": median[1], "sync_wait_s": median[2],
            "send_rows": list(halo.send_rows), "widths": [halo.widths[k] for k in sorted(halo.widths)],
            "inner": int(halo.num_inner), **model_shape(model)}


def _total(parts: dict[str, LinearCost], prefetch: bool, share: int, loaders: int = 0) -> LinearCost:
    """A step's cost from its parts: serial, or with prefetch the larger of loading and compute at ``share``;
    with ``loaders`` processes the loading is spread over them (the probes timed it in one thread)."""
    k = max(1, loaders)
    load = LinearCost((parts["sample"].fixed_s + parts["gather"].fixed_s) / k,
                      (parts["sample"].per_seed_s + parts["gather"].per_seed_s) / k)
    compute = parts["compute"]
    if not prefetch and not loaders:
        return LinearCost(load.fixed_s + compute.fixed_s, load.per_seed_s + compute.per_seed_s)
    return max(load, compute, key=lambda c: c.time(share))


def _read_cached(run_dir: Optional[RunDir], key: dict[str, Any]) -> Optional[Profile]:
    if run_dir is None:
        return None
    try:
        text = RunDir.at(run_dir).read_text(PROFILE_NAME)
        if text is None:
            return None
        profile = Profile.from_json(text)
    except (OSError, ValueError, KeyError, TypeError):
        logger.warning("%s: unreadable; profiling again", RunDir.at(run_dir) / PROFILE_NAME)
        return None
    return profile if {**KEY_DEFAULTS, **profile.key} == key else None


def _write(run_dir: RunDir, profile: Profile) -> None:
    RunDir.at(run_dir).write_text(PROFILE_NAME, profile.to_json(), "the placement profile")
