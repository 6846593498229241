"""Sampler throughput (sampled edges/s, seeds/s) and prefetch overlap; optionally against DGL.

Workload (issue 4): a generated power-law graph (``graphdist.data.synthetic``, 1,000,000
nodes, ~20M directed edges), batches of 1024 seeds in a fixed random order, one thread,
sampling only, without replacement, fan-outs ``[15, 10, 5]`` and ``[10, 5]`` (seeds outward).
"Sampled edges" are the edges of the returned blocks, after frontier de-duplication and
block relabelling; features are not gathered. Each fan-out runs ``--repeats`` times over
fresh batches; with ``--peers`` the rounds alternate graphdist and DGL over the same batches; the table shows
the best repeat of each (the machine is shared, so the best is the least disturbed) and the
median.

The overlap part trains a small 2-layer GraphSAGE (PyG ``SAGEConv`` on blocks) three ways,
taking turns a round of steps each: on batches made beforehand (compute alone), through
``NodeLoader(prefetch=False)`` and through ``prefetch=True``. Every step is timed; medians
are reported, with the share of the sampling + gathering time that prefetch hid, end to end:
``hidden = (t_step_sync - t_step_prefetch) / t_sample_gather``, and against compute alone:
``1 - (t_step_prefetch - t_step_compute) / t_sample_gather``.

Run book:
    OMP_NUM_THREADS=1 python bench/bench_sampler.py                  # full size, ~2 min
    OMP_NUM_THREADS=1 python bench/bench_sampler.py --nodes 100000   # quick
    OMP_NUM_THREADS=1 python bench/bench_sampler.py --peers          # + DGL 2.1 in its own venv

``--peers`` builds (once) a venv with torch 2.2.1 + dgl 2.1.0 under ``$GRAPHDIST_CACHE``
(``bench/peers/env.py``), saves the graph and batch order once as ``.npz`` there, runs
``bench/peers/dgl_sampler.py`` on it in that venv and prints both systems and the ratio.
Results go to ``bench/results/sampler.json`` (git-ignored).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from graphdist.data.graph import Graph  # noqa: E402
from graphdist.data.loaders import cache_dir  # noqa: E402
from sampling import NeighborSampler, NodeLoader  # noqa: E402



def load_graph(nodes: int, avg_degree: float, num_features: int, seed: int) -> Graph:
    """The generated graph, cached as .npz (DGL's run reads the same file)."""
    from graphdist.data.synthetic import synthetic

    path = graph_path(nodes, avg_degree, num_features, seed)
    if path.exists():
        data = np.load(path)
        x = torch.from_numpy(data["x"]) if "x" in data.files else None
        y = torch.from_numpy(data["y"]) if "y" in data.files else None
        return Graph(indptr=torch.from_numpy(data["indptr"]), indices=torch.from_numpy(data["indices"]), x=x, y=y,
                     validate_features=False)
    t0 = time.perf_counter()
    g = synthetic(nodes, avg_degree=avg_degree, num_features=num_features, num_classes=16, seed=seed)
    print(f"generated {g} in {time.perf_counter() - t0:.1f} s", flush=True)
    seeds = torch.randperm(nodes, generator=torch.Generator().manual_seed(seed)).numpy()
    arrays = {"indptr": g.indptr.numpy(), "indices": g.indices.numpy(), "seeds": seeds}
    if g.x is not None:
        arrays.update(x=g.x.numpy(), y=g.y.numpy())
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, **arrays)
    tmp.rename(path)  # never a half-written cache file
    return g


def graph_path(nodes: int, avg_degree: float, num_features: int, seed: int) -> Path:
    return cache_dir() / "bench" / f"sampler-{nodes}-d{avg_degree:g}-f{num_features}-s{seed}.npz"


