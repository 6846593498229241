"""DGL 2.1 mini-batch R-GCN training on the bench's typed graph; run inside the peer venv only.

The workload of ``bench/bench_hetero.py --speed``, built as graphdist's R-GCN is:

- a per-type input encoder: ``Linear(F_t, hidden)`` on each featured type's own columns of the padded
  table, a learnable ``nn.Embedding(N_t, hidden)`` per featureless type;
- ``dgl.nn.RelGraphConv`` layers (``regularizer="basis"``, ``num_bases`` as graphdist's default,
  root weight and bias), ReLU and dropout between layers; each edge's message is scaled by
  ``1 / |N_r(v)|`` in its block, so every relation contributes the mean of its sampled neighbours
  (PyG ``RGCNConv``'s aggregation);
- per-relation fan-outs: ``dgl.sampling.sample_etype_neighbors`` draws ``fanout`` in-edges of EACH
  relation of every node (graphdist samples ``fanout`` per relation too), in a ``BlockSampler`` that
  is ``dgl.dataloading.NeighborSampler``'s loop with that call, under DGL's own ``DataLoader``. The
  graph is one homogeneous DGL graph whose edge ids are grouped by relation (``etype_offset``: the
  layout this sampler reads a relation from).

Timed: sampling, feature gather, forward, backward and Adam step, i.e. seeds trained per second,
one process, ``--threads`` threads. Reads the ``.npz`` that ``bench/hetero_reference.py``'s
``export_for_dgl`` writes; prints one JSON line (with the mean loss of the first and last timed
steps: it should fall).

Run book (what ``bench_hetero.py --speed`` does):
    OMP_NUM_THREADS=1 $GRAPHDIST_CACHE/peers-venv/bin/python bench/peers/dgl_rgcn.py \\
        --graph $GRAPHDIST_CACHE/bench/hetero-synthetic-hetero-100k.npz --steps 40
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
import torch.nn.functional as F


def load(path: str) -> tuple[object, dict, list[int]]:
    """``(DGL graph, arrays, etype_offset)``: edges re-numbered so each relation's ids are one range."""
    import dgl  # the peer venv only; graphdist never imports dgl

    data = dict(np.load(path))
    indptr = torch.from_numpy(data["indptr"].astype(np.int64))
    src = torch.from_numpy(data["indices"].astype(np.int64))
    rel = torch.from_numpy(data["edge_type"].astype(np.int64))
    dst = torch.repeat_interleave(torch.arange(indptr.numel() - 1), indptr[1:] - indptr[:-1])
    order = torch.argsort(rel, stable=True)
    g = dgl.graph((src[order], dst[order]), num_nodes=indptr.numel() - 1)
    g.edata["etype"] = rel[order]
    counts = torch.bincount(rel, minlength=int(data["num_relations"]))
    offset = [0] + torch.cumsum(counts, 0).tolist()
    return g.formats(["csc"]), data, offset


def make_sampler(fanouts: list[int], etype_offset: list[int]) -> object:
    """A ``BlockSampler`` drawing ``fanouts[i]`` in-edges per relation per node at layer ``i`` (input first)."""
    import dgl

    class PerRelationSampler(dgl.dataloading.BlockSampler):
        def sample_blocks(self, g, seed_nodes, exclude_eids=None):
            output_nodes, blocks = seed_nodes, []
            for fanout in reversed(fanouts):  # NeighborSampler's loop, one relation at a time
                per_type = torch.full((len(etype_offset) - 1,), fanout, dtype=torch.int64)
                frontier = dgl.sampling.sample_etype_neighbors(g, seed_nodes, etype_offset, per_type,
                                                               copy_ndata=False)
                block = dgl.to_block(frontier, seed_nodes)
                seed_nodes = block.srcdata[dgl.NID]
                blocks.insert(0, block)
            return seed_nodes, output_nodes, blocks

    return PerRelationSampler()


