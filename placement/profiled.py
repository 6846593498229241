"""The simulator's inputs read back from a ``profile.json`` document (``graphdist/trainers/profile.py`` writes it).

Example:
    >>> costs_from_profile({"parts": None, "measures": None})
    Traceback (most recent call last):
    ...
    ValueError: profile.json has no simulator measures (written by an older graphdist or by one worker): run --placement profiled again
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from placement.shares import LinearCost
from placement.simulator import (COST_MODELS, EpochPrediction, FullGraphCosts, Layout, ModelShape, Pipelined, Wire,
                                 WorkerCosts, simulate, simulate_fullgraph)

__all__ = ["costs_from_profile", "fullgraph_costs_from_profile", "mean_worker", "planned_workers",
           "predict_from_profile"]


def predict_from_profile(profile: dict[str, Any], cost_model: str, layout: Layout, shares: list[int], steps: int,
                         wire: Wire = Wire(), **options: Any) -> Optional[EpochPrediction]:
    """The epoch of a strategy with ``cost_model`` (``simulator.COST_MODELS``) on ``layout``, from a profile.

    ``options``: the model's own settings (``staleness=1``, ``avg_overlap=True``). None where the profile
    has no measures of the kind the model needs (a full-graph profile has no per-seed costs, and the
    reverse).

    Raises:
        ValueError: an unknown cost model; a profile of the right kind too old to simulate.
    """
    if cost_model not in COST_MODELS:
        raise ValueError(f"Expected a cost model of {', '.join(COST_MODELS)} (got {cost_model!r})")
    if (COST_MODELS[cost_model] == "fullgraph") != bool(profile.get("fullgraph")):
        return None
    if COST_MODELS[cost_model] == "fullgraph":
        full, shape = fullgraph_costs_from_profile(profile)
        return simulate_fullgraph(full, layout, model=shape, wire=wire, **options)
    workers, shape = costs_from_profile(profile)
    return simulate(workers, shares, layout, steps, model=shape, strategy=cost_model, wire=wire, **options)


def costs_from_profile(profile: dict[str, Any]) -> tuple[list[WorkerCosts], ModelShape]:
    """Per worker its :class:`WorkerCosts`, and the model's shape, from a ``profile.json`` document.

    Raises:
        ValueError: a profile written before the simulator's measures existed (profile again).
    """
    parts, measures = profile.get("parts"), profile.get("measures")
    if not parts or not measures or len(parts) != len(measures) or not all(measures):
        raise ValueError("profile.json has no simulator measures (written by an older graphdist or by one "
                         "worker): run --placement profiled again")
    workers = []
    for p, m in zip(parts, measures):
        sent = [LinearCost(*m["bytes"][tag]) for tag in ("sample", "feature")]
        workers.append(WorkerCosts(
            sample=LinearCost(*p["sample"]), gather=LinearCost(*p["gather"]), compute=LinearCost(*p["compute"]),
            wait=LinearCost(*m["wait"]), sent_bytes=LinearCost(sum(c.fixed_s for c in sent),
                                                              sum(c.per_seed_s for c in sent)),
            rows=tuple(LinearCost(*r) for r in m["rows"]), exchanges=float(m["exchanges"]),
            sync_wait_s=float(m.get("sync_wait", 0.0)), pipelined=_pipelined(m.get("pipelined"))))
    return workers, _model_shape(measures[0])


def mean_worker(workers: Sequence[WorkerCosts], slow: float = 1.0, bytes_scale: float = 1.0,
                sent_bytes: Optional[LinearCost] = None) -> WorkerCosts:
    """The profiled workers' mean, every time ``slow`` times longer and the bytes sent ``bytes_scale`` times
    more (or ``sent_bytes``): one worker of another speed, or on another cut of the graph.

    Example:
        >>> a = WorkerCosts(sample=LinearCost(0.0, 2e-5), gather=LinearCost(0.0, 0.0), compute=LinearCost(1e-3, 0.0),
        ...                 sent_bytes=LinearCost(0.0, 100.0))
        >>> w = mean_worker([a, a], slow=2.0, bytes_scale=0.5)
        >>> w.sample.per_seed_s, w.compute.fixed_s, w.sent_bytes.per_seed_s
        (4e-05, 0.002, 50.0)
    """
    n = len(workers)

    def mean(costs: Sequence[LinearCost], factor: float) -> LinearCost:
        return LinearCost(factor * sum(c.fixed_s for c in costs) / n, factor * sum(c.per_seed_s for c in costs) / n)

    pipes = [w.pipelined for w in workers]
    pipelined = None
    if all(p is not None for p in pipes):
        pipelined = Pipelined(**{k: mean([getattr(p, k) for p in pipes], slow)  # type: ignore[misc]
                                 for k in ("step", "load_cpu", "compute_cpu", "compute_wall", "other_cpu")},
                              sync_wait_s=sum(p.sync_wait_s for p in pipes) / n)  # type: ignore[union-attr]
    return WorkerCosts(sample=mean([w.sample for w in workers], slow), gather=mean([w.gather for w in workers], slow),
                       compute=mean([w.compute for w in workers], slow), wait=mean([w.wait for w in workers], slow),
                       sent_bytes=sent_bytes or mean([w.sent_bytes for w in workers], bytes_scale),
                       rows=workers[0].rows, exchanges=workers[0].exchanges,
                       sync_wait_s=sum(w.sync_wait_s for w in workers) / n, pipelined=pipelined)


def planned_workers(profiled: Sequence[WorkerCosts], speeds: Sequence[float], cut_ratio: float) -> tuple[
        list[WorkerCosts], bool]:
    """Per planned worker its costs, from a profile of any number of workers; and whether they are as measured.

    As measured (each worker its profiled one's) where the plan has the profile's workers, all of speed 1,
    on the same cut. Otherwise each worker is the profiled workers' mean, its times divided by its
    ``speed`` (the cluster spec's: relative to a worker of the profiled machine), and the bytes it sends
    for sampling and features scaled by ``cut_ratio``: the plan's share of edges cut between workers
    over the profile's. A worker's remote share of its edges is about twice the cut share whatever the
    number of workers, so this scales from W to W' workers as ``placement/describe.py`` scales to a
    graph that is not here.

    Example:
        >>> a = WorkerCosts(sample=LinearCost(0.0, 2e-5), gather=LinearCost(0.0, 0.0), compute=LinearCost(1e-3, 0.0))
        >>> planned_workers([a, a], [1.0, 1.0], 1.0)[1], len(planned_workers([a, a], [1.0] * 4, 1.2)[0])
        (True, 4)
    """
    if len(speeds) == len(profiled) and all(s == 1.0 for s in speeds) and cut_ratio == 1.0:
        return list(profiled), True
    return [mean_worker(profiled, slow=1.0 / s, bytes_scale=cut_ratio) for s in speeds], False


def fullgraph_costs_from_profile(profile: dict[str, Any]) -> tuple[list[FullGraphCosts], ModelShape]:
    """Per rank its :class:`FullGraphCosts`, and the model's shape, from a fullgraph ``profile.json``.

    Raises:
        ValueError: a profile without full-graph probes (one of ``--strategy minibatch``, or older).
    """
    measures = profile.get("fullgraph")
    if not measures or not all(measures):
        raise ValueError("profile.json has no full-graph probes: profile with --strategy fullgraph --placement profiled")
    workers = [FullGraphCosts(compute_s=float(m["compute_s"]), send_rows=tuple(int(r) for r in m["send_rows"]),
                              widths=tuple(int(d) for d in m["widths"]), inner=int(m["inner"]),
                              halo_wait_s=float(m["halo_wait_s"]), sync_wait_s=float(m["sync_wait_s"]))
               for m in measures]
    return workers, _model_shape(measures[0])


def _model_shape(measure: dict[str, Any]) -> ModelShape:
    return ModelShape(linears=tuple((str(a), int(b), int(c)) for a, b, c in measure["linears"]),
                      param_bytes=int(measure["param_bytes"]))


def _pipelined(doc: Optional[dict[str, Any]]) -> Optional[Pipelined]:
    if not doc:
        return None
    return Pipelined(step=LinearCost(*doc["step"]), load_cpu=LinearCost(*doc["load_cpu"]),
                     compute_cpu=LinearCost(*doc["compute_cpu"]),
                     compute_wall=LinearCost(*doc.get("compute_wall", doc["compute_cpu"])),
                     sync_wait_s=float(doc.get("sync_wait", 0.0)),
                     other_cpu=LinearCost(*doc.get("other_cpu", (0.0, 0.0))))  # older profiles: not measured