def batch_order(nodes: int, seed: int) -> torch.Tensor:
    return torch.randperm(nodes, generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------ sampling throughput
def bench_sampling(g: Graph, fanouts: list[int], args: argparse.Namespace, repeat: int,
                   sampler: NeighborSampler) -> tuple[float, float, int]:
    """One repeat: ``args.batches`` batches from window ``repeat`` of the fixed order.

    Returns:
        (edges/s, seeds/s, edges per batch).
    """
    order = batch_order(g.num_nodes, args.seed)
    bs = args.batch_size
    need = (args.warmup + args.repeats * args.batches) * bs
    if need > order.numel():
        raise SystemExit(f"--batches {args.batches} x --repeats {args.repeats} needs {need:,} seeds; "
                         f"the graph has {order.numel():,} nodes: lower them or raise --nodes")
    if repeat == 0:
        for i in range(args.warmup):
            sampler.sample(order[i * bs : (i + 1) * bs])
    offset = (args.warmup + repeat * args.batches) * bs
    edges = 0
    t0 = time.perf_counter()
    for i in range(args.batches):
        edges += sampler.sample(order[offset + i * bs : offset + (i + 1) * bs]).num_sampled_edges
    dt = time.perf_counter() - t0
    return edges / dt, args.batches * bs / dt, edges // args.batches


def summarise(system: str, fanouts: list[int], runs: list[tuple[float, float, int]]) -> dict[str, Any]:
    rates = [r[0] for r in runs]
    return {"system": system, "fanouts": fanouts, "edges_per_s": max(rates),
            "edges_per_s_median": statistics.median(rates), "rates": rates,
            "seeds_per_s": max(r[1] for r in runs), "edges_per_batch": runs[-1][2], "threads": torch.get_num_threads()}


def bench_rounds(g: Graph, args: argparse.Namespace) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Alternates graphdist and (with --peers) DGL, one repeat each per round, over the same batches.

    The machine is shared: alternating spreads any outside load over both systems instead of
    charging it to whichever ran during the burst.
    """
    specs = [[int(f) for f in spec.split(",")] for spec in args.fanouts]
    samplers = [NeighborSampler(g, f, replace=False, seed=args.seed) for f in specs]
    ours: list[list[tuple[float, float, int]]] = [[] for _ in specs]
    theirs: dict[str, list[dict[str, Any]]] = {}
    python = None
    if args.peers:
        from bench.peers.env import peer_python

        python = peer_python(quiet=True)
    for r in range(args.repeats):
        for i, f in enumerate(specs):
            ours[i].append(bench_sampling(g, f, args, r, samplers[i]))
        if python is not None:
            for row in run_peer_round(args, python, r):
                theirs.setdefault(str(row["fanouts"]), []).append(row)
        print(f"round {r + 1}/{args.repeats}: " + ", ".join(
            f"{specs[i]} {ours[i][-1][0] / 1e6:.2f}M" for i in range(len(specs))) + (
            "  | dgl " + ", ".join(f"{k} {v[-1]['edges_per_s'] / 1e6:.2f}M" for k, v in theirs.items())
            if theirs else ""), flush=True)
    system = f"graphdist (torch {torch.__version__})"
    our_rows = [summarise(system, f, runs) for f, runs in zip(specs, ours)]
    peer_rows = []
    for f in specs:
        rows = theirs.get(str(f), [])
        if rows:
            rates = [row["edges_per_s"] for row in rows]
            peer_rows.append({**rows[-1], "edges_per_s": max(rates), "edges_per_s_median": statistics.median(rates),
                              "rates": rates, "seeds_per_s": max(row["seeds_per_s"] for row in rows)})
    return our_rows, peer_rows


# ------------------------------------------------------------------ prefetch overlap
def bench_overlap(args: argparse.Namespace) -> dict[str, Any]:
    """Steps/s of a GraphSAGE training loop with and without prefetch, and compute alone.

    Three variants per round, alternating: compute alone, loader without prefetch, loader
    with prefetch. The glibc allocator is tuned as in every graphdist training worker.
    """
    from torch_geometric.nn import SAGEConv

    from graphdist.launch import tune_allocator
    from sampling import as_layerwise

    tune_allocator()
    g = load_graph(args.train_nodes, args.avg_degree, args.features, args.seed)
    fanouts = [int(f) for f in args.train_fanouts.split(",")]
    torch.manual_seed(args.seed)
    dims = [args.features] + [args.hidden] * (len(fanouts) - 1) + [16]
    model = as_layerwise([SAGEConv(a, b) for a, b in zip(dims[:-1], dims[1:])])
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(x: torch.Tensor, batch: Any) -> None:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x, batch.blocks), batch.y)
        loss.backward()
        opt.step()

    rounds, per_round = args.overlap_rounds, args.train_steps

    def loader_steps(prefetch: bool) -> tuple[NodeLoader, Any]:
        loader = NodeLoader(g, torch.arange(g.num_nodes), NeighborSampler(g, fanouts, seed=args.seed),
                            batch_size=args.batch_size, prefetch=prefetch, seed=args.seed,
                            num_batches=rounds * per_round + 2)
        it = iter(loader)
        for _ in range(2):  # warm-up: buffers allocated, autograd warmed
            b = next(it)
            step(b.x, b)
        return loader, it

    # Compute alone: batches sampled and gathered beforehand. Before each (timed) step its x
    # is copied, untimed, into one reused buffer, so that x is as warm in the cache as a batch
    # the loader has just gathered (a batch kept since it was sampled is cold, and would make
    # compute alone look slower than a prefetched step).
    made = NodeLoader(g, torch.arange(g.num_nodes), NeighborSampler(g, fanouts, seed=args.seed + 1),
                      batch_size=args.batch_size, prefetch=False, seed=args.seed + 1, reuse_buffers=False,
                      num_batches=per_round)
    batches = list(made)
    warm = torch.empty((max(b.x.shape[0] for b in batches), args.features))
    step(batches[0].x, batches[0])

    sync_loader, sync_it = loader_steps(False)
    pref_loader, pref_it = loader_steps(True)
    times: dict[str, list[float]] = {"compute": [], "sync": [], "prefetch": []}
    work: list[float] = []  # sample + gather per batch, in the loop without prefetch
    # The three variants take turns, a round of steps each, and every step is timed: medians
    # over all steps resist the bursts of outside load on a shared machine. The first step
    # of each round is not counted: the paused prefetch thread had its next batch ready.
    for _ in range(rounds):
        for i, b in enumerate(batches):
            x = warm[: b.x.shape[0]].copy_(b.x)
            t0 = time.perf_counter()
            step(x, b)
            if i:
                times["compute"].append(time.perf_counter() - t0)
        for label, loader, it in (("sync", sync_loader, sync_it), ("prefetch", pref_loader, pref_it)):
            for i in range(per_round):
                before = loader.stats.sample_s + loader.stats.gather_s
                t0 = time.perf_counter()
                b = next(it)
                step(b.x, b)
                if i:
                    times[label].append(time.perf_counter() - t0)
                    if label == "sync":
                        work.append(loader.stats.sample_s + loader.stats.gather_s - before)
    waits = pref_loader.stats.wait_s / max(pref_loader.stats.batches, 1)
    loader_hidden = pref_loader.stats.prefetch_hidden_fraction
    for it in (sync_it, pref_it):
        it.close()
    med = statistics.median
    t_work, ts, tp, tc = med(work), med(times["sync"]), med(times["prefetch"]), med(times["compute"])
    return {
        "nodes": g.num_nodes, "features": args.features, "hidden": args.hidden, "fanouts": fanouts,
        "batch_size": args.batch_size, "steps": per_round, "rounds": rounds,
        "compute_ms": 1e3 * tc, "sample_gather_ms": 1e3 * t_work,
        "step_ms_sync": 1e3 * ts, "step_ms_prefetch": 1e3 * tp,
        "steps_per_s_sync": 1 / ts, "steps_per_s_prefetch": 1 / tp,
        # What prefetch saved per step, as a share of the sampling + gathering it moved away.
        "hidden_fraction": (ts - tp) / t_work if t_work > 0 else 0.0,
        # The same against compute alone: how much of sampling still shows in a prefetched step.
        "exposed_ms_prefetch": 1e3 * (tp - tc),
        "hidden_fraction_vs_compute": 1 - (tp - tc) / t_work if t_work > 0 else 0.0,
        "sync_overhead_ms": 1e3 * (ts - tc),
        "wait_ms_prefetch": 1e3 * waits, "loader_hidden_fraction": loader_hidden,
        "quartiles_ms": {k: [1e3 * q for q in statistics.quantiles(v, n=4)] for k, v in times.items()},
    }


# ------------------------------------------------------------------ peers
def run_peer_round(args: argparse.Namespace, python: Path, repeat: int) -> list[dict[str, Any]]:
    """One repeat of every fan-out with DGL in the peer venv, on batch window ``repeat``."""
    # The peer reads the same cached .npz (indptr, indices, seeds) the graph came from.
    path = graph_path(args.nodes, args.avg_degree, 0, args.seed)
    cmd = [str(python), str(REPO / "bench" / "peers" / "dgl_sampler.py"), "--graph", str(path), "--fanouts",
           *args.fanouts, "--batch-size", str(args.batch_size), "--batches", str(args.batches),
           "--warmup", str(args.warmup), "--repeats", "1", "--first-repeat", str(repeat),
           "--threads", str(args.threads)]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"the DGL peer run failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


# ------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    # Steady-state throughput: the compiled sampling loops from the first batch (a process would
    # otherwise run its first 256 hops on torch and load numba mid-measurement; graphdist._numba).
    os.environ.setdefault("GRAPHDIST_NUMBA", "eager")
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--nodes", type=int, default=1_000_000, help="graph size (default 1,000,000)")
    p.add_argument("--avg-degree", "--avg_degree", type=float, default=20.0)
    p.add_argument("--batch-size", "--batch_size", type=int, default=1024)
    p.add_argument("--fanouts", nargs="+", default=["15,10,5", "10,5"], help="seeds outward, e.g. 15,10,5 10,5")
    p.add_argument("--batches", type=int, default=40, help="timed batches per repeat")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch threads (the target is for 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--peers", action="store_true", help="also run DGL 2.1 (builds its venv once)")
    p.add_argument("--no-overlap", "--no_overlap", action="store_true", help="skip the prefetch overlap part")
    p.add_argument("--train-nodes", "--train_nodes", type=int, default=200_000)
    p.add_argument("--train-fanouts", "--train_fanouts", default="10,5")
    p.add_argument("--features", type=int, default=100)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--train-steps", "--train_steps", type=int, default=8, help="steps per variant per overlap round")
    p.add_argument("--overlap-rounds", "--overlap_rounds", type=int, default=10)
    p.add_argument("--out", default=str(REPO / "bench" / "results" / "sampler.json"))
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    if os.environ.get("OMP_NUM_THREADS") != str(args.threads):
        print(f"note: OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')} (set it to {args.threads} "
              "so that the peer and any OpenMP code match)", flush=True)

    g = load_graph(args.nodes, args.avg_degree, 0, args.seed)
    print(f"graph: {g.num_nodes:,} nodes, {g.num_edges:,} edges; batch {args.batch_size}, "
          f"{args.threads} thread(s), {args.batches} batches x {args.repeats} repeats", flush=True)
    ours, peers = bench_rounds(g, args)
    overlap = None if args.no_overlap else bench_overlap(args)

    print(f"\n{'system':<34} {'fan-outs':<12} {'edges/batch':>12} {'M edges/s':>10} {'(median)':>9} "
          f"{'seeds/s':>9} {'ratio':>6}")
    for i, r in enumerate(ours):
        rows = [r] + [q for q in peers if q["fanouts"] == r["fanouts"]]
        for row in rows:
            ratio = row["edges_per_s"] / rows[1]["edges_per_s"] if len(rows) > 1 else float("nan")
            print(f"{row['system']:<34} {str(row['fanouts']):<12} {row['edges_per_batch']:>12,} "
                  f"{row['edges_per_s'] / 1e6:>10.2f} {row['edges_per_s_median'] / 1e6:>9.2f} "
                  f"{row['seeds_per_s']:>9,.0f} {ratio if row is r else 1.0:>6.2f}")
        if len(rows) > 1:
            r["ratio_to_dgl"] = r["edges_per_s"] / rows[1]["edges_per_s"]
    if overlap:
        o = overlap
        print(f"\nprefetch overlap ({o['nodes']:,} nodes, {o['features']} features, SAGE hidden {o['hidden']}, "
              f"fan-outs {o['fanouts']}, batch {o['batch_size']}, {o['rounds']} rounds x {o['steps']} steps, median step):")
        print(f"  compute alone {o['compute_ms']:.1f} ms/step; sample+gather {o['sample_gather_ms']:.1f} ms/batch")
        print(f"  no prefetch {o['step_ms_sync']:.1f} ms/step ({o['steps_per_s_sync']:.2f} steps/s); "
              f"prefetch {o['step_ms_prefetch']:.1f} ms/step ({o['steps_per_s_prefetch']:.2f} steps/s)")
        print(f"  hidden: {100 * o['hidden_fraction']:.0f}% of sampling time end to end, (sync - prefetch) / "
              f"(sample+gather) (loader's own view: {100 * o['loader_hidden_fraction']:.0f}%, waited "
              f"{o['wait_ms_prefetch']:.1f} ms/step)")
        q = o["quartiles_ms"]
        print("  step quartiles (ms): " + "; ".join(f"{k} {v[0]:.1f} / {v[1]:.1f} / {v[2]:.1f}" for k, v in q.items()))
        print(f"  against compute alone: a prefetched step costs {o['exposed_ms_prefetch']:+.1f} ms more, "
              f"{100 * o['hidden_fraction_vs_compute']:.0f}% hidden; a step without prefetch "
              f"{o['sync_overhead_ms']:+.1f} ms more")

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"nodes": g.num_nodes, "edges": g.num_edges, "batch_size": args.batch_size, "threads": args.threads,
            "python": platform.python_version(), "cpus": os.cpu_count(), "command": " ".join(sys.argv)}
    out.write_text(json.dumps({"meta": meta, "graphdist": ours, "peers": peers, "overlap": overlap}, indent=2))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
