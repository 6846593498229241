"""Multi-host bench: 2 emulated hosts x 1 worker over shaped links, --sync dwbp / ddp / blocking side by side.

Needs root and iproute2 (network namespaces; see ``graphdist.testing.netns``). For each dataset
and link rate it starts one worker in each host (gloo bound to the host's interface) and trains
each sync mode for a few warm-up steps and ``--steps`` measured steps, then reports epoch time,
seeds/s, bytes sent split by purpose (gradients vs remote neighbourhoods/features), the measured
DWBP hidden fraction next to the timing model of docs/design.md#dwbps-timing-model (fed the same steps' measured per-layer
backward and collective times), and the veth ``tx_bytes`` against graphdist's byte counters.
One worker per host on this 2-core machine, so the link, not CPU contention, is what changes.

Run book:

    sudo .venv/bin/python bench/bench_cluster.py                       # pubmed + synthetic-1m, 3 rates
    sudo .venv/bin/python bench/bench_cluster.py --datasets pubmed --rates 1gbit,100mbit --steps 4
    # writes bench/results/cluster.json and bench/results/cluster.png

Rates above ~5 Gbit/s measure nothing here (loopback gloo is ~13 Gbit/s).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
sys.path.insert(0, str(REPO))

# Per dataset: global batch (both workers) and fan-outs. Pubmed has 60 train nodes: a small batch
# gives several steps; the generated graph gets a realistic batch. "pubmed-wide" is pubmed with a
# wide model (hidden 2048) and 32 seeds per worker: where sufficient factors apply.
PRESETS = {
    "pubmed": {"batch_size": 16, "fanouts": "10,10,10"},
    "pubmed-wide": {"batch_size": 64, "fanouts": "10,10,10", "hidden": 2048, "dataset": "pubmed"},
    "default": {"batch_size": 256, "fanouts": "5,5,5"},
}

# --syncs names -> TrainConfig fields. "ddp" is torch DDP with its own allreduce; "ddp-fp16" with
# torch's fp16_compress_wrapper; "dwbp" graphdist's layer-wise sync with every layer dense over the
# ring (main before SACP); "sacp" adds sufficient factors; "auto" adds the topology-aware allreduce
# choice; the last two compress too ("dwbp-fp16": DDP-fp16's twin, the layer-wise schedule alone).
VARIANTS = {
    "ddp": {"sync": "ddp", "allreduce": "ring", "sacp": "off"},
    "ddp-fp16": {"sync": "ddp", "allreduce": "ring", "sacp": "off", "compress": "fp16"},
    "dwbp": {"sync": "dwbp", "allreduce": "ring", "sacp": "off"},
    "dwbp-fp16": {"sync": "dwbp", "allreduce": "ring", "sacp": "off", "compress": "fp16"},
    "blocking": {"sync": "blocking", "allreduce": "ring", "sacp": "off"},
    "sacp": {"sync": "dwbp", "allreduce": "ring", "sacp": "on"},
    "auto": {"sync": "dwbp", "allreduce": "auto", "sacp": "on"},
    "auto-fp16": {"sync": "dwbp", "allreduce": "auto", "sacp": "on", "compress": "fp16"},
    "auto-int8": {"sync": "dwbp", "allreduce": "auto", "sacp": "on", "compress": "int8"},
    "auto-compress": {"sync": "dwbp", "allreduce": "auto", "sacp": "on", "compress": "auto"},  # fp16 or int8, timed
    # graphdist-train's defaults: --sync auto (ddp or dwbp, chosen by probe steps across hosts), --allreduce auto,
    # --sacp auto; "auto" above is the default before --sync auto (dwbp with SACP and the allreduce choice)
    "default": {},
}


# --------------------------------------------------------------------------- worker (in a host)



def worker(a: argparse.Namespace) -> None:
    """One rank: trains every sync mode in turn, rank 0 writes the gathered records to ``a.result``."""
    import torch

    from graphdist import comm
    from graphdist.testing.netns import own_tx_bytes
    from graphdist.sync.compress import auto_choices
    from graphdist.config import TrainConfig
    from graphdist.trainers.run import build_strategy, seed_everything, worker_seed

    torch.set_num_threads(1)
    iface = os.environ["GLOO_SOCKET_IFNAME"]
    comm.init_process_group(a.rank, a.world, f"tcp://{a.master}", timeout_s=a.timeout)
    out = []
    try:
        modes = a.syncs.split(",")
        for round_, mode in ((r, m) for r in range(a.rounds) for m in (modes if r % 2 == 0 else modes[::-1])):
            cfg = TrainConfig(partitions=a.partitions, hidden=a.hidden, layers=len(a.fanouts.split(",")),
                              fanouts=tuple(int(f) for f in a.fanouts.split(",")), batch_size=a.batch_size,
                              timeout=a.timeout, num_workers=a.world, threads=1, seed=0, dropout=0.0,
                              **VARIANTS[mode])
            seed_everything(worker_seed(cfg.seed, a.rank))
            strategy = build_strategy(a.rank, a.world, cfg, a.partitions)
            natural = strategy.steps_per_epoch
            steps: list[Any] = []
            finish = strategy.sync.finish

            def recording_finish(finish=finish, steps=steps):  # noqa: ANN202 - keeps every step's StepStats
                s = finish()
                steps.append(s)
                return s

            strategy.sync.finish = recording_finish
            strategy.loader.num_batches = min(a.warmup, natural)
            strategy.train_epoch(0)
            steps.clear()
            strategy.loader.num_batches = min(a.steps, natural)
            comm.barrier()
            comm.reset_byte_counts()
            tx0 = own_tx_bytes(iface)
            stats = strategy.train_epoch(1)
            comm.barrier()
            tx = own_tx_bytes(iface) - tx0
            choices = dict(getattr(strategy.sync.hook_state, "choices", {}))
            auto = [c.describe() for c in auto_choices()] if VARIANTS[mode].get("compress") == "auto" else []
            rec = {"rank": a.rank, "sync": mode, "round": round_, "sacp_choices": choices, "steps": stats.steps,
                   "compress_auto": auto[-1] if auto else None,
                   "natural_steps": natural,
                   "seeds": stats.seeds, "time_s": stats.time_s, "bytes": comm.byte_counts(), "tx_bytes": tx,
                   "comm_exposed_s": stats.comm_exposed_s, "compute_s": stats.compute_s,
                   "sample_wait_s": stats.sample_wait_s, **_hidden(stats.sync, steps)}
            out.append(comm.all_gather_object(rec))
            strategy.close()
        if a.rank == 0:
            Path(a.result).write_text(json.dumps(out))
    finally:
        comm.shutdown()


def _hidden(summary_sums: list[float], steps: list[Any]) -> dict[str, Any]:
    """Measured and predicted hidden fraction over the measured steps (``SyncSummary``), per-layer comm."""
    from graphdist.sync import SyncSummary

    summary = SyncSummary.from_list(summary_sums)
    timed = [s for s in steps if s is not None and s.comm_s > 0]
    if not timed:
        return {"comm_s": 0.0, "hidden_measured": None, "hidden_predicted": None, "layers": []}
    names = [t.name for t in timed[0].layers]
    layers = []
    for i, name in enumerate(names):
        comm_l = [s.layers[i].comm_s for s in timed if len(s.layers) > i]
        # The layer's schedule in ms since begin_step (medians over the steps): when its last
        # gradient landed, when its collective left and when it completed; with backward's end
        # (the last layer's ready) this shows what stays exposed.
        at = {key: _median_ms([getattr(s.layers[i], key) for s in timed if len(s.layers) > i])
              for key in ("ready_s", "launch_s", "complete_s")}
        layers.append({"name": name, "numel": timed[0].layers[i].numel, "comm_s": sum(comm_l) / len(comm_l),
                       "ready_ms": at["ready_s"], "launch_ms": at["launch_s"], "complete_ms": at["complete_s"]})
    return {"comm_s": summary.comm_s, "backward_s": summary.backward_s, "hidden_measured": summary.hidden_fraction,
            "hidden_predicted": summary.predicted_hidden_fraction, "layers": layers}


def _median_ms(seconds: list[Optional[float]]) -> Optional[float]:
    known = sorted(1e3 * t for t in seconds if t is not None)
    return known[len(known) // 2] if known else None


# ----------------------------------------------------------------------------- driver (parent)


def ensure_partitions(dataset: str, cache: Path, parts: int = 2) -> Path:
    from graphdist.data import load_graph
    from partition.api import partition

    dataset = PRESETS.get(dataset, {}).get("dataset", dataset)
    out = cache / f"{dataset}-metis-{parts}"
    if not (out / "meta.json").exists():
        t0 = time.perf_counter()
        partition(load_graph(dataset), parts, method="metis", out=out, seed=0, force=True)
        print(f"partitioned {dataset} into 2 parts in {time.perf_counter() - t0:.0f} s", flush=True)
    return out


def run_config(c: Any, a: argparse.Namespace, dataset: str, parts: Path, port: int) -> list[dict[str, Any]]:
    """One launch of ``2 x workers_per_host`` workers at the cluster's current rate; the per-mode records."""
    preset = PRESETS.get(dataset, PRESETS["default"])
    world = 2 * a.workers_per_host
    with tempfile.TemporaryDirectory(prefix="gd-bench-") as tmp:
        result = Path(tmp) / "result.json"
        argvs = [[sys.executable, str(Path(__file__).resolve()), "--worker", "--rank", str(rank),
                  "--world", str(world), "--master", f"{c.addr(0)}:{port}", "--partitions", str(parts),
                  "--syncs", a.syncs, "--rounds", str(a.rounds), "--hidden", str(preset.get("hidden", a.hidden)),
                  "--fanouts", preset["fanouts"], "--batch-size", str(preset["batch_size"]), "--steps", str(a.steps),
                  "--warmup", str(a.warmup), "--timeout", str(a.timeout), "--result", str(result)]
                 for rank in range(world)]
        c.run_ranks(argvs, [rank // a.workers_per_host for rank in range(world)], tmp, a.limit, cwd=str(REPO))
        return json.loads(result.read_text())


def summarize(dataset: str, rate: str, per_mode: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per variant: medians over rounds of step time and rates; speed-ups against DDP."""
    import statistics

    per_round = _per_round(dataset, rate, per_mode)
    rows = []
    for sync in dict.fromkeys(r["sync"] for r in per_round):
        runs = [r for r in per_round if r["sync"] == sync]
        row = dict(runs[len(runs) // 2])
        for key in ("step_s", "epoch_s_est", "seeds_per_s", "exposed_comm_share"):
            row[key] = statistics.median(r[key] for r in runs)
        row["rounds"] = len(runs)
        row["step_s_by_round"] = [r["step_s"] for r in runs]
        rows.append(row)
    by = {r["sync"]: r for r in rows}
    for r in rows:
        r["speedup_vs_ddp"] = by["ddp"]["step_s"] / r["step_s"] if "ddp" in by else None
        r["speedup_vs_ddp_fp16"] = by["ddp-fp16"]["step_s"] / r["step_s"] if "ddp-fp16" in by else None
    return rows


def _per_round(dataset: str, rate: str, per_mode: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    rows = []
    for ranks in per_mode:
        r0 = ranks[0]
        t = max(r["time_s"] for r in ranks)
        tags: dict[str, int] = {}
        for r in ranks:
            for k, v in r["bytes"].items():
                tags[k] = tags.get(k, 0) + v
        counted = sum(tags.values())
        tx = sum(r["tx_bytes"] for r in ranks)
        rows.append({
            "dataset": dataset, "rate": rate, "sync": r0["sync"], "steps": r0["steps"],
            "natural_steps": r0["natural_steps"], "step_s": t / max(1, r0["steps"]),
            "epoch_s_est": t / max(1, r0["steps"]) * r0["natural_steps"],
            "seeds_per_s": sum(r["seeds"] for r in ranks) / max(t, 1e-9),
            "grad_bytes_per_step": tags.get("grad", 0) / max(1, r0["steps"]),
            "remote_bytes_per_step": (tags.get("feature", 0) + tags.get("sample", 0)) / max(1, r0["steps"]),
            "grad_bytes_per_epoch": tags.get("grad", 0) / max(1, r0["steps"]) * r0["natural_steps"],
            "remote_bytes_per_epoch": (tags.get("feature", 0) + tags.get("sample", 0)) / max(1, r0["steps"])
            * r0["natural_steps"],
            "bytes_by_tag": tags, "counted_bytes": counted, "veth_tx_bytes": tx,
            "tx_over_counted": tx / counted if counted else None,
            "exposed_comm_share": sum(r["comm_exposed_s"] for r in ranks) / max(1e-9, sum(r["time_s"] for r in ranks)),
            "hidden_measured": _mean([r["hidden_measured"] for r in ranks]),
            "hidden_predicted": _mean([r["hidden_predicted"] for r in ranks]),
            "layers": r0.get("layers", []), "sacp_choices": r0.get("sacp_choices", {}),
            "compress_auto": r0.get("compress_auto"),
        })
    return rows


def _mean(xs: list[Optional[float]]) -> Optional[float]:
    vals = [x for x in xs if x is not None]
    return sum(vals) / len(vals) if vals else None


def print_table(rows: list[dict[str, Any]]) -> None:
    head = (f"{'dataset':<14}{'link':>9}{'sync':>14}{'ms/step':>9}{'vs ddp':>7}{'vs ddp16':>9}{'seeds/s':>9}"
            f"{'grad MB/st':>11}{'remote MB/st':>13}{'exposed':>8}{'hid meas':>9}{'tx/count':>9}  sfb layers")
    print(head)
    print("-" * len(head))
    pct = lambda v: f"{100 * v:.0f}%" if v is not None else "-"  # noqa: E731
    for r in rows:
        ratio = lambda v: f"{v:.2f}" if v is not None else "-"  # noqa: E731
        sfb = ",".join(k for k, v in r.get("sacp_choices", {}).items() if v == "sfb") or "-"
        print(f"{r['dataset']:<14}{r['rate']:>9}{r['sync']:>14}{1000 * r['step_s']:>9.0f}"
              f"{ratio(r.get('speedup_vs_ddp')):>7}{ratio(r.get('speedup_vs_ddp_fp16')):>9}"
              f"{r['seeds_per_s']:>9,.0f}{r['grad_bytes_per_step'] / 1e6:>11.2f}{r['remote_bytes_per_step'] / 1e6:>13.2f}"
              f"{pct(r['exposed_comm_share']):>8}{pct(r['hidden_measured']):>9}"
              f"{r['tx_over_counted'] or 0:>9.2f}  {sfb}")
    for r in rows:
        if r.get("compress_auto"):
            print(f"  {r['dataset']} {r['rate']} {r['sync']}: {r['compress_auto']}")
    for r in rows:  # layer-wise modes: each layer's ready / launch / complete, ms since begin_step (medians)
        timed = [layer for layer in r.get("layers", []) if layer.get("launch_ms") is not None]
        if timed:
            ms = lambda v: f"{v:.0f}" if v is not None else "-"  # noqa: E731
            print(f"  schedule {r['dataset']} {r['rate']} {r['sync']}: " + ", ".join(
                f"{layer['name']} {ms(layer['ready_ms'])}/{ms(layer['launch_ms'])}/{ms(layer['complete_ms'])}"
                for layer in timed))


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    fig, axes = plt.subplots(2, len(datasets), figsize=(6 * len(datasets), 8), squeeze=False)
    for j, ds in enumerate(datasets):
        sub = [r for r in rows if r["dataset"] == ds]
        rates = list(dict.fromkeys(r["rate"] for r in sub))
        syncs = list(dict.fromkeys(r["sync"] for r in sub))
        ax = axes[0][j]
        width = 0.8 / len(syncs)
        for k, s in enumerate(syncs):
            ys = [next((1000 * r["step_s"] for r in sub if r["rate"] == rt and r["sync"] == s), 0) for rt in rates]
            ax.bar([i + k * width for i in range(len(rates))], ys, width, label=s)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(rates))], rates)
        ax.set_ylabel("ms / step")
        ax.set_title(f"{ds}: step time by link rate")
        ax.legend()
        ax = axes[1][j]
        dw = [r for r in sub if r["sync"] == "dwbp"]
        xs = range(len(dw))
        ax.bar([x - 0.2 for x in xs], [100 * (r["hidden_measured"] or 0) for r in dw], 0.4, label="measured")
        ax.bar([x + 0.2 for x in xs], [100 * (r["hidden_predicted"] or 0) for r in dw], 0.4, label="timing model")
        ax.set_xticks(list(xs), [r["rate"] for r in dw])
        ax.set_ylabel("dwbp hidden fraction (%)")
        ax.set_ylim(0, 100)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--datasets", default="pubmed,synthetic-1m", help="comma-separated (default pubmed,synthetic-1m)")
    p.add_argument("--rates", default="1gbit,300mbit,100mbit", help="link rates, each direction")
    p.add_argument("--syncs", default="ddp,dwbp,sacp,auto,ddp-fp16,auto-fp16,auto-int8,auto-compress",
                   help=f"variants, of {', '.join(VARIANTS)} (default: all but blocking)")
    p.add_argument("--hidden", type=int, default=1024, help="wide, so gradient traffic matters (default 1024; "
                   "pubmed-wide: 2048)")
    p.add_argument("--workers-per-host", type=int, default=1,
                   help="workers on each of the 2 hosts (default 1: the link, not CPU contention, is what changes)")
    p.add_argument("--steps", type=int, default=8, help="measured steps per sync mode (default 8)")
    p.add_argument("--rounds", type=int, default=3,
                   help="passes over the variants, alternating their order; medians reported (default 3)")
    p.add_argument("--warmup", type=int, default=2, help="unmeasured steps first (default 2)")
    p.add_argument("--timeout", type=float, default=120.0, help="collective timeout, s")
    p.add_argument("--limit", type=float, default=900.0, help="seconds before one launch is killed")
    p.add_argument("--out", default=str(RESULTS / "cluster.json"))
    p.add_argument("--png", default=str(RESULTS / "cluster.png"))
    # worker mode (started by the driver inside a host)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    for flag, kind in (("--rank", int), ("--world", int), ("--master", str), ("--partitions", str),
                       ("--fanouts", str), ("--batch-size", int), ("--result", str)):
        p.add_argument(flag, type=kind, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        worker(a)
        return 0

    from graphdist.testing.netns import EmulatedCluster, unavailable_reason

    reason = unavailable_reason()
    if reason:
        print(f"bench_cluster: {reason}", file=sys.stderr)
        return 2
    from graphdist.data.loaders import cache_dir

    cache = cache_dir() / "bench-cluster"
    rates = a.rates.split(",")
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    port = 29600
    config = {k: v for k, v in vars(a).items()
              if k in ("datasets", "rates", "syncs", "hidden", "steps", "rounds", "workers_per_host", "warmup")}
    machine = {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    for ds in a.datasets.split(","):
        parts = ensure_partitions(ds, cache, 2 * a.workers_per_host)
        with EmulatedCluster(hosts=2, rate=rates[0], tcp_retries2=5) as c:
            for rate in rates:
                for h in range(2):
                    c.set_rate(h, rate)
                port += 1  # a fresh port per launch: no TIME_WAIT surprises
                t0 = time.perf_counter()
                new = summarize(ds, rate, run_config(c, a, ds, parts, port))
                rows += new
                print(f"{ds} @ {rate}: {len(new)} sync modes in {time.perf_counter() - t0:.0f} s", flush=True)
                print_table(new)
                # After every launch: a later launch that fails or runs out of time loses only itself.
                doc = {"config": config, "presets": PRESETS, "variants": VARIANTS, "machine": machine,
                       "total_s": time.perf_counter() - started, "results": rows}
                Path(a.out).write_text(json.dumps(doc, indent=1))
    print()
    print_table(rows)
    plot(rows, Path(a.png))
    print(f"wrote {a.out} and {a.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
