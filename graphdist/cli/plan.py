"""``graphdist-plan``: which parts and batch share each worker of a cluster gets, and why.

Run book::

    graphdist-plan --partitions parts/pubmed-8 --num-workers 2
    graphdist-plan --partitions parts/s100k-16 --cluster cluster.yaml --batch-size 1024
    graphdist-plan --partitions parts/s100k-2 --num-workers 2 --profile runs/X/profile.json

Reads the partition's statistics (train and inner nodes, the part adjacency ``part_edges``) and
the cluster spec (``placement/cluster.py``; without one, this machine with ``--num-workers``
workers), places parts on workers (memory fits, work follows speed, connected parts together),
splits the batch by throughput and prints one line per worker: parts, nodes, memory, share,
predicted step time and bottleneck, then the edges cut between workers. Speeds come from a
run's ``profile.json`` (``--placement profiled``) when given, else from the spec's ``speed``.
Bad input exits 2 with one line per mistake.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

PROG = "graphdist-plan"


def build_parser() -> argparse.ArgumentParser:
    from graphdist.cli.args import OneLineParser

    p = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="exit codes: 0 a plan was printed, 2 bad input (flags, spec, partition)")
    p.add_argument("--partitions", required=True, metavar="DIR", help="a partition directory (graphdist-partition)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--cluster", metavar="FILE", help="cluster spec (YAML): hosts, workers, devices, memory, links")
    where.add_argument("--num-workers", type=int, help="workers on this machine (default: the partition's part count)")
    p.add_argument("--batch-size", type=int, default=512, help="global batch (default 512, graphdist-train's)")
    p.add_argument("--profile", metavar="FILE", help="a run's profile.json: measured per-worker costs")
    p.add_argument("--json", metavar="FILE", help="also write the plan as JSON")
    d = p.add_argument_group("a graph that is not on this machine (placement/describe.py; needs --profile)")
    d.add_argument("--describe", metavar="N,E,F", help="plan for N nodes, E edges, F features instead")
    d.add_argument("--train-fraction", type=float, default=0.01, help="share of nodes that train (default 0.01)")
    d.add_argument("--machines", type=int, default=16, help="machines (default 16)")
    d.add_argument("--workers-per-machine", type=int, default=1, help="workers per machine (default 1)")
    d.add_argument("--link", default="10gbit", help="each machine's link rate (default 10gbit)")
    d.add_argument("--edge-cut", type=float, default=0.1, help="assumed share of edges cut between workers (0.1)")
    d.add_argument("--speedup", type=float, default=1.0,
                   help="each worker's throughput relative to the profiled one (default 1: as measured here)")
    d.add_argument("--reference", type=float, metavar="S", help="a published epoch time to print beside the "
                   "prediction, e.g. 13 (DistDGL, ogbn-papers100M, 16 machines)")
    return p


def plan_from_args(a: argparse.Namespace) -> dict[str, Any]:
    """The plan and its explanation for parsed arguments (raises ValueError on bad input)."""
    if a.describe:
        return describe_from_args(a)
    from partition.api import part_edges, read_meta
    from placement.assign import cut_between_workers, optimize_plan, part_loads
    from placement.cluster import load_cluster, local_cluster
    from placement.shares import LinearCost

    meta = read_meta(a.partitions)
    parts = meta["parts"]
    if a.batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1 (got {a.batch_size})")
    if a.num_workers is not None and a.num_workers < 1:
        raise ValueError(f"--num-workers must be >= 1 (got {a.num_workers})")
    spec = load_cluster(a.cluster) if a.cluster else local_cluster(a.num_workers or int(meta["num_parts"]))
    workers = spec.workers
    train, memory = part_loads(meta)
    inner = [int(p["num_inner"]) for p in parts]
    edges = part_edges(a.partitions)
    costs, profile = None, None
    if a.profile:
        profile = _read_profile(a.profile)
        measured = profile.get("fullgraph") or profile["parts"] or []
        if len(measured) != len(workers):
            raise ValueError(f"--profile {a.profile}: measured {len(measured)} workers, the cluster has {len(workers)}")
        # A full-graph profile has no per-seed costs (no batch shares): the spec's speeds place the parts.
        costs = [{k: LinearCost(*v) for k, v in w.items()} for w in profile["parts"]] if profile["parts"] else None
    plan, why = optimize_plan(train, inner, memory, edges, [w.device for w in workers], [w.speed for w in workers],
                              [w.memory_bytes for w in workers], a.batch_size, costs=costs)
    assignment = [list(r.parts) for r in plan.ranks]
    step = max(w.step_s for w in why)
    return {"partitions": str(a.partitions), "cluster": spec.describe(), "batch_size": a.batch_size,
            "steps_per_epoch": plan.steps_per_epoch, "assignment": assignment,
            "shares": list(plan.shares), "lines": [w.line(measured=costs is not None) for w in why],
            "cut_edges_between_workers": cut_between_workers(assignment, edges),
            "num_edges": int(meta["num_edges"]), "measured": costs is not None,
            "predicted_epoch_s": step * plan.steps_per_epoch if costs is not None else None,
            "simulated": _simulated(profile, spec, plan) if a.profile else None,
            "compress": profile.get("key", {}).get("compress", "none") if a.profile else None}


def describe_from_args(a: argparse.Namespace) -> dict[str, Any]:
    """``--describe``: the prediction for a graph that is not here, from this machine's profile."""
    from partition.api import read_meta
    from placement.cluster import parse_rate
    from placement.describe import Assumptions, parse_described, predict_described
    from placement.profiled import costs_from_profile

    if not a.profile:
        raise ValueError("--describe needs --profile: a profile.json measured here with the same model and fan-outs")
    graph = parse_described(a.describe, a.train_fraction)
    if min(a.machines, a.workers_per_machine) < 1 or not 0 < a.edge_cut <= 1 or a.speedup <= 0:
        raise ValueError("--machines and --workers-per-machine >= 1, --edge-cut in (0, 1], --speedup > 0")
    profile = _read_profile(a.profile)
    workers, shape = costs_from_profile(profile)
    meta = read_meta(a.partitions)
    cut = float(meta.get("edge_cut") or 0.0)  # the share of edges between the profiled workers' parts
    if cut <= 0:
        raise ValueError(f"--partitions {a.partitions}: no edge cut to scale from (one part?); profile on >= 2 parts")
    assume = Assumptions(machines=a.machines, workers_per_machine=a.workers_per_machine, link_bps=parse_rate(a.link),
                         edge_cut=a.edge_cut, speedup=a.speedup, batch_size=a.batch_size)
    res = predict_described(workers, [m["bytes"]["sample"] for m in profile["measures"]],
                            [m["bytes"]["feature"] for m in profile["measures"]], shape, cut,
                            int(meta.get("feature_dim") or 1), graph, assume)
    return {"describe": graph.__dict__, "assumptions": assume.__dict__, "profile": a.profile, "profiled_cut": cut,
            "steps": res["steps"], "reference_s": a.reference, "dominant": res["dominant"],
            "sensitivity": res["sensitivity"],
            "predictions": {k: {"epoch_s": v.epoch_s, "line": v.line()} for k, v in res["predictions"].items()}}


