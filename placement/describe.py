"""Plans for a graph that is not on this machine: a profile measured here, scaled by stated assumptions.

``graphdist-plan --describe N,E,F`` predicts the epoch of a graph of N nodes, E edges and F
features on M machines of W workers from a ``profile.json`` measured here on a smaller graph
with the same model and fan-outs. What is measured comes from the profile; what is assumed is
stated and varied:

- ``speedup``: each remote worker's throughput relative to the profiled worker (every CPU cost
  divided by it);
- ``edge_cut``: the share of edges whose endpoints sit on different workers (remote sampling and
  feature traffic scale with it, from the profiled partition's own cut);
- ``link_bps``: each machine's link; features cost ``F / F_profiled`` times the profiled bytes.

Each assumption is then made twice as unfavourable, one at a time, and the one that moves the
prediction most is named: that is what to measure before trusting the number.

Example:
    >>> from placement.shares import LinearCost
    >>> from placement.simulator import ModelShape, WorkerCosts
    >>> w = WorkerCosts(sample=LinearCost(0.001, 1e-5), gather=LinearCost(0.0, 1e-5), compute=LinearCost(0.0, 5e-5))
    >>> graph = Described(nodes=10**6, edges=10**7, features=100, train_fraction=0.1)
    >>> res = predict_described([w], [(0.0, 10.0)], [(0.0, 100.0)], ModelShape(), 0.2, 100, graph,
    ...                         Assumptions(machines=2, workers_per_machine=1, link_bps=1e9, edge_cut=0.2))
    >>> res["steps"], res["dominant"] in ("speedup", "edge_cut", "link_bps")
    (98, True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Sequence

from placement.profiled import mean_worker
from placement.shares import LinearCost
from placement.simulator import Layout, ModelShape, WorkerCosts, simulate

__all__ = ["Assumptions", "Described", "parse_described", "predict_described"]


@dataclass(frozen=True)
class Described:
    """The graph to plan for: nodes, edges (directed), feature width, share of nodes that train."""

    nodes: int
    edges: int
    features: int
    train_fraction: float = 0.01


@dataclass(frozen=True)
class Assumptions:
    """The cluster and what is assumed about it (see the module doc)."""

    machines: int
    workers_per_machine: int
    link_bps: float
    edge_cut: float
    speedup: float = 1.0
    batch_size: int = 1024

    @property
    def workers(self) -> int:
        return self.machines * self.workers_per_machine


def parse_described(text: str, train_fraction: float) -> Described:
    """``"N,E,F"`` -> :class:`Described` (raises ValueError naming the flag)."""
    try:
        nodes, edges, features = (int(float(v)) for v in text.split(","))
    except ValueError:
        raise ValueError(f"--describe: expected N,E,F (nodes, edges, features), e.g. 111059956,1615685872,128 "
                         f"(got {text!r})") from None
    if min(nodes, edges, features) < 1 or not 0 < train_fraction <= 1:
        raise ValueError(f"--describe {text} --train-fraction {train_fraction}: expected positive sizes and a "
                         f"fraction in (0, 1]")
    return Described(nodes, edges, features, train_fraction)


def predict_described(workers: Sequence[WorkerCosts], sample_bytes: Sequence[tuple[float, float]],
                      feature_bytes: Sequence[tuple[float, float]], shape: ModelShape, profiled_cut: float,
                      profiled_features: int, graph: Described, assume: Assumptions) -> dict[str, Any]:
    """Per strategy the predicted epoch, the steps, and which assumption dominates.

    Args:
        workers: the profiled workers' costs (their mean is every described worker's).
        sample_bytes, feature_bytes: per profiled worker its ``(fixed, per_seed)`` bytes sent per step.
        shape: the profiled model; its first layer's input is rescaled to ``graph.features``.
        profiled_cut: the profiled partition's edge cut (share of edges between workers).
        profiled_features: the profiled graph's feature width.
    """
    steps = max(1, math.ceil(graph.nodes * graph.train_fraction / assume.batch_size))
    predictions = {s: _predict(workers, sample_bytes, feature_bytes, shape, profiled_cut, profiled_features, graph,
                               assume, s, steps) for s in ("minibatch", "aggregation")}
    base = predictions["minibatch"]
    worse = {"speedup": replace(assume, speedup=assume.speedup / 2),
             "edge_cut": replace(assume, edge_cut=min(1.0, assume.edge_cut * 2)),
             "link_bps": replace(assume, link_bps=assume.link_bps / 2)}
    moved = {k: _predict(workers, sample_bytes, feature_bytes, shape, profiled_cut, profiled_features, graph, v,
                         "minibatch", steps).epoch_s / base.epoch_s for k, v in worse.items()}
    return {"steps": steps, "predictions": predictions, "sensitivity": moved,
            "dominant": max(moved, key=moved.__getitem__)}


def _predict(workers: Sequence[WorkerCosts], sample_bytes: Sequence[tuple[float, float]],
             feature_bytes: Sequence[tuple[float, float]], shape: ModelShape, profiled_cut: float,
             profiled_features: int, graph: Described, assume: Assumptions, strategy: str, steps: int) -> Any:
    n = len(workers)
    cut = assume.edge_cut / max(profiled_cut, 1e-9)
    wide = graph.features / max(1, profiled_features)
    fixed = sum(b[0] for b in sample_bytes) / n * cut + sum(b[0] for b in feature_bytes) / n * cut * wide
    per_seed = sum(b[1] for b in sample_bytes) / n * cut + sum(b[1] for b in feature_bytes) / n * cut * wide
    one = replace(mean_worker(workers, slow=1.0 / assume.speedup, sent_bytes=LinearCost(fixed, per_seed)),
                  pipelined=None, sync_wait_s=0.0)
    linears = list(shape.linears)
    if linears:  # the first layer reads the features: its input width follows F
        name, out, inp = linears[0]
        linears[0] = (name, out, max(1, round(inp * wide)))
    model = ModelShape(linears=tuple(linears), param_bytes=sum(4 * (o * i + o) for _, o, i in linears))
    layout = Layout.hosts_of([assume.workers_per_machine] * assume.machines, assume.link_bps)
    share = max(1, assume.batch_size // assume.workers)
    return simulate([one] * assume.workers, [share] * assume.workers, layout, steps, model=model, strategy=strategy)
