"""How long a checkpoint stops training: the synchronous write against the background writer.

A mid-epoch checkpoint (``--checkpoint-interval``) is handed to ``graphdist.checkpoint.CheckpointWriter``:
the training thread copies the state and goes on while a thread serializes, writes, fsyncs and renames
the file. An epoch-end checkpoint is written in place before "epoch N done". This bench times what the
training thread waits for in each case, on the state a featureless node type gives R-GCN: an embedding
table of ``rows x 64`` floats plus Adam's two moments (``--rows``; 750,000 rows is synthetic-hetero-3m's
term type: 0.57 GiB of state), alternating the two in each round, and reports medians.

Columns: ``sync_s`` (``atomic_torch_save`` of the live state), ``stall_s`` (``submit``: the copy; the
training thread's whole wait), ``write_s`` (submit to the file in place, on the writer's thread),
``ratio`` (``stall_s / sync_s``).

Run book:
    python bench/bench_checkpoint.py                       # 100k and 750k rows, 5 rounds
    python bench/bench_checkpoint.py --rows 3000000 --rounds 3
    python bench/bench_checkpoint.py --quick               # seconds (the smoke test)
Writes bench/results/checkpoint.json (``--out``); the files go to a temporary directory (``--dir``).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from graphdist.checkpoint import CheckpointWriter, atomic_torch_save, checkpoint_state  # noqa: E402


def table_state(rows: int, dim: int = 64) -> dict[str, Any]:
    """A checkpoint's state for an embedding table of ``rows x dim`` trained one Adam step (moments filled)."""
    model = torch.nn.Embedding(rows, dim)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.arange(min(rows, 1024))).sum().backward()
    opt.step()
    return checkpoint_state(model, opt, epoch=1, extra={"progress": {"step": 10}})


def one_round(state: dict[str, Any], root: Path, sync_first: bool) -> dict[str, float]:
    out: dict[str, float] = {}
    writer = CheckpointWriter()
    order = ("sync", "background") if sync_first else ("background", "sync")
    for kind in order:
        path = root / f"{kind}.pt"
        started = time.perf_counter()
        if kind == "sync":
            atomic_torch_save(state, path)
            out["sync_s"] = time.perf_counter() - started
        else:
            writer.submit(state, path)
            out["stall_s"] = time.perf_counter() - started
            writer.wait()
            out["write_s"] = time.perf_counter() - started
        path.unlink()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", default="100000,750000", help="embedding rows, comma-separated")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="10,000 rows, 2 rounds")
    p.add_argument("--dir", default=None, help="where the files are written (default: a temporary directory)")
    p.add_argument("--out", default=str(REPO / "bench" / "results" / "checkpoint.json"))
    args = p.parse_args(argv)
    try:
        sizes = [10_000] if args.quick else [int(r) for r in args.rows.split(",")]
    except ValueError:
        p.error(f"--rows: expected comma-separated integers (got {args.rows!r})")
    rounds = 2 if args.quick else args.rounds
    torch.set_num_threads(1)
    rows_out = []
    print(f"bench_checkpoint on {platform.processor() or platform.machine()}, torch {torch.__version__}, "
          f"{rounds} rounds (sync and background alternating first)")
    print(f"{'rows':>10} {'state MiB':>10} {'sync_s':>8} {'stall_s':>8} {'write_s':>8} {'ratio':>6}")
    with tempfile.TemporaryDirectory(prefix="graphdist-bench-ckpt-", dir=args.dir) as tmp:
        for rows in sizes:
            state = table_state(rows)
            mib = sum(t.numel() * t.element_size() for t in (state["model"]["weight"],
                                                            *state["optimizer"]["state"][0].values())) / 2**20
            runs = [one_round(state, Path(tmp), sync_first=i % 2 == 0) for i in range(rounds)]
            med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            row = {"rows": rows, "state_mib": round(mib, 1), **{k: round(v, 4) for k, v in med.items()},
                   "ratio": round(med["stall_s"] / med["sync_s"], 3), "runs": runs}
            rows_out.append(row)
            print(f"{rows:>10,} {mib:>10.1f} {med['sync_s']:>8.3f} {med['stall_s']:>8.3f} {med['write_s']:>8.3f} "
                  f"{row['ratio']:>6.2f}")
            del state
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": platform.processor() or platform.machine(), "torch": torch.__version__,
                               "rounds": rounds, "rows": rows_out}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
