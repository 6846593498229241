"""Two gloo ranks reducing small tensors: gloo's ring against graphdist's one-exchange path.

Workload: 2 local workers, each bound to a core of its own (as ``graphdist-train`` binds them),
one thread each. ``comm.all_reduce`` of a float32 tensor of each ``--sizes`` (bytes) ``--repeats``
times, with ``graphdist.comm.collectives.EXCHANGE_MAX_BYTES`` at 0 (gloo's own allreduce: a ring
of a reduce-scatter and an all-gather) and at its default (two ranks send each other the whole
tensor in one all-to-all and add the two copies; ``_by_exchange`` says which tensors). The two
alternate within each of ``--rounds`` rounds (the order flips every round); the table shows each
one's median microseconds a reduction on rank 0 and the speed-up.

Run book:
    OMP_NUM_THREADS=1 python bench/bench_small_allreduce.py        # ~1 min
Writes bench/results/small_allreduce.json (git-ignored).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SIZES = [8, 64, 512, 8192, 51200, 262144, 1 << 20]


def _worker(rank: int, world_size: int, sizes: list[int], repeats: int, rounds: int, out: str) -> None:
    from graphdist import comm
    from graphdist.comm import collectives
    from graphdist.config import TrainConfig
    from graphdist.trainers.run import bind_worker

    bind_worker(rank, world_size, TrainConfig(num_workers=world_size))
    torch.set_num_threads(1)
    default = collectives.EXCHANGE_MAX_BYTES
    times: dict[str, dict[str, list[float]]] = {}
    for nbytes in sizes:
        t = torch.ones(max(1, nbytes // 4))
        per = times.setdefault(str(nbytes), {"ring": [], "exchange": []})
        for r in range(rounds):
            for mode in (("ring", "exchange") if r % 2 == 0 else ("exchange", "ring")):
                collectives.EXCHANGE_MAX_BYTES = 0 if mode == "ring" else default
                for _ in range(5):  # warm-up
                    comm.all_reduce(t)
                comm.barrier()
                start = time.perf_counter()
                for _ in range(repeats):
                    comm.all_reduce(t)
                per[mode].append(1e6 * (time.perf_counter() - start) / repeats)
    collectives.EXCHANGE_MAX_BYTES = default
    if rank == 0:
        Path(out).write_text(json.dumps(times))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default=",".join(map(str, SIZES)), help="tensor sizes in bytes")
    p.add_argument("--repeats", type=int, default=100, help="reductions per timing (default 100)")
    p.add_argument("--rounds", type=int, default=6, help="alternating rounds (default 6)")
    p.add_argument("--out", default=str(REPO / "bench" / "results" / "small_allreduce.json"))
    a = p.parse_args(argv)
    from graphdist.comm.collectives import EXCHANGE_MAX_BYTES
    from graphdist.testing import launch

    sizes = [int(s) for s in a.sizes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp, "times.json")
        launch(_worker, 2, sizes, a.repeats, a.rounds, str(raw), timeout=1800)
        times = json.loads(raw.read_text())
    rows = []
    print(f"2 gloo ranks, one core each; exchange for 3 elements to {EXCHANGE_MAX_BYTES:,} bytes")
    print(f"{'bytes':>10}{'ring us':>10}{'exchange us':>13}{'speed-up':>10}")
    for nbytes in sizes:
        ring, exchange = (statistics.median(times[str(nbytes)][m]) for m in ("ring", "exchange"))
        rows.append({"bytes": nbytes, "ring_us": ring, "exchange_us": exchange, "rounds": times[str(nbytes)]})
        print(f"{nbytes:>10,}{ring:>10.0f}{exchange:>13.0f}{ring / exchange:>9.2f}x")
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"exchange_max_bytes": EXCHANGE_MAX_BYTES, "rows": rows}, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
