"""``graphdist-plan``: which parts and batch share each worker of a cluster gets, how long an epoch takes, and why.

Run book::

    graphdist-plan --partitions parts/s100k-2 --num-workers 2             # profiles here first (~30 s)
    graphdist-plan --partitions parts/s100k-4 --cluster cluster.yaml --hidden 256 --fanouts 15,10,5
    graphdist-plan --partitions parts/s100k-4 --cluster cluster.yaml --from-run runs/X
    graphdist-plan --partitions parts/s100k-2 --num-workers 2 --profile ~/.cache/graphdist/profiles/Y.json

The training recipe is read the way graphdist-train reads it: any of its flags that shape a step
(``--model``, ``--hidden``, ``--fanouts``, ``--batch-size``, ``--sync``, ``--strategy``, ...),
``--config run.yaml``, or ``--from-run RUN`` (that run's ``config.yaml``). Flags that cannot change
a step's time (``--epochs``, ``--lr``, ``--run-dir``, ...) are refused, not ignored.

Without ``--profile`` it measures one on this machine: a short local job (the start-up profiler of
``--placement profiled``: a few probe steps per worker on a copy of the model; nothing else is kept)
whose ``profile.json`` it saves and names. A profile of W workers predicts any cluster: per-worker
CPU costs are measured, divided by each worker's ``speed`` in the spec; the bytes that cross
between workers are scaled by the plan's edge cut over the profile's; links and the gradient
exchange are modelled (``placement/simulator.py``). It prints which parts are which.

Then one line per worker (parts, nodes, memory, share, predicted step), the predicted epoch of
each strategy with its gain over minibatch, and a recommendation that never picks a strategy
trading accuracy for time without saying so: aggregation only where every worker's parts carry
the whole graph's label mix (label TVD <= 0.1). Bad input exits 2 with one line per mistake.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

PROG = "graphdist-plan"

# Above this label TVD between a worker's parts and the whole graph, aggregation is not recommended: each
# worker would fit its own label mix (the README's METIS parts of synthetic-30k, TVD 0.715, lose
# accuracy under it; random parts, TVD 0.02, lose 1.5-1.6 points on cora and pubmed).
MAX_AGGREGATION_TVD = 0.1

# graphdist-train flags that cannot change a step's time: refused when given here (a --config or
# --from-run file may hold them: a run's whole config is read, these keys are not used).
NOT_A_STEP = ("epochs", "lr", "weight_decay", "eval_every", "run_dir", "resume", "overwrite", "inexact_resume",
              "predict", "checkpoint", "checkpoint_every", "log_interval", "tensorboard", "plots", "dry_run",
              "rebalance_every", "rebalance_eps", "dropout")


def build_parser() -> argparse.ArgumentParser:
    from graphdist.cli.args import OneLineParser

    p = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0],
                      formatter_class=argparse.RawDescriptionHelpFormatter,
                      epilog="The recipe: any graphdist-train flag that shapes a step (see graphdist-train --help).\n"
                             "exit codes: 0 a plan was printed, 2 bad input (flags, spec, partition, profile)")
    p.add_argument("--partitions", required=True, metavar="DIR", help="a partition directory (graphdist-partition)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--cluster", metavar="FILE", help="cluster spec (YAML): hosts, workers, devices, memory, links")
    where.add_argument("--num-workers", type=int, help="workers on this machine (default graphdist-train's)")
    p.add_argument("--batch-size", type=int, help="global batch (default graphdist-train's)")
    recipe = p.add_argument_group("the training recipe (besides graphdist-train's flags)")
    recipe.add_argument("--config", metavar="FILE", help="a YAML file of graphdist-train options")
    recipe.add_argument("--from-run", metavar="RUN", help="a run directory: its config.yaml is the recipe")
    prof = p.add_argument_group("the profile")
    prof.add_argument("--profile", metavar="FILE", help="a profile.json to predict from (a --placement profiled run's, "
                      "or one graphdist-plan saved); default: measure one here")
    prof.add_argument("--profile-workers", type=int, metavar="W", help="workers of the profile measured here "
                      "(default: the planned workers, at most this machine's cores and the parts, at least 2)")
    prof.add_argument("--save-profile", metavar="FILE", help="where the measured profile goes (default: "
                      "$GRAPHDIST_CACHE/profiles/<partition>-<recipe>.json)")
    prof.add_argument("--no-profile", action="store_true", help="measure nothing: place parts by the spec's speeds "
                      "and print relative step times only")
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


def parse(argv: Sequence[str]) -> tuple[argparse.Namespace, Any]:
    """graphdist-plan's own flags, and the recipe (a ``TrainConfig``) from the rest, as graphdist-train resolves it.

    Raises:
        UsageError: an unknown flag, or one that cannot change a step's time (named).
        ConfigError: the recipe's own mistakes, as graphdist-train reports them.
    """
    from graphdist import runlog
    from graphdist.cli.args import UsageError
    from graphdist.cli.train import build_parser as train_parser
    from graphdist.cli.train import join_negative_values
    from graphdist.config import resolve_with_origin

    argv = join_negative_values(list(argv))
    a, rest = build_parser().parse_known_args(argv)
    train = train_parser()
    train.prog = PROG
    values = {k: v for k, v in vars(train.parse_args(rest)).items() if v is not None and k != "config"}
    for key in NOT_A_STEP:
        if key in values:
            raise UsageError(f"--{key.replace('_', '-')} does not change a step's time: graphdist-plan takes the "
                             f"recipe's model, sampling, batch, sync, strategy and system flags (see {PROG} --help)")
    for key in ("partitions", "cluster", "num_workers", "batch_size"):
        if getattr(a, key) is not None:
            values[key] = getattr(a, key)
    if a.cluster is None and a.num_workers is None and values.get("devices"):
        values.pop("num_workers", None)  # graphdist-train counts one worker per device
    base = None
    if a.from_run:
        try:
            base = {k: v for k, v in runlog.read_config(Path(a.from_run)).items() if k not in NOT_A_STEP}
        except (OSError, ValueError) as exc:
            raise UsageError(f"--from-run {a.from_run}: {exc}") from None
        for key in ("cluster", "num_workers") if (a.cluster or a.num_workers) else ():
            base.pop(key, None)  # the cluster to plan for is the one given here
    cfg, _ = resolve_with_origin(values, a.config, base=base)
    return a, cfg


def plan_from_args(a: argparse.Namespace, cfg: Any = None) -> dict[str, Any]:
    """The plan and its explanation for parsed arguments and the resolved recipe (raises ValueError on bad input)."""
    if a.describe:
        return describe_from_args(a, cfg)
    from partition.api import part_edges, read_meta
    from placement.assign import assign_parts, cut_between_workers, optimize_plan, part_loads
    from placement.cluster import load_cluster, local_cluster
    from placement.profiled import costs_from_profile, planned_workers

    meta = read_meta(a.partitions)
    spec = (load_cluster(cfg.cluster) if cfg.cluster
            else local_cluster(cfg.num_workers, devices=cfg.devices, cores=_usable_cores()))
    workers = spec.workers
    train, memory = part_loads(meta)
    inner = [int(p["num_inner"]) for p in meta["parts"]]
    edges = part_edges(a.partitions)
    speeds = [w.speed for w in workers]
    profile, origin = _profile(a, cfg, spec, meta)
    costs, planned, scaling = None, None, None
    # Placed once, before the costs: the bytes each worker sends scale with the cut this placement makes.
    assignment = assign_parts(train, memory, edges, speeds, [w.memory_bytes for w in workers])
    cut_edges = cut_between_workers(assignment, edges)
    cut = cut_edges / max(1, int(meta["num_edges"]))
    if profile is not None and profile.get("parts"):
        profiled_cut = _profiled_cut(profile, a.partitions, meta, edges)
        ratio = cut / profiled_cut if profiled_cut > 0 else 1.0
        measured_workers, _shape = costs_from_profile(profile)
        planned, as_measured = planned_workers(measured_workers, speeds, ratio)
        costs = [{"sample": w.sample, "gather": w.gather, "compute": w.compute} for w in planned]
        scaling = {"profiled_workers": len(measured_workers), "as_measured": as_measured,
                   "profiled_cut": profiled_cut, "planned_cut": cut, "bytes_scale": ratio, "speeds": speeds}
    elif profile is not None and len(profile["fullgraph"]) != len(workers):
        raise ValueError(f"--profile {origin['path']}: a --strategy fullgraph profile of {len(profile['fullgraph'])} "
                         f"workers predicts only {len(profile['fullgraph'])} (the cluster has {len(workers)}); "
                         f"profile with --profile-workers {len(workers)}")
    plan, why = optimize_plan(train, inner, memory, edges, [w.device for w in workers], speeds,
                              [w.memory_bytes for w in workers], cfg.batch_size, costs=costs,
                              assignment=assignment)
    assignment = [list(parts) for parts in assignment]
    step = max(w.step_s for w in why)
    counts = [p.get("label_counts") for p in meta["parts"]]
    tvd = [_group_tvd(counts, parts, meta) for parts in assignment]
    simulated, sync = (_simulated(profile, spec, plan, planned, cfg) if profile is not None else (None, None))
    res = {"partitions": str(a.partitions), "cluster": spec.describe(), "batch_size": cfg.batch_size,
           "steps_per_epoch": plan.steps_per_epoch, "assignment": assignment,
           "shares": list(plan.shares), "lines": [w.line(measured=costs is not None) for w in why],
           "cut_edges_between_workers": cut_edges,
           "num_edges": int(meta["num_edges"]), "measured": costs is not None,
           "predicted_epoch_s": step * plan.steps_per_epoch if costs is not None else None,
           "profile": origin, "scaling": scaling, "label_tvd": tvd, "sync": sync, "simulated": simulated,
           "compress": profile.get("key", {}).get("compress", "none") if profile is not None else None,
           "recipe_strategy": cfg.strategy}
    res["recommendation"] = recommend(simulated, tvd, meta) if simulated else None
    return res


def _group_tvd(counts: list[Any], parts: Sequence[int], meta: dict[str, Any]) -> Optional[float]:
    """A worker's label TVD (None: unknown: link prediction, multi-label, no labels)."""
    from partition.stats import group_label_tvd

    if meta.get("task") == "link":
        return None
    tvd = group_label_tvd(counts, parts)
    return None if math.isnan(tvd) else tvd