def print_described(res: dict[str, Any]) -> None:
    g, s = res["describe"], res["assumptions"]
    print(f"described graph: {g['nodes']:,} nodes, {g['edges']:,} edges, {g['features']} features, "
          f"{g['train_fraction']:.2%} train ({res['steps']:,} steps of {s['batch_size']} seeds)")
    print(f"cluster: {s['machines']} machines x {s['workers_per_machine']} workers, link {s['link_bps'] / 1e9:g} "
          f"Gbit/s; assumed: edge cut {s['edge_cut']:.2f} (profiled {res['profiled_cut']:.2f}), "
          f"speedup {s['speedup']:g}x over the profiled worker")
    for strategy, pred in res["predictions"].items():
        print(f"  {strategy:<12} {pred['line']}")
    if res["reference_s"] is not None:
        print(f"  reference    {res['reference_s']:.2f} s/epoch (published)")
    moved = ", ".join(f"{k} x2 worse -> {v:.2f}x" for k, v in res["sensitivity"].items())
    print(f"dominant assumption: {res['dominant']} ({moved}); measure it before trusting the number")


def _simulated(profile: dict[str, Any], spec: Any, plan: Any) -> Optional[dict[str, Any]]:
    """Per strategy (and each variant it declares) the simulator's epoch on the spec's hosts and links
    (None: an older profile). Strategies without a cost model, or whose model needs another kind of
    profile (a full-graph one against per-seed ones), are left out."""
    from graphdist.options import STRATEGIES
    from placement.profiled import predict_from_profile
    from placement.simulator import Layout

    wire = _wire(profile.get("key", {}).get("compress", "none"))
    hosts = {h.name: i for i, h in enumerate(spec.hosts)}
    layout = Layout(host_of=tuple(hosts[w.host] for w in spec.workers),
                    link_bps=tuple(h.link_bps for h in spec.hosts), local_bps=spec.local_link_bps,
                    duplex=spec.duplex, duplex_stream=spec.duplex_stream, burst_bytes=spec.burst_bytes)
    shares = list(plan.shares)
    out: dict[str, Any] = {}
    for name, strategy in STRATEGIES.items():
        for flags, settings in strategy.variants if strategy.cost_model else ():
            try:
                pred = predict_from_profile(profile, strategy.cost_model, layout, shares, plan.steps_per_epoch,
                                            wire=wire, **dict(settings))
            except ValueError:
                return None
            if pred is not None:
                out[f"{name} {flags}".strip()] = {"epoch_s": pred.epoch_s, "step_s": pred.step_s,
                                                  "bottleneck": pred.bottleneck, "line": pred.line()}
    return out or None


