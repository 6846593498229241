"""DGL 2.1's C++ neighbour sampler on the bench's graph; run inside the peer venv only.

Reads the ``.npz`` that ``bench/bench_sampler.py`` saved (``indptr``, ``indices``: CSR with rows
= destinations, i.e. DGL's CSC; ``seeds``: the batch order) and prints one JSON line per
fan-out. DGL lists fan-outs from the input layer inward, so graphdist's ``[15, 10, 5]`` (seeds
outward) is DGL's ``NeighborSampler([5, 10, 15])``: the script takes graphdist's order and
reverses it. Counted like graphdist's: edges of the returned blocks (sampling without
replacement, ``to_block`` relabelling and frontier de-duplication included), no features.

Run book (what ``bench_sampler.py --peers`` does):
    OMP_NUM_THREADS=1 $GRAPHDIST_CACHE/peers-venv/bin/python bench/peers/dgl_sampler.py \\
        --graph $GRAPHDIST_CACHE/bench/sampler-1000000.npz --fanouts 15,10,5 10,5 --batch-size 1024
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
import torch


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graph", required=True, help=".npz with indptr, indices, seeds")
    parser.add_argument("--fanouts", nargs="+", required=True, help="graphdist order, e.g. 15,10,5 10,5")
    parser.add_argument("--batch-size", "--batch_size", type=int, default=1024)
    parser.add_argument("--batches", type=int, default=30, help="timed batches per repeat")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--first-repeat", "--first_repeat", type=int, default=0,
                        help="index of the first repeat: the batch window graphdist used in the same round")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    import dgl  # the peer venv only; graphdist never imports dgl

    from dgl_graph import load_csc_graph  # beside this script

    g, data = load_csc_graph(args.graph)
    seeds = torch.from_numpy(data["seeds"].astype(np.int64))
    bs = args.batch_size
    for spec in args.fanouts:
        fanouts = [int(f) for f in spec.split(",")]
        sampler = dgl.dataloading.NeighborSampler(fanouts[::-1], replace=False)
        for i in range(args.warmup):
            sampler.sample_blocks(g, seeds[i * bs : (i + 1) * bs])
        rates, seed_rates, edges_per_batch = [], [], 0
        for r in range(args.first_repeat, args.first_repeat + args.repeats):
            offset = (args.warmup + r * args.batches) * bs
            edges = 0
            t0 = time.perf_counter()
            for i in range(args.batches):
                _, _, blocks = sampler.sample_blocks(g, seeds[offset + i * bs : offset + (i + 1) * bs])
                edges += sum(int(b.num_edges()) for b in blocks)
            dt = time.perf_counter() - t0
            rates.append(edges / dt)
            seed_rates.append(args.batches * bs / dt)
            edges_per_batch = edges // args.batches
        print(json.dumps({
            "system": f"dgl {dgl.__version__} (torch {torch.__version__})", "fanouts": fanouts,
            "edges_per_s": max(rates), "edges_per_s_median": statistics.median(rates), "rates": rates,
            "seeds_per_s": max(seed_rates), "edges_per_batch": edges_per_batch,
            "threads": args.threads, "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        }), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