def recommend(simulated: dict[str, Any], tvd: Sequence[Optional[float]], meta: dict[str, Any]) -> dict[str, Any]:
    """The fastest strategy that keeps accuracy, unless the fastest trades it and the user can judge.

    Aggregation is left out where the largest label TVD of a worker's parts is above
    ``MAX_AGGREGATION_TVD`` or unknown (each worker would fit its own label mix), with the reason and
    what to partition with instead. ``--staleness 1`` and aggregation are never recommended without the
    words that they trade accuracy for time. Each alternative's predicted epoch and gain over
    minibatch is in ``simulated`` (printed beside it).

    Example:
        >>> sim = {"minibatch": {"epoch_s": 1.0}, "aggregation": {"epoch_s": 0.5}}
        >>> recommend(sim, [0.7, 0.7], {})["strategy"], recommend(sim, [0.02, 0.03], {})["strategy"]
        ('minibatch', 'aggregation')
    """
    known = [t for t in tvd if t is not None]
    worst = max(known) if len(known) == len(tvd) and known else None
    aggregation_ok = worst is not None and worst <= MAX_AGGREGATION_TVD
    why_not = None
    if not aggregation_ok:
        why_not = ("aggregation is not recommended: " + (
            f"a worker's parts have label TVD {worst:.2f} against the whole graph (above {MAX_AGGREGATION_TVD}), "
            "so each worker would fit its own label mix" if worst is not None else
            "the label mix of the workers' parts is unknown (link prediction, multi-label, or no labels)")
            + "; partition with --partition-method random or super to make aggregation's parts alike")
    allowed = {k: v for k, v in simulated.items() if aggregation_ok or not k.startswith("aggregation")}
    best = min(allowed, key=lambda k: allowed[k]["epoch_s"])
    trades = best.startswith("aggregation") or "--staleness 1" in best
    words = None
    if trades:
        words = (f"--strategy {best} trades accuracy for time: " + (
            f"each worker trains on its own parts (largest label TVD {worst:.2f}) and the models are averaged"
            if best.startswith("aggregation") else "each layer reads the other workers' embeddings one step old")
            + "; compare the validation accuracy of a short run of each before committing")
    return {"strategy": best, "trades_accuracy": trades, "words": words, "why_not_aggregation": why_not,
            "max_label_tvd": worst}