def _wire(compress: str) -> Any:
    """The simulator's bytes a value under the profiled run's ``--compress`` (``auto``: the first
    candidate's, fp16, the cheaper-to-run of its two choices; int8 would move about half as many
    gradient bytes)."""
    from graphdist.sync.compress import wire_bytes
    from graphdist.sync.modes import AUTO_CANDIDATES, COMPRESSIONS
    from placement.simulator import Wire

    compress = AUTO_CANDIDATES[0] if compress == "auto" else compress
    if compress not in COMPRESSIONS:
        raise ValueError(f"--profile: the profiled run's compress {compress!r} is not one graphdist knows "
                         f"({', '.join(COMPRESSIONS)})")
    spec = COMPRESSIONS[compress]
    grad = wire_bytes(compress)
    cast = grad if spec.cast else 4.0  # factors and halo rows travel cast, never int8
    return Wire(grad=grad, factor=cast, halo=cast)


def _read_profile(path: str) -> dict[str, Any]:
    try:
        doc = json.loads(Path(path).read_text())
        doc["parts"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"--profile {path}: not a readable profile.json ({exc})") from None
    return doc


def print_plan(res: dict[str, Any]) -> None:
    print(res["cluster"])
    print(f"\nplan for {res['partitions']} (batch {res['batch_size']}, {res['steps_per_epoch']} steps/epoch"
          f"{'' if res['measured'] else '; step times in relative units: no --profile'}):")
    for line in res["lines"]:
        print(f"  {line}")
    print(f"edges cut between workers: {res['cut_edges_between_workers']:,} of {res['num_edges']:,}")
    if res["simulated"]:
        print(f"simulated epoch on this cluster's links (placement/simulator.py; cores not bounded; bytes as "
              f"--compress {res.get('compress') or 'none'}, as profiled; a --strategy fullgraph profile predicts "
              f"fullgraph, any other minibatch and aggregation):")
        width = max(map(len, res["simulated"]))
        for strategy, pred in res["simulated"].items():
            print(f"  {strategy:<{width}} {pred['line']}")
        best = min(res["simulated"], key=lambda k: res["simulated"][k]["epoch_s"])
        print(f"recommended: --strategy {best} (aggregation and staleness trade accuracy for speed: see "
              f"docs/strategies.md#how-to-choose)")
    elif res["predicted_epoch_s"] is not None:
        print(f"predicted minibatch epoch (compute-bound, from the profile): {res['predicted_epoch_s']:.2f} s")


def main(argv: Optional[Sequence[str]] = None) -> int:
    try:
        a = build_parser().parse_args(argv)
        res = plan_from_args(a)
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    except ValueError as exc:  # UsageError, ClusterSpecError, PlacementError, PartitionFormatError are ValueErrors
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    if a.describe:
        print_described(res)
    else:
        print_plan(res)
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
