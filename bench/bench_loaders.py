"""One worker fed by a loader process against the same worker with its prefetch thread (``--loaders 1`` vs 0).

Workload: a generated graph, GraphSAGE with a small hidden width and wide fan-outs, so that
sampling and gathering are a large share of the step (the share is measured: the serial variant
samples in the training thread, and its wait for batches over its epoch time is that share).
Variants, one training thread each (``torch.set_num_threads(1)``), on the same model and batches:

- ``serial``: no prefetch (sampling in the step; gives the share);
- ``thread``: the prefetch thread samples the next batch while this one trains (one process: the
  two threads share the interpreter's lock wherever Python runs);
- ``loader``: one loader process samples and gathers into shared memory (``sampling.loader_procs``).

Rounds alternate the variants (each round: one epoch of each), so the machine's drift falls on
all alike; the table gives each variant's median epoch time and seeds/s, and the ratio of the
loader's to the thread's median. Loader processes are forked once per variant and reused.

Run book:
    OMP_NUM_THREADS=1 python bench/bench_loaders.py                 # ~1 min
    OMP_NUM_THREADS=1 python bench/bench_loaders.py --nodes 400000 --rounds 7
Writes bench/results/loaders.json (``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Optional

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

VARIANTS = ("serial", "thread", "loader")


def _cpu_model() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor()


def _epoch(loader: Any, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> float:
    """One epoch of plain training steps; its wall seconds."""
    start = time.perf_counter()
    for batch in loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(batch.x, batch.blocks), batch.y)
        loss.backward()
        optimizer.step()
    return time.perf_counter() - start


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=200_000)
    p.add_argument("--features", type=int, default=128)
    p.add_argument("--hidden", type=int, default=16)
    p.add_argument("--fanouts", default="25,20")
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--steps", type=int, default=60, help="steps per epoch (default 60)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--out", default=str(REPO / "bench" / "results" / "loaders.json"))
    args = p.parse_args(argv)

    from graphdist.data.synthetic import synthetic
    from graphdist.models.sage import GraphSAGE
    from sampling import NeighborSampler, NodeLoader

    torch.set_num_threads(1)
    fanouts = [int(f) for f in args.fanouts.split(",")]
    t0 = time.perf_counter()
    graph = synthetic(args.nodes, num_features=args.features, seed=0)
    print(f"graph: {graph.num_nodes:,} nodes, {graph.num_edges:,} edges, generated in {time.perf_counter() - t0:.1f} s")
    seeds = torch.arange(args.steps * args.batch_size) % graph.num_nodes
    num_classes = int(graph.y.max()) + 1

    def make(variant: str) -> Any:
        return NodeLoader(graph, seeds, NeighborSampler(graph, fanouts, seed=1), batch_size=args.batch_size, seed=2,
                          prefetch=variant != "serial", loaders=1 if variant == "loader" else 0)

    loaders = {v: make(v) for v in VARIANTS}
    models = {v: GraphSAGE(args.features, args.hidden, num_classes, num_layers=len(fanouts)) for v in VARIANTS}
    optimizers = {v: torch.optim.Adam(models[v].parameters(), lr=0.01) for v in VARIANTS}
    for v in VARIANTS:  # warm-up: compiled loops, the loader's fork, buffers
        _epoch(loaders[v], models[v], optimizers[v])
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    share: list[float] = []
    try:
        for r in range(args.rounds):
            order = VARIANTS if r % 2 == 0 else tuple(reversed(VARIANTS))
            for v in order:
                loaders[v].stats.reset()
                seconds = _epoch(loaders[v], models[v], optimizers[v])
                times[v].append(seconds)
                if v == "serial":
                    share.append(loaders[v].stats.wait_s / seconds)
            print(f"round {r + 1}: " + ", ".join(f"{v} {times[v][-1]:.2f} s" for v in VARIANTS), flush=True)
    finally:
        for loader in loaders.values():
            loader.close()

    seeds_per_epoch = int(seeds.numel())
    med = {v: statistics.median(times[v]) for v in VARIANTS}
    print(f"\nsampling + gather: {100 * statistics.median(share):.0f}% of the serial step "
          f"({graph.num_nodes:,} nodes, fan-outs {args.fanouts}, batch {args.batch_size}, hidden {args.hidden})")
    print(f"{'variant':<8} {'epoch s (median)':>17} {'seeds/s':>9} {'vs thread':>10}")
    for v in VARIANTS:
        print(f"{v:<8} {med[v]:>17.3f} {seeds_per_epoch / med[v]:>9,.0f} {med['thread'] / med[v]:>9.2f}x")
    per_round = [t / lo for t, lo in zip(times["thread"], times["loader"])]
    print(f"loader vs thread per round: {', '.join(f'{x:.2f}x' for x in per_round)}")
    result = {"config": vars(args), "machine": {"cpus": os.cpu_count(), "cpu": _cpu_model(), "torch": torch.__version__},
              "sampling_share": statistics.median(share), "epoch_s": times, "median_epoch_s": med,
              "seeds_per_s": {v: seeds_per_epoch / med[v] for v in VARIANTS},
              "loader_vs_thread": med["thread"] / med["loader"], "loader_vs_thread_per_round": per_round}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