def _profiled_cut(profile: dict[str, Any], partitions: str, meta: dict[str, Any], edges: Any) -> float:
    """The share of edges cut between the profiled workers: their parts as the profile job placed them
    (equal workers on the profiled partition, this one where the profile does not name another)."""
    from partition.api import part_edges, read_meta
    from placement.assign import assign_parts, cut_between_workers, part_loads

    where = profile.get("key", {}).get("partitions") or partitions
    if os.path.abspath(str(where)) != os.path.abspath(str(partitions)):
        try:
            meta, edges = read_meta(where), part_edges(where)
        except (OSError, ValueError):
            pass  # the profiled partition is gone: this one's cut stands in (said in the scaling line)
    n = len(profile["parts"])
    train, memory = part_loads(meta)
    assignment = assign_parts(train, memory, edges, [1.0] * n, [math.inf] * n)
    return cut_between_workers(assignment, edges) / max(1, int(meta["num_edges"]))


def _profile(a: argparse.Namespace, cfg: Any, spec: Any, meta: dict[str, Any]) -> tuple[Optional[dict[str, Any]],
                                                                                        dict[str, Any]]:
    """The profile to predict from, and where it came from: ``--profile``, else measured here (None: --no-profile)."""
    if a.no_profile:
        if a.profile:
            raise ValueError("--no-profile and --profile: give one")
        return None, {"source": "none"}
    if a.profile:
        return _read_profile(a.profile), {"source": "given", "path": str(a.profile)}
    workers = a.profile_workers or max(2, min(spec.num_workers, _usable_cores(), int(meta["num_parts"])))
    if workers < 2 or workers > int(meta["num_parts"]):
        raise ValueError(f"--profile-workers {workers}: a profile needs 2 to {meta['num_parts']} workers (the parts of "
                         f"{a.partitions}): what crosses between workers is measured, not guessed")
    from graphdist.planning import default_profile_path, measure_profile

    out = Path(a.save_profile) if a.save_profile else default_profile_path(a.partitions, cfg, workers)
    print(f"profiling {workers} workers on this machine (a few probe steps each; --profile FILE skips this)...",
          file=sys.stderr, flush=True)
    seconds = measure_profile(cfg, a.partitions, workers, out)
    return _read_profile(str(out)), {"source": "measured", "path": str(out), "workers": workers,
                                     "seconds": seconds}


