"""DGL 2.1 mini-batch GraphSAGE training on the bench's graph; run inside the peer venv only.

The workload of ``bench/bench_train.py --peers``: one process, one thread, GraphSAGE (mean)
with 3 layers of hidden 256, dropout 0.5, Adam, batch 1024, fan-outs ``[15, 10, 5]`` from
the seeds outward, which is DGL's ``NeighborSampler([5, 10, 15])``. Timed: sampling,
feature gather, forward, backward and step, i.e. seeds trained per second.

Reads an ``.npz`` with ``indptr``, ``indices`` (CSR with rows = destinations, DGL's CSC),
``x``, ``y`` and ``train`` (train node ids); prints one JSON line.

Run book (what ``bench_train.py --peers`` does):
    OMP_NUM_THREADS=1 $GRAPHDIST_CACHE/peers-venv/bin/python bench/peers/dgl_train.py \\
        --graph $GRAPHDIST_CACHE/bench/train-1000000.npz --steps 30
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
import torch.nn.functional as F


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graph", required=True)
    parser.add_argument("--fanouts", default="15,10,5", help="graphdist order (seeds outward)")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=30, help="timed steps")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    import dgl  # the peer venv only; graphdist never imports dgl
    from dgl.nn import SAGEConv

    from dgl_graph import load_csc_graph, peak_rss_bytes  # beside this script

    g, data = load_csc_graph(args.graph)
    x = torch.from_numpy(data["x"])
    y = torch.from_numpy(data["y"].astype(np.int64))
    train = torch.from_numpy(data["train"].astype(np.int64))
    num_classes = int(y.max()) + 1
    fanouts = [int(f) for f in args.fanouts.split(",")][::-1]  # DGL lists the input layer first

    class SAGE(torch.nn.Module):
        def __init__(self, dims: list[int]) -> None:
            super().__init__()
            self.layers = torch.nn.ModuleList(SAGEConv(a, b, "mean") for a, b in zip(dims, dims[1:]))

        def forward(self, blocks, h):
            for i, (layer, block) in enumerate(zip(self.layers, blocks)):
                h = layer(block, h)
                if i < len(self.layers) - 1:
                    h = F.dropout(F.relu(h), 0.5, self.training)
            return h

    model = SAGE([x.shape[1]] + [args.hidden] * (len(fanouts) - 1) + [num_classes])
    opt = torch.optim.Adam(model.parameters(), lr=0.003)
    sampler = dgl.dataloading.NeighborSampler(fanouts)
    loader = dgl.dataloading.DataLoader(g, train, sampler, batch_size=args.batch_size, shuffle=True,
                                        drop_last=True, num_workers=0)
    it = iter(loader)
    seeds = 0
    start = None
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            start = time.perf_counter()
            seeds = 0
        input_nodes, output_nodes, blocks = next(it)
        out = model(blocks, x[input_nodes])
        loss = F.cross_entropy(out, y[output_nodes])
        opt.zero_grad()
        loss.backward()
        opt.step()
        seeds += output_nodes.numel()
    elapsed = time.perf_counter() - start
    print(json.dumps({"system": f"dgl {dgl.__version__} (torch {torch.__version__})", "seeds_per_s": seeds / elapsed,
                      "peak_rss_bytes": peak_rss_bytes(),
                      "ms_per_step": 1000 * elapsed / args.steps, "steps": args.steps, "fanouts": args.fanouts,
                      "hidden": args.hidden, "batch_size": args.batch_size}))
    return 0



if __name__ == "__main__":
    raise SystemExit(main())
