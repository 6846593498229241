"""Micro-benchmark: one training step (forward + backward + Adam) of GraphSAGE on sampled blocks.

Shapes of a [15, 10, 5] batch of 1024 seeds (fan-outs from the seeds outward) on a large graph,
hidden 256, 3 layers, 100 input features, 16 classes, dropout 0.5, ONE thread:

    layer 0: 400,000 src -> 150,000 dst, 5 edges each   (the input layer dominates)
    layer 1: 150,000 src ->  16,000 dst, 10 edges each
    layer 2:  16,000 src ->   1,024 dst, 15 edges each

Blocks are random (uniform source ids; destination j is source j). Compared:

- ``graphdist``: graphdist.models.GraphSAGE (CSR mean, fused GEMM, cached CSR^T backward).
- ``pyg``: PyG ``SAGEConv`` per layer on ``(x, x[:num_dst])`` (message-flow blocks too).
- ``naive``: gather + ``index_add`` mean, two ``Linear`` per layer, autograd backward.

Large tensors are allocated and freed every step; glibc hands blocks above 32 MB back to the
kernel, so each allocation pays page faults (~60 ms per 150 MB here). The bench therefore
re-executes itself with ``MALLOC_MMAP_THRESHOLD_``/``MALLOC_TRIM_THRESHOLD_`` raised (the
launcher can do the same for workers); ``--no-malloc-env`` measures the default.

Run book:
    .venv/bin/python bench/bench_models.py                 # table + bench/results/models.json
    .venv/bin/python bench/bench_models.py --iters 5 --variants graphdist,naive
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "4294967296", "MALLOC_TRIM_THRESHOLD_": "8589934592"}
LAYERS = [(400_000, 150_000, 5), (150_000, 16_000, 10), (16_000, 1_024, 15)]
IN_DIM, HIDDEN, CLASSES, DROPOUT = 100, 256, 16, 0.5


def _maybe_reexec(args: argparse.Namespace) -> None:
    if args.no_malloc_env or all(os.environ.get(k) == v for k, v in MALLOC_ENV.items()):
        return
    env = dict(os.environ, **MALLOC_ENV)
    os.execve(sys.executable, [sys.executable, *sys.argv], env)


def _blocks(torch: Any, scale: float) -> list[Any]:
    from sampling.base import Block

    gen = torch.Generator().manual_seed(0)
    blocks = []
    for num_src, num_dst, fan in LAYERS:
        num_src, num_dst = max(1, int(num_src * scale)), max(1, int(num_dst * scale))
        src = torch.randint(0, num_src, (num_dst * fan,), generator=gen)
        dst = torch.arange(num_dst).repeat_interleave(fan)
        indptr = torch.arange(0, num_dst * fan + 1, fan)
        blocks.append(Block(src=src, dst=dst, num_src=num_src, num_dst=num_dst, indptr=indptr))
    return blocks


def _pyg_model(torch: Any) -> Any:
    from torch_geometric.nn import SAGEConv

    class PygSage(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            dims = [IN_DIM, HIDDEN, HIDDEN, CLASSES]
            self.convs = torch.nn.ModuleList(SAGEConv(dims[i], dims[i + 1]) for i in range(3))

        def forward(self, x: Any, blocks: Any) -> Any:
            for i, (conv, b) in enumerate(zip(self.convs, blocks)):
                x = conv((x, x[: b.num_dst]), b.edge_index)
                if i < 2:
                    x = torch.nn.functional.dropout(x.relu(), DROPOUT, self.training)
            return x

    return PygSage()


def _naive_model(torch: Any) -> Any:
    class NaiveSage(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            dims = [IN_DIM, HIDDEN, HIDDEN, CLASSES]
            self.self_lins = torch.nn.ModuleList(torch.nn.Linear(dims[i], dims[i + 1]) for i in range(3))
            self.neigh_lins = torch.nn.ModuleList(torch.nn.Linear(dims[i], dims[i + 1], bias=False) for i in range(3))

        def forward(self, x: Any, blocks: Any) -> Any:
            for i, b in enumerate(blocks):
                deg = (b.indptr[1:] - b.indptr[:-1]).clamp_min(1).to(x.dtype).unsqueeze(1)
                agg = x.new_zeros(b.num_dst, x.shape[1]).index_add_(0, b.dst, x[b.src]) / deg
                x = self.self_lins[i](x[: b.num_dst]) + self.neigh_lins[i](agg)
                if i < 2:
                    x = torch.nn.functional.dropout(x.relu(), DROPOUT, self.training)
            return x

    return NaiveSage()


def _models(torch: Any) -> dict[str, Callable[[], Any]]:
    from graphdist.models import GraphSAGE

    return {
        "graphdist": lambda: GraphSAGE(IN_DIM, HIDDEN, CLASSES, num_layers=3, dropout=DROPOUT),
        "pyg": lambda: _pyg_model(torch),
        "naive": lambda: _naive_model(torch),
    }


def _time_variant(torch: Any, build: Callable[[], Any], blocks: list[Any], iters: int) -> list[float]:
    torch.manual_seed(0)
    model = build().train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(blocks[0].num_src, IN_DIM)  # input features need no gradient
    y = torch.randint(0, CLASSES, (blocks[-1].num_dst,))
    times = []
    for it in range(iters + 1):  # the first step builds caches and warms the allocator
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x, blocks), y)
        loss.backward()
        opt.step()
        if it > 0:
            times.append(time.perf_counter() - t0)
        # Fresh blocks each step would rebuild the CSR caches; a real batch does, so count it.
        for b in blocks:
            b.__dict__.pop("_graphdist_cache", None)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iters", type=int, default=3, help="timed steps per variant (after one warm-up)")
    parser.add_argument("--variants", default="graphdist,pyg,naive")
    parser.add_argument("--scale", type=float, default=1.0, help="shrink every layer (quick runs)")
    parser.add_argument("--no-malloc-env", action="store_true", help="keep glibc's default mmap threshold")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "models.json"))
    args = parser.parse_args()
    _maybe_reexec(args)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import torch

    torch.set_num_threads(1)
    blocks = _blocks(torch, args.scale)
    seeds = blocks[-1].num_dst
    rows = []
    models = _models(torch)
    for name in args.variants.split(","):
        times = _time_variant(torch, models[name], blocks, args.iters)
        best, mean = min(times), sum(times) / len(times)
        rows.append({"variant": name, "ms_best": 1e3 * best, "ms_mean": 1e3 * mean,
                     "seeds_per_s_best": seeds / best, "seeds_per_s_mean": seeds / mean})
    malloc = "tuned" if not args.no_malloc_env else "default"
    print(f"GraphSAGE 3x{HIDDEN}, [15,10,5] x {seeds} seeds, 1 thread, malloc {malloc}, {args.iters} steps")
    print(f"{'variant':<10} {'ms/batch best':>14} {'ms/batch mean':>14} {'seeds/s best':>13} {'seeds/s mean':>13}")
    for r in rows:
        print(f"{r['variant']:<10} {r['ms_best']:>14.1f} {r['ms_mean']:>14.1f} "
              f"{r['seeds_per_s_best']:>13,.0f} {r['seeds_per_s_mean']:>13,.0f}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {"layers": LAYERS, "in_dim": IN_DIM, "hidden": HIDDEN, "classes": CLASSES, "dropout": DROPOUT,
              "threads": 1, "malloc": malloc, "scale": args.scale, "rows": rows}
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=2))
    tmp.replace(out)  # atomic: a reader never sees half a file
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