def _usable_cores() -> int:
    from graphdist.launch import usable_cores

    return len(usable_cores())


def describe_from_args(a: argparse.Namespace, cfg: Any) -> dict[str, Any]:
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
                         edge_cut=a.edge_cut, speedup=a.speedup, batch_size=cfg.batch_size)
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


def _simulated(profile: dict[str, Any], spec: Any, plan: Any, workers: Optional[list[Any]],
               cfg: Any) -> tuple[Optional[dict[str, Any]], Optional[dict[str, Any]]]:
    """Per strategy (and each variant it declares) the simulator's epoch on the spec's hosts and links, and
    the gradient sync minibatch was predicted under (None, None: an older profile).

    ``workers``: the planned workers' costs (``placement.profiled.planned_workers``), for a per-seed profile.
    The sync is the recipe's; ``--sync auto`` is modelled as it decides (``graphdist.sync.choice``): DDP's
    buckets on one host, across hosts the faster prediction of the two (DDP by more than its margin).
    Strategies without a cost model, or whose model needs another kind of profile (a full-graph one
    against per-seed ones), are left out.
    """
    from graphdist.options import STRATEGIES
    from graphdist.sync.choice import able_modes, choose_sync
    from graphdist.sync.modes import SYNC_MODES
    from placement.profiled import costs_from_profile, predict_from_profile
    from placement.simulator import Layout, simulate

    wire = _wire(profile.get("key", {}).get("compress", "none"))
    hosts = {h.name: i for i, h in enumerate(spec.hosts)}
    shared = {"cores": (spec.machine_cores,), "machine_of_host": (0,) * len(spec.hosts)} if spec.machine_cores else {}
    layout = Layout(host_of=tuple(hosts[w.host] for w in spec.workers),
                    link_bps=tuple(h.link_bps for h in spec.hosts), local_bps=spec.local_link_bps,
                    duplex=spec.duplex, duplex_stream=spec.duplex_stream, burst_bytes=spec.burst_bytes, **shared)
    shares = list(plan.shares)
    out: dict[str, Any] = {}
    sync = None
    if workers is not None:
        _, shape = costs_from_profile(profile)

        # --loaders: the spec's per worker, else the recipe's for every worker (auto: as a run decides, on its device)
        loaders = [w.loaders or (cfg.loaders or 0) for w in spec.workers]

        def run(cost_model: str, **settings: Any) -> Any:
            return simulate(workers, shares, layout, plan.steps_per_epoch, model=shape, strategy=cost_model,
                            wire=wire, loaders=loaders if any(loaders) else None, **settings)

        able = able_modes(cfg.sync, cfg.compress, cfg.sacp, cfg.sacp_override, cfg.allreduce, cfg.devices)
        by_mode = {m: run("minibatch", overlap=m == "dwbp", sacp=SYNC_MODES[m].layerwise and cfg.sacp != "off")
                   for m in able}
        choice = choose_sync(able, one_host=len(spec.hosts) == 1,
                             step_s={m: p.step_s for m, p in by_mode.items()}, timed_by="predicted steps")
        sync = {"mode": choice.chosen, "asked": cfg.sync, "why": choice.reason,
                "step_s": {m: p.step_s for m, p in by_mode.items()}}
    for name, strategy in STRATEGIES.items():
        for flags, settings in strategy.variants if strategy.cost_model else ():
            try:
                if workers is not None and strategy.cost_model == "minibatch":
                    pred = by_mode[sync["mode"]]  # type: ignore[index]
                elif workers is not None and strategy.cost_model == "aggregation":
                    pred = run("aggregation", **dict(settings))
                else:
                    pred = predict_from_profile(profile, strategy.cost_model, layout, shares, plan.steps_per_epoch,
                                                wire=wire, **dict(settings))
            except ValueError:
                return None, None
            if pred is not None:
                out[f"{name} {flags}".strip()] = {"epoch_s": pred.epoch_s, "step_s": pred.step_s,
                                                  "bottleneck": pred.bottleneck, "line": pred.line()}
    return out or None, sync


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
    origin = res["profile"]
    if origin["source"] == "measured":
        print(f"profile: measured here in {origin['seconds']:.0f} s with {origin['workers']} workers, saved to "
              f"{origin['path']} (reuse it with --profile)")
    elif origin["source"] == "given":
        print(f"profile: {origin['path']}")
    scaling = res["scaling"]
    if scaling is not None:
        if scaling["as_measured"]:
            print("  measured: each worker's costs as profiled (same workers, same parts)")
        else:
            print(f"  measured: the per-seed costs (sampling, gathering, compute) and bytes of "
                  f"{scaling['profiled_workers']} workers of this machine, their mean used for every worker")
            print(f"  scaled: times by each worker's speed in the spec ({_speeds(scaling['speeds'])}); the bytes that "
                  f"cross between workers by the edge cut, {scaling['planned_cut']:.3f} planned over "
                  f"{scaling['profiled_cut']:.3f} profiled (x{scaling['bytes_scale']:.2f})")
        print("  modelled: the links (the spec's rates) and the gradient exchange (placement/simulator.py)")
    print(f"\nplan for {res['partitions']} (batch {res['batch_size']}, {res['steps_per_epoch']} steps/epoch"
          f"{'' if res['measured'] else '; step times in relative units: --no-profile'}):")
    for line, tvd in zip(res["lines"], res["label_tvd"]):
        print(f"  {line}, label TVD {'unknown' if tvd is None else f'{tvd:.2f}'}")
    print(f"edges cut between workers: {res['cut_edges_between_workers']:,} of {res['num_edges']:,}")
    if res["simulated"]:
        sim = res["simulated"]
        if res["sync"]:
            sync = res["sync"]
            asked = f" (--sync {sync['asked']}: {sync['why']})" if sync["asked"] == "auto" else ""
            print(f"minibatch's gradient sync: {sync['mode']}{asked}")
        print(f"predicted epoch on this cluster's links (placement/simulator.py; bytes as --compress "
              f"{res.get('compress') or 'none'}, as profiled):")
        width = max(map(len, sim))
        base = sim.get("minibatch", {}).get("epoch_s")
        for strategy, pred in sim.items():
            gain = f"  {base / pred['epoch_s']:.2f}x minibatch's" if base and not strategy == "minibatch" else ""
            trade = "  (trades accuracy for time)" if strategy.startswith("aggregation") or "--staleness 1" in strategy else ""
            print(f"  {strategy:<{width}} {pred['line']}{gain}{trade}")
        rec = res["recommendation"]
        print(f"recommended: --strategy {rec['strategy']}")
        if rec["words"]:
            print(f"  {rec['words']}")
        if rec["why_not_aggregation"] and any(k.startswith("aggregation") for k in sim):
            print(f"  {rec['why_not_aggregation']}")
        print("  see docs/strategies.md#how-to-choose")
    elif res["predicted_epoch_s"] is not None:
        print(f"predicted minibatch epoch (compute-bound, from the profile): {res['predicted_epoch_s']:.2f} s")


def _speeds(speeds: Sequence[float]) -> str:
    distinct = sorted(set(speeds))
    return f"all {distinct[0]:g}" if len(distinct) == 1 else ", ".join(f"{s:g}" for s in speeds)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``graphdist-plan``; returns the exit code."""
    from graphdist.launch import WorkerFailed

    try:
        a, cfg = parse(sys.argv[1:] if argv is None else argv)
        res = plan_from_args(a, cfg)
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    except (ValueError, WorkerFailed) as exc:  # UsageError, ConfigError, ClusterSpecError, PlacementError...
        print(f"{PROG}: error: {str(exc).strip().splitlines()[0] if isinstance(exc, WorkerFailed) else exc}",
              file=sys.stderr)
        return 2
    if a.describe:
        print_described(res)
    else:
        print_plan(res)
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))
    return 0


def entry() -> None:
    """The ``graphdist-plan`` command: :func:`main`, then a fast exit (``graphdist.cli.args.finish``)."""
    from graphdist.cli.args import finish

    finish(main())


if __name__ == "__main__":
    entry()