class RGCN(torch.nn.Module):
    """Per-type encoder, then ``RelGraphConv`` (basis) layers on blocks with per-relation mean weights."""

    def __init__(self, offsets: np.ndarray, widths: np.ndarray, hidden: int, classes: int, layers: int,
                 relations: int, bases: int, dropout: float) -> None:
        from dgl.nn import RelGraphConv

        super().__init__()
        self.widths = [int(w) for w in widths]
        self.offsets = torch.from_numpy(offsets.astype(np.int64))
        self.hidden, self.relations, self.dropout = hidden, relations, dropout
        self.encoders = torch.nn.ModuleList(
            torch.nn.Linear(w, hidden) if w else torch.nn.Embedding(int(offsets[t + 1] - offsets[t]), hidden)
            for t, w in enumerate(self.widths))
        for enc in self.encoders:  # graphdist's TypedEncoder initialises its tables so
            if isinstance(enc, torch.nn.Embedding):
                torch.nn.init.normal_(enc.weight, std=1.0 / hidden ** 0.5)
        dims = [hidden] * layers + [classes]
        self.layers = torch.nn.ModuleList(
            RelGraphConv(a, b, relations, regularizer="basis", num_bases=bases, self_loop=True)
            for a, b in zip(dims, dims[1:]))

    def encode(self, x: torch.Tensor, node_type: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        out = x.new_zeros((ids.numel(), self.hidden))
        for t, (enc, width) in enumerate(zip(self.encoders, self.widths)):
            rows = (node_type == t).nonzero().view(-1)
            out[rows] = enc(x[rows, :width]) if width else enc(ids[rows] - self.offsets[t])
        return out

    def forward(self, blocks: list, h: torch.Tensor) -> torch.Tensor:
        import dgl

        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            etype = block.edata["etype"]
            _, dst = block.edges()
            key = dst * self.relations + etype  # 1 / |N_r(v)|: the mean within each relation
            norm = (1.0 / torch.bincount(key).to(h.dtype))[key].unsqueeze(1)
            h = layer(block, h, etype, norm)
            if i < len(self.layers) - 1:
                h = F.dropout(F.relu(h), self.dropout, self.training)
        return h


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graph", required=True)
    parser.add_argument("--fanouts", default="10,5", help="per relation, graphdist order (seeds outward)")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--num-bases", type=int, default=0, help="0: graphdist's default, min(8, max(2, ceil(R/2)))")
    parser.add_argument("--dropout", type=float, default=0.5)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=40, help="timed steps")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    import dgl

    from dgl_graph import peak_rss_bytes  # beside this script

    g, data, etype_offset = load(args.graph)
    x = torch.from_numpy(data["x"])
    y = torch.from_numpy(data["y"].astype(np.int64))
    node_type = torch.from_numpy(data["node_type"].astype(np.int64))
    train = torch.from_numpy(data["train"].astype(np.int64))
    relations = len(etype_offset) - 1
    bases = args.num_bases or min(8, max(2, -(-relations // 2)))
    fanouts = [int(f) for f in args.fanouts.split(",")][::-1]  # DGL lists the input layer first
    model = RGCN(data["offsets"], data["widths"], args.hidden, int(y.max()) + 1, len(fanouts), relations, bases,
                 args.dropout)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    loader = dgl.dataloading.DataLoader(g, train, make_sampler(fanouts, etype_offset), batch_size=args.batch_size,
                                        shuffle=True, drop_last=True, num_workers=0)
    it = iter(loader)
    seeds, losses, start = 0, [], time.perf_counter()
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            start, seeds = time.perf_counter(), 0
        try:
            input_nodes, output_nodes, blocks = next(it)
        except StopIteration:  # a small graph: another pass
            it = iter(loader)
            input_nodes, output_nodes, blocks = next(it)
        h = model.encode(x[input_nodes], node_type[input_nodes], input_nodes)
        loss = F.cross_entropy(model(blocks, h), y[output_nodes])
        opt.zero_grad()
        loss.backward()
        opt.step()
        seeds += output_nodes.numel()
        losses.append(float(loss.detach()))
    elapsed = time.perf_counter() - start
    k = max(1, min(5, args.steps // 2))
    print(json.dumps({"system": f"dgl {dgl.__version__} (torch {torch.__version__})", "seeds_per_s": seeds / elapsed,
                      "peak_rss_bytes": peak_rss_bytes(), "ms_per_step": 1000 * elapsed / args.steps,
                      "steps": args.steps, "fanouts": args.fanouts, "hidden": args.hidden, "num_bases": bases,
                      "relations": relations, "batch_size": args.batch_size,
                      "loss_first": sum(losses[:k]) / k, "loss_last": sum(losses[-k:]) / k}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
