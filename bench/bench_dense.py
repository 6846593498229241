"""Dense products: MKL (``F.linear``) against oneDNN (``graphdist.models.dense.linear``), and a whole step.

``graphdist.models.dense`` sends float32 CPU products to oneDNN on AMD CPUs with full-width AVX-512
(Zen 5, family 26 on) because torch's default, MKL, runs its AVX2 code on AMD processors. This
bench forces that path (``GRAPHDIST_ONEDNN=1``) on any AVX-512 CPU to measure whether it pays
there, and records the CPU family. It times both on the shapes
graphdist's workloads multiply, forward + backward (both gradients), ONE thread, and reports the
largest difference between their outputs (float32 rounding, not a bf16 down-conversion).

Rows change from step to step in sampled training, and oneDNN builds a kernel per shape, so the
sampled cases draw a fresh row count each call from ``rows +- 5%`` (the same draws for both
kernels); full-graph cases keep one shape, as training does.

``--step``: one aggregation-strategy training step (GCN 100 -> 128 -> 16, fan-outs 10,10, 512
seeds: the ``bench_strategies --cluster`` recipe's per-worker batch) on a generated graph of
50,000 nodes (the size of one synthetic-100k part), with oneDNN on and off
(``torch.backends.mkldnn.flags``), sample + forward + backward + Adam.

On a CPU with bfloat16 instructions (AVX512_BF16 or AMX) a third kernel runs: ``--precision
bf16``'s products, ``linear`` under CPU autocast (bfloat16 operands, float32 accumulation and
result); its ``max |diff|`` against MKL is bf16's rounding, and ``--step`` times a bf16 step too.

Rounds alternate the kernels (A B A B ...); the table gives medians over rounds.

Run book:
    .venv/bin/python bench/bench_dense.py                    # products + step; bench/results/dense.json
    .venv/bin/python bench/bench_dense.py --rounds 3 --no-step
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# (name, rows, in, out, sampled): the products of the workloads graphdist benches.
SHAPES = [
    ("gcn sampled layer 1 (synthetic-100k, 512 seeds)", 3155, 100, 128, True),
    ("gcn sampled classifier", 512, 128, 16, True),
    ("sage sampled layer 2 (bench_models)", 16_000, 512, 256, True),
    ("sage sampled layer 1 (bench_models)", 150_000, 512, 256, True),
    ("gcn full-graph layer 1 (50k-node part)", 50_000, 100, 128, False),
    ("gcn cora full-graph layer 1", 2708, 1433, 16, False),
]


def _time_product(fn: Callable, x_rows: list[int], dims: tuple[int, int], seed: int) -> tuple[float, Any]:
    import torch

    in_dim, out_dim = dims
    gen = torch.Generator().manual_seed(seed)
    weight = torch.randn(out_dim, in_dim, generator=gen).requires_grad_()
    bias = torch.randn(out_dim, generator=gen).requires_grad_()
    inputs = [(torch.randn(r, in_dim, generator=gen).requires_grad_(), torch.randn(r, out_dim, generator=gen))
              for r in x_rows]
    start = time.perf_counter()
    for x, grad in inputs:
        fn(x, weight, bias).backward(grad)
    elapsed = (time.perf_counter() - start) / len(inputs)
    x, grad = inputs[0]
    return elapsed, (fn(x, weight, bias).detach(), x.grad, weight.grad)


def bench_products(rounds: int, calls: int, scale: float = 1.0) -> list[dict[str, Any]]:
    import random

    import torch
    import torch.nn.functional as F

    from graphdist.models.dense import linear, native_bf16

    def bf16(x: Any, weight: Any, bias: Any) -> Any:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return linear(x, weight, bias)

    kernels = [("mkl", F.linear), ("onednn", linear)] + ([("bf16", bf16)] if native_bf16() else [])
    rows_out = []
    for name, full_rows, in_dim, out_dim, sampled in SHAPES:
        rows = max(64, int(full_rows * scale))
        size = max(1, rows * in_dim * out_dim // 50_000_000)  # fewer calls for the big products
        n_calls = max(min(5, calls), calls // size)
        rng = random.Random(0)
        draws = [rng.randint(int(rows * 0.95), int(rows * 1.05)) if sampled else rows
                 for _ in range(n_calls * (rounds + 1))]
        times: dict[str, list[float]] = {kernel: [] for kernel, _ in kernels}
        for r in range(rounds + 1):  # round 0 warms up (the full-graph shape's kernel, the CPU's clock)
            for kernel, fn in kernels:
                t, _ = _time_product(fn, draws[r * n_calls:(r + 1) * n_calls], (in_dim, out_dim), seed=r)
                if r:
                    times[kernel].append(t)
        _, (y_m, gx_m, gw_m) = _time_product(F.linear, [rows], (in_dim, out_dim), seed=7)
        _, (y_o, gx_o, gw_o) = _time_product(linear, [rows], (in_dim, out_dim), seed=7)
        mkl, onednn = statistics.median(times["mkl"]), statistics.median(times["onednn"])
        extra: dict[str, Any] = {}
        if "bf16" in times:
            _, (y_b, gx_b, gw_b) = _time_product(bf16, [rows], (in_dim, out_dim), seed=7)
            extra = {"bf16_ms": statistics.median(times["bf16"]) * 1e3,
                     "rounds_bf16_ms": [t * 1e3 for t in times["bf16"]],
                     "bf16_max_abs_diff": max(float((a - b).abs().max())
                                              for a, b in ((y_m, y_b), (gx_m, gx_b), (gw_m, gw_b)))}
        rows_out.append({
            "case": name, "rows": rows, "in": in_dim, "out": out_dim, "sampled": sampled, "calls": n_calls,
            "mkl_ms": mkl * 1e3, "onednn_ms": onednn * 1e3, "speedup": mkl / onednn,
            "gflops_onednn": 3 * 2 * rows * in_dim * out_dim / onednn / 1e9,
            "max_abs_diff": max(float((a - b).abs().max()) for a, b in ((y_m, y_o), (gx_m, gx_o), (gw_m, gw_o))),
            "rounds_mkl_ms": [t * 1e3 for t in times["mkl"]], "rounds_onednn_ms": [t * 1e3 for t in times["onednn"]],
            **extra,
        })
        shown = f", bf16 {extra['bf16_ms']:.3f} ms" if extra else ""
        print(f"  {name}: MKL {mkl * 1e3:.3f} ms, oneDNN {onednn * 1e3:.3f} ms{shown}", flush=True)
    return rows_out


def bench_step(rounds: int, steps: int, nodes: int = 50_000) -> dict[str, Any]:
    import torch

    from graphdist.data.synthetic import synthetic
    from graphdist.models.gcn import GCN
    from graphdist.trainers.features import model_inputs
    from sampling import NeighborSampler

    g = synthetic(nodes, avg_degree=10, num_features=100, num_classes=16, seed=0)
    sampler = NeighborSampler(g, [10, 10], seed=0)
    degrees = g.degrees(self_loops=False).to(torch.float32).view(-1, 1)
    x_all = torch.cat([g.x, degrees], 1)  # GCN's inputs carry the global degree column (model_inputs)
    gen = torch.Generator().manual_seed(0)
    seeds = [torch.randperm(g.num_nodes, generator=gen)[:min(512, nodes // 2)] for _ in range(steps)]
    from graphdist.models.dense import native_bf16
    from graphdist.trainers.precision import autocast

    times: dict[str, list[float]] = {"mkl": [], "onednn": []} | ({"bf16": []} if native_bf16() else {})

    def run(enabled: bool, precision: str = "fp32") -> float:
        torch.manual_seed(0)
        model = GCN(100, 128, 16, num_layers=2, dropout=0.5)
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        with warnings.catch_warnings(), torch.backends.mkldnn.flags(enabled=enabled):
            warnings.simplefilter("ignore")  # torch's note on TF32 for Intel GPUs, printed on every flags()
            for i, s in enumerate([seeds[0]] * 3 + seeds):
                if i == 3:
                    start = time.perf_counter()
                batch = sampler.sample(s)
                x, blocks = model_inputs(x_all.index_select(0, batch.input_nodes), batch.blocks, True)
                with autocast(precision, torch.device("cpu")):
                    loss = torch.nn.functional.cross_entropy(model(x, blocks), g.y[batch.seed_nodes].to(torch.int64))
                opt.zero_grad()
                loss.backward()
                opt.step()
        return (time.perf_counter() - start) / steps

    for _ in range(rounds):
        times["mkl"].append(run(False))
        times["onednn"].append(run(True))
        if "bf16" in times:
            times["bf16"].append(run(True, "bf16"))
    out = {"steps": steps, "nodes": nodes,
           "speedup": statistics.median(times["mkl"]) / statistics.median(times["onednn"])}
    for kernel, got in times.items():
        out[f"{kernel}_ms"], out[f"rounds_{kernel}_ms"] = statistics.median(got) * 1e3, [t * 1e3 for t in got]
    return out


def print_table(res: dict[str, Any]) -> None:
    print(f"\n{'case':50s} {'rows x in x out':>20s} {'MKL ms':>8s} {'oneDNN ms':>10s} {'speed-up':>9s} "
          f"{'GFLOP/s':>8s} {'max |diff|':>11s} {'bf16 ms':>8s} {'bf16 x':>7s} {'bf16 |diff|':>11s}")
    for r in res["products"]:
        shape = f"{r['rows']}x{r['in']}x{r['out']}"
        bf16 = (f" {r['bf16_ms']:8.3f} {r['mkl_ms'] / r['bf16_ms']:6.2f}x {r['bf16_max_abs_diff']:11.2e}"
                if "bf16_ms" in r else "")
        print(f"{r['case']:50s} {shape:>20s} {r['mkl_ms']:8.3f} {r['onednn_ms']:10.3f} {r['speedup']:8.2f}x "
              f"{r['gflops_onednn']:8.0f} {r['max_abs_diff']:11.2e}{bf16}")
    if res.get("step"):
        s = res["step"]
        bf16 = f", bf16 {s['bf16_ms']:.2f} ms ({s['mkl_ms'] / s['bf16_ms']:.2f}x MKL)" if "bf16_ms" in s else ""
        print(f"\naggregation step (GCN, 512 seeds, fan-outs 10,10): MKL {s['mkl_ms']:.2f} ms, "
              f"oneDNN {s['onednn_ms']:.2f} ms, {s['speedup']:.2f}x{bf16}")
    print(f"(products: forward + backward, medians of {res['rounds']} alternating rounds, one thread; "
          f"CPU capability {res['cpu_capability']})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5, help="alternating rounds (medians)")
    p.add_argument("--calls", type=int, default=40, help="products per round for the small shapes")
    p.add_argument("--steps", type=int, default=60, help="--step: timed steps per round")
    p.add_argument("--no-step", action="store_true", help="products only")
    p.add_argument("--scale", type=float, default=1.0, help="shrink every product's rows (quick runs)")
    p.add_argument("--step-nodes", type=int, default=50_000, help="--step: nodes of the generated graph")
    p.add_argument("--out", default=str(REPO / "bench" / "results" / "dense.json"))
    args = p.parse_args()
    os.environ["GRAPHDIST_ONEDNN"] = "1"  # the fast path on any AVX-512 CPU: this bench measures whether it pays
    import torch

    from graphdist.models.dense import cpu_family

    torch.set_num_threads(1)
    res: dict[str, Any] = {"rounds": args.rounds, "scale": args.scale,
                           "cpu_capability": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__,
                           "cpu": _cpu_name(), "amd_family": cpu_family("AuthenticAMD")}
    res["products"] = bench_products(args.rounds, args.calls, args.scale)
    res["step"] = None if args.no_step else bench_step(args.rounds, args.steps, args.step_nodes)
    print_table(res)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    print(f"wrote {args.out}")


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        return ""


if __name__ == "__main__":
    main()
