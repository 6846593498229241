"""What each gradient sync costs the training step on this machine: 2 workers, one job, alternating steps.

Workload: graphdist-train's defaults (synthetic-100k, 2 METIS parts, SAGE 2x128, batch 1024 per
worker). Each worker builds the strategy once, then a model copy per variant under its own sync
(``--sync ddp``, ``dwbp`` with SACP on its default rule, ``dwbp --sacp off``, ``blocking``) and runs
their steps in alternating order, as ``--sync auto``'s probe does, on the same kind of batches.
Per variant: the step's wall time (the slower rank's median) and the CPU time of the training
thread (``time.thread_time``; mean over ranks of each rank's median). In one job, rounds
alternate, so the machine's drift falls on every variant alike.

Run book:
    OMP_NUM_THREADS=1 python bench/bench_sync_cost.py              # ~30 s
    OMP_NUM_THREADS=1 python bench/bench_sync_cost.py --rounds 200
Writes bench/results/sync_cost.json (git-ignored): per variant, wall_ms and train_thread_cpu_ms.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# variant -> (--sync, --sacp)
VARIANTS = {"ddp": ("ddp", "auto"), "dwbp": ("dwbp", "auto"), "dwbp --sacp off": ("dwbp", "off"),
            "blocking": ("blocking", "auto")}


def partitions(dataset: str) -> Path:
    """2 METIS parts of ``dataset`` (graphdist-train's default: synthetic-100k), made once into the cache."""
    from partition.api import PartitionConfig, default_output, partition

    out = default_output(dataset, PartitionConfig(2, "metis", 0))
    if not (out / "meta.json").exists():
        partition(dataset, 2, method="metis", out=out, seed=0, force=True)
    return out


def _worker(rank: int, world_size: int, part_dir: str, rounds: int, out: str) -> None:
    from graphdist import comm
    from graphdist.config import TrainConfig
    from graphdist.trainers import probes
    from graphdist.trainers.base import adam, job_sync
    from graphdist.trainers.run import build_strategy

    torch.set_num_threads(1)
    cfg = TrainConfig(num_workers=world_size, sync="ddp", prefetch=False, timeout=120)
    strategy = build_strategy(rank, world_size, cfg, part_dir)
    target = strategy.probe_target()
    syncs = {}
    for name, (mode, sacp) in VARIANTS.items():
        ctx = replace(strategy.ctx, cfg=replace(cfg, sync=mode, sacp=sacp), decisions={})
        syncs[name] = job_sync(ctx, probes.probe_copy(target.model), mode=mode)
    optimizers = {name: adam(sync.model.parameters(), lr=1e-6) for name, sync in syncs.items()}
    rng = torch.Generator().manual_seed(1 + rank)
    gather = probes._gatherer(target.batches.loader, target.device)
    wall: dict[str, list[float]] = {name: [] for name in syncs}
    cpu: dict[str, list[float]] = {name: [] for name in syncs}
    names = list(syncs)
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            n, seeds = probes._draw(target.batches.train_seeds, target.batches.loader.batch_size, rng)
            batch = target.batches.sampler.sample(seeds)
            x, y = gather(batch.input_nodes), target.batches.loader.labels(batch.seed_nodes)
            t0, c0 = time.perf_counter(), time.thread_time()
            probes._train_step(target, syncs[name], optimizers[name], batch, x, y, n)
            if r >= 2:  # warm-up rounds
                wall[name].append(time.perf_counter() - t0)
                cpu[name].append(time.thread_time() - c0)
    mine = {name: (statistics.median(wall[name]), statistics.median(cpu[name])) for name in syncs}
    everyone = comm.all_gather_object(mine)
    for sync in syncs.values():
        sync.close()
    strategy.close()
    if rank == 0:
        rows = {name: {"wall_ms": 1e3 * max(g[name][0] for g in everyone),
                       "train_thread_cpu_ms": 1e3 * statistics.mean(g[name][1] for g in everyone)}
                for name in names}
        Path(out).write_text(json.dumps(rows))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=80, help="alternating rounds, 2 of them warm-up (default 80)")
    p.add_argument("--dataset", default="synthetic-100k", help="graph to partition in 2 (default: graphdist-train's)")
    p.add_argument("--out", default=str(REPO / "bench" / "results" / "sync_cost.json"))
    args = p.parse_args(argv)
    os.environ.setdefault("GRAPHDIST_DATA", str(REPO.parent / "shared" / "datasets"))
    from graphdist.testing import launch

    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    if args.rounds < 3:
        p.error(f"--rounds must be at least 3 (2 are warm-up); got {args.rounds}")
    launch(_worker, 2, str(partitions(args.dataset)), args.rounds, args.out, timeout=1800)
    rows: dict[str, Any] = json.loads(Path(args.out).read_text())
    Path(args.out).write_text(json.dumps({"dataset": args.dataset, "rounds": args.rounds, "rows": rows}, indent=1))
    base = rows["ddp"]
    print(f"{args.dataset}, 2 METIS parts, SAGE 2x128, batch 1024 per worker, 2 workers, {args.rounds} rounds")
    print(f"{'sync':<18}{'wall ms':>9}{'vs ddp':>8}{'train-thread CPU ms':>21}{'vs ddp':>8}")
    for name, r in rows.items():
        print(f"{name:<18}{r['wall_ms']:>9.2f}{r['wall_ms'] / base['wall_ms']:>8.2f}"
              f"{r['train_thread_cpu_ms']:>21.2f}{r['train_thread_cpu_ms'] / base['train_thread_cpu_ms']:>8.2f}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
