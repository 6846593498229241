"""DGL 2.1 layer-wise full-neighbour inference of GraphSAGE on the bench's graph; run inside the peer venv only.

The peer of graphdist's evaluation (``bench/bench_train.py --inference``): the model of the speed
workload (GraphSAGE mean, 3 layers, hidden 256), one process, one thread, computed the way DGL's
GraphSAGE example does it: layer by layer over every node, in batches of ``--batch-size``
destination nodes with ``MultiLayerFullNeighborSampler(1)``, each layer's output for all nodes
kept in memory for the next. Weights are untrained (the time does not depend on them).

Reads the ``.npz`` of ``dgl_train.py``; prints one JSON line (seconds, nodes/s, peak RSS).

Run book:
    OMP_NUM_THREADS=1 $GRAPHDIST_CACHE/peers-venv/bin/python bench/peers/dgl_infer.py \\
        --graph $GRAPHDIST_CACHE/bench/train-1000000.npz
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
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=4096, help="destination nodes per inference batch")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    import dgl  # the peer venv only; graphdist never imports dgl
    from dgl.nn import SAGEConv

    from dgl_graph import load_csc_graph, peak_rss_bytes  # beside this script

    g, data = load_csc_graph(args.graph)
    x = torch.from_numpy(data["x"])
    num_classes = int(data["y"].max()) + 1
    dims = [x.shape[1]] + [args.hidden] * (args.layers - 1) + [num_classes]
    layers = torch.nn.ModuleList(SAGEConv(a, b, "mean") for a, b in zip(dims, dims[1:])).eval()
    sampler = dgl.dataloading.MultiLayerFullNeighborSampler(1)
    nodes = torch.arange(g.num_nodes())
    start = time.perf_counter()
    with torch.no_grad():
        h = x
        for i, layer in enumerate(layers):
            out = torch.empty(g.num_nodes(), dims[i + 1])
            loader = dgl.dataloading.DataLoader(g, nodes, sampler, batch_size=args.batch_size, shuffle=False,
                                                drop_last=False, num_workers=0)
            for input_nodes, output_nodes, blocks in loader:
                y = layer(blocks[0], h[input_nodes])
                out[output_nodes] = F.relu(y) if i < len(layers) - 1 else y
            h = out
    elapsed = time.perf_counter() - start
    print(json.dumps({"system": f"dgl {dgl.__version__} (torch {torch.__version__})", "seconds": elapsed,
                      "nodes_per_s": g.num_nodes() / elapsed, "peak_rss_bytes": peak_rss_bytes(),
                      "batch_size": args.batch_size}))
    return 0



if __name__ == "__main__":
    raise SystemExit(main())
