"""End-to-end check of graphdist's CUDA paths, for when a GPU machine is at hand.

Runs the real ``graphdist-train`` on a generated graph (no dataset needed) in the device
layouts a user can ask for, and prints one line per case with its seeds/s and accuracy:

- ``cuda:0``: one GPU worker (gloo group of one; model, batches and evaluation on the GPU);
- ``cpu,cuda:0``: a mixed job over gloo (the GPU rank's gradients staged through host memory);
- ``cuda:0,cuda:1``: NCCL for gradients, gloo for sampling and counters (needs 2 GPUs);
- ``cpu,cuda:0`` again with ``--compress int8``, and with ``--allreduce hier`` over two emulated
  hosts (``GRAPHDIST_TOPOLOGY=2x1``): the threaded algorithms and int8 stage CUDA buckets through
  host memory; SACP (on by default) captures CUDA factors;
- ``cpu,cuda:0`` with placement end to end: ``--placement profiled`` (the start-up profile of
  unlike workers, its simulator measures), ``--rebalance-every 5``; the case records the start
  and end shares and fails unless the GPU worker ends with the larger one;
- ``cpu,cuda:0`` under the other strategies: ``--strategy fullgraph`` exact (``--staleness 0``)
  and wait-free (``--staleness 1``: the halo exchange runs on its own group while the GPU
  computes), and ``--strategy aggregation`` (the model average crosses devices);
- ``--precision bf16`` (mixed precision: CUDA autocast on the GPU rank) on ``cuda:0`` alone, and
  on ``cpu,cuda:0`` where the CPU has bfloat16 instructions (elsewhere its rank refuses bf16);
  ``--precision fp16`` (autocast to float16, the loss scaled) on ``cuda:0``;
- ``loaders`` and ``device-sampling`` (issue 50): the baseline ``cuda:0`` as on main (``--loaders 0
  --sample-on cpu``: its prefetch thread samples on the CPU; batches copied on a side stream), against
  ``--loaders 4`` (loader processes, pinned shared slots) and ``--sample-on device`` (CSR and features
  on the GPU); and the mixed ``cpu,cuda:0`` job (``--replicate graph``, rebalancing) against the
  device-sampled ``cuda:0`` alone at the same global batch. Each compared row has ``vs``: its seeds/s
  over its baseline's, run in the same call.

Run book:
    python bench/check_cuda.py                 # every case the machine can run
    python bench/check_cuda.py --nodes 200000  # a bigger graph
    python bench/check_cuda.py --nodes 2000 --epochs 1 --out /tmp/cuda.json  # seconds
    python bench/check_cuda.py --as-cpu --nodes 2000 --epochs 1  # rehearse every case on CPUs
    python bench/check_cuda.py --only loaders,device-sampling --nodes 1000000 --epochs 3  # issue 50's GPU figures
Exit code 0 when every case that could run passed; 2 when there is no CUDA device at all (and
no ``--as-cpu``, which runs the same cases with each ``cuda:N`` replaced by ``cpu``: it checks the
commands themselves before scarce GPU time is spent on them, not the CUDA paths; its cases run in
this process, one after the other, sharing the imports and the workers' fork server).
Writes bench/results/cuda.json (``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[1]


def run_case(devices: str, workers: int, args: argparse.Namespace, run: Path, extra: tuple = (),
             env: Optional[dict] = None, batch: Optional[int] = None) -> dict:
    # fan-outs only where the strategy samples (full-graph training refuses them)
    fanouts = [] if "fullgraph" in map(str, extra) else ["--fanouts", "15,10,5"]
    batch = batch if batch is not None else 1024 * workers
    argv = [*map(str, extra), "--dataset", f"synthetic-{args.nodes}",
            "--num-workers", str(workers), "--devices", devices, "--epochs", str(args.epochs),
            "--layers", "3", *fanouts, "--hidden", "256", "--batch-size", str(batch),
            "--run-dir", str(run), "--log-interval", "100000", "--timeout", "120"]
    start = time.perf_counter()
    if args.as_cpu:  # a rehearsal has no CUDA to isolate: in this process, its imports and fork server shared
        code, stderr = train_in_process(argv, env or {})
    else:
        done = subprocess.run([sys.executable, "-m", "graphdist.cli.train", *argv], cwd=REPO, capture_output=True,
                              text=True, timeout=1800, env={**os.environ, **(env or {})})
        code, stderr = done.returncode, done.stderr
    row = {"devices": devices, "workers": workers, "extra": list(extra), "batch": batch, "ok": code == 0,
           "wall_s": round(time.perf_counter() - start, 1)}
    if code != 0:
        row["error"] = stderr.strip().splitlines()[-1] if stderr.strip() else f"exit {code}"
        return row
    last = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    row.update(seeds_per_s=round(last["seeds_per_s"]), test_acc=last.get("test_acc"),
               hidden_fraction=last.get("hidden_fraction"), shares=last.get("batch_share"),
               shares_end=last.get("batch_share_end"),
               # per rank: the step's own work and its exposed wait for the gradient sync (on the GPU rank of a
               # mixed job, issue 50 asks the sync to add at most 10% to it)
               compute_s=last.get("compute_s"), sync_wait_s=last.get("sync_wait_s"),
               sample_wait_s=last.get("sample_wait_s"))
    # The GPU rank (rank 1 of "cpu,cuda:0") must end with the larger share (a rehearsal has no GPU rank).
    if "--placement" in extra and not args.as_cpu:
        end = last.get("batch_share_end") or [0, 0]
        row["ok"] = bool((run / "profile.json").exists() and end[1] > end[0])
        if not row["ok"]:
            row["error"] = f"shares {last.get('batch_share')} -> {end}: the GPU worker did not get the larger share"
    return row


def train_in_process(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    """``graphdist-train argv`` in this process under ``env`` (restored after); its exit code and stderr."""
    import contextlib
    import io

    from graphdist.cli.train import main as train_main

    from unittest import mock

    err = io.StringIO()
    with mock.patch.dict(os.environ, env), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = train_main(argv)
    return code, err.getvalue()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=100_000)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--out", default=str(REPO / "bench" / "results" / "cuda.json"))
    p.add_argument("--as-cpu", action="store_true", help="rehearse: every cuda:N becomes cpu")
    p.add_argument("--only", default="layouts,loaders,device-sampling",
                   help="case groups: layouts, loaders, device-sampling (default all)")
    args = p.parse_args(argv)
    groups = set(args.only.split(","))
    if not groups <= {"layouts", "loaders", "device-sampling"}:
        p.error(f"--only: expected layouts, loaders and/or device-sampling (got {args.only})")
    import torch

    if not torch.cuda.is_available() and not args.as_cpu:
        print(f"no CUDA device (torch {torch.__version__}, built with CUDA {torch.version.cuda}): nothing to check")
        return 2
    gpus = 2 if args.as_cpu else torch.cuda.device_count()
    cases = [("cuda:0", 1, (), None), ("cpu,cuda:0", 2, (), None)]
    cases += [("cuda:0,cuda:1", 2, (), None)] if gpus >= 2 else []
    cases += [("cpu,cuda:0", 2, ("--compress", "int8"), None),
              ("cpu,cuda:0", 2, ("--allreduce", "hier"), {"GRAPHDIST_TOPOLOGY": "2x1"}),
              ("cpu,cuda:0", 2, ("--placement", "profiled", "--rebalance-every", "5"), None),
              ("cpu,cuda:0", 2, ("--strategy", "fullgraph", "--staleness", "0"), None),
              ("cpu,cuda:0", 2, ("--strategy", "fullgraph", "--staleness", "1"), None),
              ("cpu,cuda:0", 2, ("--strategy", "aggregation"), None),
              ("cuda:0", 1, ("--precision", "bf16"), None),
              # fp16 with loss scaling on the GPU (a CPU rank refuses fp16; rehearsed as CPU, emulated)
              ("cuda:0", 1, ("--precision", "fp16"), {"GRAPHDIST_TEST_EMULATED_FP16": "1"} if args.as_cpu else None)]
    from graphdist.models.dense import native_bf16

    cases += [("cpu,cuda:0", 2, ("--precision", "bf16"), None)] if native_bf16() else []
    cases = cases if "layouts" in groups else []
    at = len(cases)  # (devices, workers, extra, env, global batch, index of the baseline case)
    if groups & {"loaders", "device-sampling"}:  # the baseline: as on main (prefetch thread, sampling on the CPU)
        cases += [("cuda:0", 1, ("--loaders", "0", "--sample-on", "cpu"), None, 2048, None)]
    if "loaders" in groups:
        cases += [("cuda:0", 1, ("--loaders", "4", "--sample-on", "cpu"), None, 2048, at)]
    if "device-sampling" in groups:
        cases += [("cuda:0", 1, ("--sample-on", "device"), None, 2048, at)]
        # the mixed job against the GPU alone at the same global batch (its best: sampling on the device)
        cases += [("cpu,cuda:0", 2, ("--replicate", "graph", "--rebalance-every", "5"), None, 2048, len(cases) - 1)]
    cases = [c if len(c) == 6 else (*c, None, None) for c in cases]
    rows: list[dict] = []
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="graphdist-cuda-") as tmp:
        for i, (devices, workers, extra, env, batch, baseline) in enumerate(cases):
            if args.as_cpu:
                devices = ",".join("cpu" if d.startswith("cuda") else d for d in devices.split(","))
            rows.append(run_case(devices, workers, args, Path(tmp) / f"case{i}", extra, env, batch))
            if baseline is not None and rows[-1]["ok"] and rows[baseline]["ok"]:
                rows[-1]["vs"] = round(rows[-1]["seeds_per_s"] / max(1, rows[baseline]["seeds_per_s"]), 2)
            print(json.dumps(rows[-1]), flush=True)
            # Written after every case: a GPU lease that ends mid-run still leaves what ran.
            out.write_text(json.dumps({"gpus": gpus, "torch": torch.__version__, "as_cpu": args.as_cpu,
                                       "cases": rows, "complete": len(rows) == len(cases)}, indent=2))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
