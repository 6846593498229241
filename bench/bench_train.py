"""Training benchmark: accuracy against single-process, and throughput against DGL and 1 worker.

Three parts (each runs the real ``graphdist-train`` CLI in a subprocess and reads its
``metrics.jsonl``):

- ``--accuracy``: cora and pubmed (public split), GCN (``--model``), test accuracy at the
  best-validation epoch, for 1, 2 and 4 workers on the same 10 seeds (paired); prints every
  seed and the means. Target: 1 worker >= 79.5 (cora) / 77.0 (pubmed); 2 and 4 workers within
  1 point of 1 worker on the mean.
- ``--speed``: a generated graph (``--nodes``, default 1,000,000, ~20M edges), GraphSAGE 3
  layers hidden 256, fan-outs 15,10,5, batch 1024 per worker, 1 thread per worker.
  1 worker pinned to one core (``taskset -c 0``) against 2 workers with ``--sync dwbp``,
  ``ddp`` and ``blocking``; seeds/s of the second (warm) epoch of ``--steps`` steps, and
  DWBP's hidden fraction. Target: 2 workers >= 1.8x 1 worker.
- ``--high-degree``: GCN with fan-outs 10,10 against full neighbourhoods (``-1,-1``) on a generated
  graph of mean degree 32, best- and last-epoch test accuracy over paired seeds. Target: within
  1 point of full-neighbour GCN at both. With ``--baseline DIR`` the baseline checkout's sampled
  GCN runs too (before the ``d/k`` rescale: the biased form, beside the fixed one).
- ``--compression``: ``--compress none|fp16|bf16|int8`` on pubmed (the GCN recipe above, 2 workers)
  and synthetic-100k (GraphSAGE defaults, 2 workers), paired seeds; the paired difference to
  ``none`` and twice its standard error. Target: int8 within max(0.5, 2 SE) points, fp16 and bf16
  within max(0.2, 2 SE).
- ``--inference``: the time of graphdist's evaluation (exact layer-at-a-time full-neighbour inference of
  the speed workload's model over every node) with 1 and 2 workers, beside DGL's layer-wise
  inference (``bench/peers/dgl_infer.py``, one process) with ``--peers`` and another checkout's
  with ``--baseline``; alternating rounds, medians, nodes/s.
- ``--scaling``: the speed workload (batch 1024 per worker, no prefetch thread: a worker is one
  core of work) for ``--workers`` (1, 2, 4) local workers and, as root, 2 emulated hosts x 1 and
  x 2 at ``--scaling-rate``; medians of ``--rounds``; a PNG of seeds/s against workers with the
  ideal line. This machine has 2 cores: 4 workers are oversubscribed, and so is 2 x 2.
- ``--peers``: DGL 2.1 (own venv, ``bench/peers/env.py``) trains the same workload on the same
  graph in the same run (one thread, pinned like the 1-worker run), alternating with graphdist
  over ``--rounds`` rounds (medians, every run listed); prints the ratios of seeds/s and of
  peak RSS (VmHWM: graphdist's worker, after an untimed warm-up run cached the partitions).
  Targets: graphdist 1 worker >= 2.0x DGL's seeds/s, peak RSS no higher than DGL's.

Run book:
    python bench/bench_train.py --accuracy                  # ~15 min on 2 cores
    python bench/bench_train.py --speed --peers --steps 30  # ~15 min (3 rounds)
    python bench/bench_train.py --peers --syncs "" --steps 30  # 1 worker against DGL only, ~8 min
    sudo .venv/bin/python bench/bench_train.py --scaling --steps 20 --rounds 2  # ~15 min
    python bench/bench_train.py --inference --peers --rounds 3                 # ~10 min
    python bench/bench_train.py --speed --nodes 100000      # quick
    git worktree add /tmp/base <rev>                        # then, this tree against <rev>:
    python bench/bench_train.py --speed --baseline /tmp/base --pairs 5 --nodes 300000 --steps 20
    python bench/bench_train.py --accuracy --datasets cora --workers 1 --seeds 1 --epochs 3  # seconds
    python bench/bench_train.py --speed --nodes 3000 --steps 2 --syncs dwbp                  # seconds
    python bench/bench_train.py --high-degree --seeds 5 --epochs 30 --baseline /tmp/base     # ~20 min
    python bench/bench_train.py --compression --seeds 5                                     # ~30 min
Results: bench/results/train.json (git-ignored).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from graphdist.data.loaders import cache_dir  # noqa: E402

# One recipe for both Planetoid graphs: Kipf & Welling's GCN settings (row-normalised features,
# hidden 64, dropout 0.5, weight decay 5e-4), trained in mini-batches of 32 seeds with
# fan-outs 10,10 and global-degree normalisation. --model sage runs GraphSAGE instead.
ACCURACY_ARGS = ["--hidden", "64", "--fanouts", "10,10", "--batch-size", "32",
                 "--lr", "0.01", "--weight-decay", "0.0005", "--dropout", "0.5", "--feature-norm", "row",
                 "--log-interval", "100000"]
ACCURACY_EPOCHS = 50  # the targets are for 50 epochs; --epochs lowers it for quick runs
SPEED_ARGS = ["--model", "sage", "--layers", "3", "--hidden", "256", "--fanouts", "15,10,5",
              "--threads", "1", "--eval-every", "0", "--epochs", "2", "--log-interval", "100000"]



def run_cli(args: list[str], run_dir: Path, pin: Optional[str] = None, timeout: float = 3600,
            repo: Path = REPO, cache: Optional[Path] = None) -> list[dict[str, Any]]:
    """Runs graphdist-train of the checkout ``repo``; returns its metrics records (raises with stderr on failure).

    ``python -m`` puts the working directory first on ``sys.path`` (spawned workers inherit it),
    so running in another checkout runs that checkout's code with this environment. ``cache``: a
    GRAPHDIST_CACHE of its own (an older checkout may not read this one's partition format).
    """
    cmd = [sys.executable, "-m", "graphdist.cli.train", *args, "--run-dir", str(run_dir)]
    if pin is not None and shutil.which("taskset"):
        cmd = ["taskset", "-c", pin, *cmd]
    env = {**os.environ, "OMP_NUM_THREADS": "1", **({"GRAPHDIST_CACHE": str(cache)} if cache else {})}
    done = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def best_test(history: list[dict[str, Any]]) -> float:
    best = max((r for r in history if r.get("val_acc") is not None), key=lambda r: r["val_acc"])
    return 100.0 * best["test_acc"]


# ----------------------------------------------------------------- accuracy


def bench_accuracy(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    recipe = [*ACCURACY_ARGS, "--epochs", str(args.epochs)]
    out: dict[str, Any] = {"model": args.model, "recipe": recipe, "runs": {}}
    for dataset in args.datasets:
        per_workers: dict[int, list[float]] = {}
        for workers in args.workers:
            accs = []
            for seed in range(args.seeds):
                run = tmp / f"{dataset}-{workers}-{seed}"
                hist = run_cli(["--dataset", dataset, "--num-workers", str(workers), "--seed", str(seed),
                                "--model", args.model, *recipe], run)
                accs.append(best_test(hist))
                print(f"  {dataset} workers={workers} seed={seed}: test {accs[-1]:.2f}%", flush=True)
            per_workers[workers] = accs
        out["runs"][dataset] = {str(w): a for w, a in per_workers.items()}
    return out


def print_accuracy(res: dict[str, Any]) -> None:
    targets = {"cora": 79.5, "pubmed": 77.0}
    print(f"\nTest accuracy at the best-validation epoch (%), {res['model']}, paired seeds")
    print(f"{'dataset':<9}{'workers':>8}{'mean':>8}{'std':>7}{'diff vs 1':>11}  per seed")
    for dataset, runs in res["runs"].items():
        base = statistics.mean(runs["1"]) if "1" in runs else None
        for w, accs in runs.items():
            mean = statistics.mean(accs)
            std = statistics.pstdev(accs)
            diff = "" if base is None or w == "1" else f"{mean - base:+.2f}"
            note = ""
            if w == "1" and dataset in targets:
                note = "  target >= %.1f: %s" % (targets[dataset], "ok" if mean >= targets[dataset] else "MISSED")
            elif base is not None and w != "1":
                note = "  within 1 pt: %s" % ("ok" if abs(mean - base) <= 1.0 else "MISSED")
            print(f"{dataset:<9}{w:>8}{mean:>8.2f}{std:>7.2f}{diff:>11}  "
                  + " ".join(f"{a:.1f}" for a in accs) + note)


# ------------------------------------------------------------- compression
# What each dataset trains with: Planetoid graphs the GCN recipe; a generated graph GraphSAGE's
# defaults (its epochs are long: 3 of them).
COMPRESSION_RECIPES = {"pubmed": [*ACCURACY_ARGS, "--model", "gcn"],
                       "synthetic-100k": ["--epochs", "3", "--log-interval", "100000"]}
COMPRESSION_TOLERANCE = {"fp16": 0.2, "bf16": 0.2, "int8": 0.5}


def bench_compression(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    out: dict[str, Any] = {"variants": args.compress.split(","), "runs": {}}
    for dataset in args.datasets:
        planetoid = dataset in ("cora", "citeseer", "pubmed")
        recipe = COMPRESSION_RECIPES["pubmed" if planetoid else "synthetic-100k"]
        if planetoid:
            recipe = [*recipe, "--epochs", str(args.epochs)]
        runs: dict[str, list[float]] = {}
        for seed in range(args.seeds):  # seeds outermost: the variants of one seed run back to back
            for variant in out["variants"]:
                run = tmp / f"{dataset}-{variant}-{seed}"
                hist = run_cli(["--dataset", dataset, "--num-workers", "2", "--seed", str(seed),
                                "--compress", variant, *recipe], run)
                runs.setdefault(variant, []).append(best_test(hist))
                print(f"  {dataset} --compress {variant} seed={seed}: test {runs[variant][-1]:.2f}%", flush=True)
        out["runs"][dataset] = runs
    return out


def print_compression(res: dict[str, Any]) -> None:
    print("\nTest accuracy at the best-validation epoch (%), 2 workers, paired seeds")
    print(f"{'dataset':<16}{'compress':>9}{'mean':>8}{'diff':>8}{'2 SE':>7}  verdict / per seed")
    for dataset, runs in res["runs"].items():
        base = runs.get("none")
        for variant, accs in runs.items():
            mean = statistics.mean(accs)
            if base is None or variant == "none":
                print(f"{dataset:<16}{variant:>9}{mean:>8.2f}{'':>8}{'':>7}  " + " ".join(f"{a:.1f}" for a in accs))
                continue
            diffs = [a - b for a, b in zip(accs, base)]
            diff = statistics.mean(diffs)
            se2 = 2 * statistics.stdev(diffs) / len(diffs) ** 0.5 if len(diffs) > 1 else float("nan")
            allowed = max(COMPRESSION_TOLERANCE.get(variant, 0.5), se2 if se2 == se2 else 0.0)
            verdict = "ok" if abs(diff) <= allowed else "MISSED"
            print(f"{dataset:<16}{variant:>9}{mean:>8.2f}{diff:>+8.2f}{se2:>7.2f}  within {allowed:.2f}: {verdict}; "
                  + " ".join(f"{a:.1f}" for a in accs))


# --------------------------------------------------------- high-degree GCN
# Sampled GCN on a graph of mean degree 32 (fan-outs 10,10 sample about a third of each
# neighbourhood) against full-neighbour GCN, same recipe, paired seeds. Features carry little
# signal, so the aggregation (where sampling bias would show) decides the accuracy.
HIGH_DEGREE_GRAPH = {"num_nodes": 6000, "avg_degree": 32.0, "feature_signal": 0.6, "homophily": 0.6, "seed": 11}
HIGH_DEGREE_ARGS = ["--model", "gcn", "--hidden", "64", "--batch-size", "256", "--lr", "0.01",
                    "--weight-decay", "0.0005", "--dropout", "0.5", "--log-interval", "100000"]


def high_degree_graph(num_nodes: int) -> Path:
    """The mean-degree-32 generated graph as .npz in the cache (made once)."""
    import numpy as np

    from graphdist.data.synthetic import synthetic

    spec = {**HIGH_DEGREE_GRAPH, "num_nodes": num_nodes}
    key = "-".join(f"{k}{v}" for k, v in spec.items())
    path = cache_dir() / "bench" / f"high-degree-{key}.npz"
    if not path.exists():
        g = synthetic(**spec, name="high-degree")
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp.npz")
        np.savez(tmp, edge_index=g.edge_index().numpy(), x=g.x.numpy(), y=g.y.numpy(),
                 **{m: getattr(g, m).numpy() for m in ("train_mask", "val_mask", "test_mask")})
        os.replace(tmp, path)
    return path


def bench_high_degree(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """Best- and last-epoch test accuracy of sampled (10,10) and full-neighbour GCN; with ``--baseline``
    also the baseline checkout's sampled GCN (before the d/k rescale: the biased form)."""
    graph = high_degree_graph(args.high_degree_nodes)
    configs = [("sampled 10,10", "10,10", REPO), ("full -1,-1", "-1,-1", REPO)]
    if args.baseline:
        configs.insert(1, ("sampled 10,10, baseline", "10,10", Path(args.baseline)))
    out: dict[str, Any] = {"graph": {**HIGH_DEGREE_GRAPH, "num_nodes": args.high_degree_nodes}, "recipe": HIGH_DEGREE_ARGS, "epochs": args.epochs, "runs": {}}
    for seed in range(args.seeds):  # seeds outermost: the configs alternate in time
        for i, (name, fanouts, repo) in enumerate(configs):
            run = tmp / f"high-degree-seed{seed}-config{i}"
            hist = run_cli(["--dataset", str(graph), "--num-workers", "1", "--seed", str(seed), "--fanouts", fanouts,
                            "--epochs", str(args.epochs), *HIGH_DEGREE_ARGS], run, repo=repo)
            row = {"best": best_test(hist), "last": 100.0 * hist[-1]["test_acc"]}
            out["runs"].setdefault(name, []).append(row)
            print(f"  {name:<26} seed {seed}: best-epoch {row['best']:.2f}%  last-epoch {row['last']:.2f}%", flush=True)
    return out


def print_high_degree(res: dict[str, Any]) -> None:
    full = res["runs"]["full -1,-1"]
    print(f"\nGCN on a mean-degree-{res['graph']['avg_degree']:.0f} graph, test accuracy (%), "
          f"{len(full)} paired seeds, {res['epochs']} epochs")
    print(f"{'':<28}{'best epoch':>11}{'vs full':>9}{'last epoch':>12}{'vs full':>9}")
    for name, rows in res["runs"].items():
        diffs = {k: statistics.mean(r[k] - f[k] for r, f in zip(rows, full)) for k in ("best", "last")}
        ok = "" if name.startswith("full") else ("  within 1 pt: " + ("ok" if all(abs(d) <= 1.0 for d in diffs.values())
                                                                        else "MISSED"))
        print(f"{name:<28}{statistics.mean(r['best'] for r in rows):>11.2f}{diffs['best']:>+9.2f}"
              f"{statistics.mean(r['last'] for r in rows):>12.2f}{diffs['last']:>+9.2f}{ok}")


# -------------------------------------------------------------------- speed


def speed_run(dataset: str, workers: int, sync: str, args: argparse.Namespace, tmp: Path,
              pin: Optional[str], repo: Path = REPO) -> dict[str, Any]:
    run = tmp / f"speed-{workers}-{sync}-{abs(hash(str(repo)))}"
    shutil.rmtree(run, ignore_errors=True)
    hist = run_cli(["--dataset", dataset, "--num-workers", str(workers), "--sync", sync,
                    "--batch-size", str(1024 * workers), "--max-steps", str(args.steps), *SPEED_ARGS,
                    # Only when asked: a --baseline checkout older than the flag must still run.
                    *(["--precision", args.precision] if args.precision != "fp32" else [])], run, pin=pin, repo=repo)
    warm = hist[-1]
    return {"workers": workers, "sync": sync, "seeds_per_s": warm["seeds_per_s"],
            "epoch_time_s": warm["epoch_time_s"], "hidden_fraction": warm.get("hidden_fraction"),
            "bytes_sent": warm.get("bytes_sent", {}), "time_sample_s": warm.get("time_sample_s"),
            "time_comm_s": warm.get("time_comm_s"), "cache_hit_rate": warm.get("cache_hit_rate"),
            "peak_rss_bytes": max(warm.get("peak_rss_bytes") or [0])}


def warm_up(dataset: str, workers: list[int], tmp: Path) -> None:
    """One short run per worker count, untimed: partitions cached and the page cache warm before any
    run is timed or its peak memory read (a first run would partition, holding the whole graph)."""
    for w in sorted(set(workers)):
        run_cli(["--dataset", dataset, "--num-workers", str(w), "--batch-size", str(1024 * w), *SPEED_ARGS,
                 "--epochs", "1", "--max-steps", "1"], tmp / f"warm-{w}")  # the last --epochs counts


def median_row(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median seeds/s, its seeds/s and peak memory the medians of all runs, the runs listed."""
    ordered = sorted(runs, key=lambda r: r["seeds_per_s"])
    row = dict(ordered[(len(ordered) - 1) // 2])
    row["seeds_per_s"] = statistics.median(r["seeds_per_s"] for r in runs)
    row["peak_rss_bytes"] = statistics.median(r.get("peak_rss_bytes", 0) for r in runs)
    row["runs"] = [r["seeds_per_s"] for r in runs]
    return row


def bench_speed(args: argparse.Namespace, tmp: Path) -> tuple[list[dict[str, Any]], Optional[dict[str, Any]]]:
    """``--rounds`` rounds of 1 worker (pinned), 2 workers per sync mode and, with ``--peers``, DGL; the
    order flips every round (the peer first, then graphdist first), so drift hits both. Medians."""
    dataset = f"synthetic-{args.nodes}"
    syncs = [s for s in args.syncs.split(",") if s]
    configs = [(1, "dwbp", "0")] + [(2, sync, None) for sync in syncs]
    warm_up(dataset, [w for w, _, _ in configs], tmp)
    runs: dict[int, list[dict[str, Any]]] = {i: [] for i in range(len(configs))}
    peer_runs: list[dict[str, Any]] = []
    for r in range(args.rounds):
        order = ["peer", "graphdist"] if r % 2 == 0 else ["graphdist", "peer"]
        for system in order:
            if system == "peer" and args.peers:
                peer_runs.append(bench_peer(args))
                print(f"  round {r + 1} DGL: {peer_runs[-1]['seeds_per_s']:,.0f} seeds/s, "
                      f"peak RSS {peer_runs[-1]['peak_rss_bytes'] / 2**30:.2f} GiB", flush=True)
            elif system == "graphdist":
                for i, (workers, sync, pin) in enumerate(configs):
                    runs[i].append(speed_run(dataset, workers, sync, args, tmp, pin=pin))
                    print(f"  round {r + 1} graphdist {workers} worker{'s' if workers > 1 else ''} --sync {sync}: "
                          f"{runs[i][-1]['seeds_per_s']:,.0f} seeds/s, "
                          f"peak RSS {runs[i][-1]['peak_rss_bytes'] / 2**30:.2f} GiB per worker", flush=True)
    rows = [median_row(runs[i]) for i in range(len(configs))]
    return rows, (median_row(peer_runs) if peer_runs else None)


def bench_baseline(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """This checkout against ``--baseline`` (another commit's checkout), alternating, ``--pairs`` rounds.

    Each round runs 1 worker (pinned) and 2 workers (``--sync dwbp``) of the baseline, then of
    this tree (the order flips every round, so drift hits both); the medians are compared.
    """
    dataset = f"synthetic-{args.nodes}"
    trees = {"baseline": Path(args.baseline).resolve(), "this": REPO}
    runs: dict[str, dict[str, list[float]]] = {name: {"1": [], "2": []} for name in trees}
    rows: list[dict[str, Any]] = []  # this tree's last pair: the speed table's rows
    for i in range(args.pairs):
        order = ["baseline", "this"] if i % 2 == 0 else ["this", "baseline"]
        for name in order:
            for workers, pin in ((1, "0"), (2, None)):
                row = speed_run(dataset, workers, "dwbp", args, tmp, pin=pin, repo=trees[name])
                runs[name][str(workers)].append(row["seeds_per_s"])
                if name == "this":
                    rows = [r for r in rows if r["workers"] != workers] + [row]
                print(f"  pair {i + 1} {name:<8} {workers} worker{'s' if workers > 1 else ' '}: "
                      f"{row['seeds_per_s']:,.0f} seeds/s", flush=True)
    return {"baseline": str(trees["baseline"]), "pairs": args.pairs, "runs": runs,
            "this_rows": sorted(rows, key=lambda r: r["workers"])}


def print_baseline(res: dict[str, Any]) -> None:
    print(f"\nThis tree against {res['baseline']}: seeds/s, medians of {res['pairs']} alternating pairs")
    print(f"{'workers':<9}{'baseline':>10}{'this':>10}{'this/base':>11}   runs (baseline | this)")
    for w in ("1", "2"):
        base, this = (statistics.median(res["runs"][n][w]) for n in ("baseline", "this"))
        spread = " ".join(f"{v:,.0f}" for v in res["runs"]["baseline"][w]) + " | " + " ".join(
            f"{v:,.0f}" for v in res["runs"]["this"][w])
        print(f"{w:<9}{base:>10,.0f}{this:>10,.0f}{this / base:>10.3f}x   {spread}")


def peer_graph(nodes: int) -> Path:
    """The generated graph with features, labels and train ids as .npz for the DGL run (made once)."""
    import numpy as np

    from graphdist.data import load_graph

    path = cache_dir() / "bench" / f"train-{nodes}.npz"
    if not path.exists():
        g = load_graph(f"synthetic-{nodes}")
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp.npz")
        np.savez(tmp, indptr=g.indptr.numpy(), indices=g.indices.numpy(), x=g.x.numpy(), y=g.y.numpy(),
                 train=g.train_mask.nonzero().view(-1).numpy())
        os.replace(tmp, path)
    return path


def run_peer(script: str, *script_args: str) -> dict[str, Any]:
    """``bench/peers/<script>`` in the DGL venv, pinned to core 0 with one thread; its last JSON line."""
    from bench.peers.env import peer_python

    cmd = [str(peer_python(quiet=True)), str(REPO / "bench" / "peers" / script), *script_args]
    if shutil.which("taskset"):
        cmd = ["taskset", "-c", "0", *cmd]
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
                          timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"the DGL peer run ({script}) failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def bench_peer(args: argparse.Namespace) -> dict[str, Any]:
    return run_peer("dgl_train.py", "--graph", str(peer_graph(args.nodes)), "--steps", str(args.steps))


# --------------------------------------------------------------- inference
# Exact layer-wise full-neighbour inference of the speed workload's model (graphdist's evaluation),
# timed as graphdist records it (eval_time_s of a run that evaluates after one training step).


def inference_run(args: argparse.Namespace, tmp: Path, workers: int, repo: Path = REPO) -> dict[str, Any]:
    run = tmp / f"inference-{workers}-{abs(hash(str(repo)))}"
    shutil.rmtree(run, ignore_errors=True)
    hist = run_cli(["--dataset", f"synthetic-{args.nodes}", "--num-workers", str(workers),
                    "--batch-size", str(1024 * workers), *SPEED_ARGS, "--epochs", "1", "--max-steps", "1",
                    "--eval-every", "1"], run, repo=repo,
                   cache=None if repo == REPO else cache_dir() / "bench" / f"baseline-cache-{abs(hash(str(repo)))}")
    seconds = hist[-1]["eval_time_s"]
    return {"workers": workers, "tree": str(repo), "seconds": seconds, "nodes_per_s": args.nodes / seconds}


def dgl_inference(args: argparse.Namespace) -> dict[str, Any]:
    return run_peer("dgl_infer.py", "--graph", str(peer_graph(args.nodes)))


def bench_inference(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """graphdist's evaluation with 1 and 2 workers (and ``--baseline``'s), DGL's layer-at-a-time inference with
    ``--peers``; ``--rounds`` rounds, the order flipped every round, medians of seconds."""
    trees = [("this", REPO)] + ([("baseline", Path(args.baseline).resolve())] if args.baseline else [])
    warm_up(f"synthetic-{args.nodes}", [1, 2], tmp)
    runs: dict[str, list[dict[str, Any]]] = {}
    for r in range(args.rounds):
        jobs = [(f"{name} {w}w", lambda w=w, tree=tree: inference_run(args, tmp, w, tree))
                for name, tree in trees for w in (1, 2)]
        if args.peers:
            jobs.append(("dgl", lambda: dgl_inference(args)))
        for key, job in (jobs if r % 2 == 0 else jobs[::-1]):
            runs.setdefault(key, []).append(job())
            print(f"  round {r + 1} {key}: {runs[key][-1]['seconds']:.2f} s", flush=True)
    medians = {key: {"seconds": statistics.median(x["seconds"] for x in rs),
                     "runs": [x["seconds"] for x in rs]} for key, rs in runs.items()}
    for m in medians.values():
        m["nodes_per_s"] = args.nodes / m["seconds"]
    return {"nodes": args.nodes, "rounds": args.rounds, "results": medians}


def print_inference(res: dict[str, Any]) -> None:
    print(f"\nLayer-wise full-neighbour inference, synthetic-{res['nodes']}, GraphSAGE 3x256, one thread per "
          f"process; medians of {res['rounds']} rounds")
    print(f"{'system':<20}{'seconds':>9}{'nodes/s':>12}   runs")
    for key, m in res["results"].items():
        print(f"{key:<20}{m['seconds']:>9.2f}{m['nodes_per_s']:>12,.0f}   " + " ".join(f"{v:.2f}" for v in m["runs"]))
    this, base = res["results"].get("this 2w"), res["results"].get("baseline 2w")
    if this and base:
        ratio = this["seconds"] / base["seconds"]
        print(f"2 workers, this / baseline: {ratio:.2f}x the time (issue 15's target: < 0.33x)")


# ------------------------------------------------------------------ scaling
# The speed workload per worker (batch 1024 each), every worker one core of work: no prefetch
# thread, so n workers on this 2-core machine are n cores' demand (4 is oversubscribed 2x).


def scaling_partitions(nodes: int, parts: int) -> Path:
    """METIS parts of the bench graph in the cache (made once), for runs that take ``--partitions``."""
    from graphdist.data import load_graph
    from partition.api import partition

    out = cache_dir() / "bench" / f"scaling-{nodes}-metis-{parts}"
    if not (out / "meta.json").exists():
        partition(load_graph(f"synthetic-{nodes}"), parts, method="metis", out=out, seed=0, force=True)
    return out


def scaling_args(nodes: int, workers: int, steps: int) -> list[str]:
    return ["--partitions", str(scaling_partitions(nodes, workers)), "--batch-size", str(1024 * workers),
            "--max-steps", str(steps), "--no-prefetch", "--sync", "dwbp", *SPEED_ARGS]


def scaling_local(args: argparse.Namespace, tmp: Path, workers: int) -> dict[str, Any]:
    run = tmp / f"scaling-local-{workers}"
    shutil.rmtree(run, ignore_errors=True)
    hist = run_cli([*scaling_args(args.nodes, workers, args.steps), "--num-workers", str(workers)], run)
    return {"layout": f"1 host x {workers}", "hosts": 1, "workers": workers, "seeds_per_s": hist[-1]["seeds_per_s"]}


def scaling_emulated(args: argparse.Namespace, tmp: Path, per_host: int, rate: str) -> dict[str, Any]:
    """graphdist-train under torchrun on 2 emulated hosts x ``per_host`` workers joined at ``rate``."""
    from graphdist.testing.netns import EmulatedCluster
    from graphdist.testing.netns.torchrun import TorchrunJob

    workers = 2 * per_host
    run = tmp / f"scaling-emulated-{per_host}-{rate}"
    shutil.rmtree(run, ignore_errors=True)
    cli = ["-m", "graphdist.cli.train", *scaling_args(args.nodes, workers, args.steps), "--run-dir", str(run)]
    with EmulatedCluster(hosts=2, rate=rate) as c:
        job = TorchrunJob(c, per_host, cli, cwd=str(REPO), env={"OMP_NUM_THREADS": "1"})
        codes = job.wait(3600)
        if codes != [0, 0]:
            raise RuntimeError(f"emulated run 2 x {per_host} at {rate} exited {codes}:\n{job.output()[-3000:]}")
    hist = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {"layout": f"2 hosts x {per_host}, {rate}", "hosts": 2, "workers": workers, "rate": rate,
            "seeds_per_s": hist[-1]["seeds_per_s"]}


def bench_scaling(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """seeds/s for 1, 2, 4 local workers and, where the emulated cluster runs, 2 hosts x 1 and x 2 at
    ``--scaling-rate``; ``--rounds`` rounds in alternating order, medians."""
    from graphdist.testing.netns import unavailable_reason

    layouts: list[tuple[str, int]] = [("local", w) for w in args.workers]
    reason = "--scaling-rate none" if args.scaling_rate == "none" else unavailable_reason()
    if reason:
        print(f"  emulated cluster skipped: {reason}", flush=True)
    else:
        layouts += [("emulated", 1), ("emulated", 2)]
    for kind, n in layouts:  # partitions first: never inside a timed run
        scaling_partitions(args.nodes, n if kind == "local" else 2 * n)
    runs: dict[int, list[dict[str, Any]]] = {i: [] for i in range(len(layouts))}
    for r in range(args.rounds):
        order = list(range(len(layouts))) if r % 2 == 0 else list(reversed(range(len(layouts))))
        for i in order:
            kind, n = layouts[i]
            row = (scaling_local(args, tmp, n) if kind == "local"
                   else scaling_emulated(args, tmp, n, args.scaling_rate))
            runs[i].append(row)
            print(f"  round {r + 1} {row['layout']}: {row['seeds_per_s']:,.0f} seeds/s", flush=True)
    rows = [median_row(runs[i]) for i in range(len(layouts))]
    return {"nodes": args.nodes, "steps": args.steps, "rounds": args.rounds, "cores": os.cpu_count(),
            "emulated_skipped": reason or None, "rows": rows}


def print_scaling(res: dict[str, Any]) -> None:
    rows = res["rows"]
    one = next((r["seeds_per_s"] for r in rows if r["workers"] == 1 and r["hosts"] == 1), None)
    print(f"\nScaling on synthetic-{res['nodes']} (the speed workload, batch 1024 per worker, no prefetch); "
          f"{res['cores']} cores here: more workers than cores are oversubscribed; medians of {res['rounds']} rounds")
    print(f"{'layout':<26}{'workers':>8}{'seeds/s':>10}{'vs 1':>8}{'ideal':>8}   note")
    for r in rows:
        over = " oversubscribed" if r["workers"] > res["cores"] else ""
        ratio = f"{r['seeds_per_s'] / one:.2f}x" if one else ""
        print(f"{r['layout']:<26}{r['workers']:>8}{r['seeds_per_s']:>10,.0f}{ratio:>8}{r['workers']:>7}x  {over}")


def plot_scaling(res: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = res["rows"]
    one = next((r["seeds_per_s"] for r in rows if r["workers"] == 1 and r["hosts"] == 1), None)
    fig, ax = plt.subplots(figsize=(6, 4))
    for hosts, style, label in ((1, "o-", "one host (local)"), (2, "s--", "2 emulated hosts")):
        pts = sorted((r["workers"], r["seeds_per_s"]) for r in rows if r["hosts"] == hosts)
        if pts:
            ax.plot(*zip(*pts), style, label=label)
    if one:
        most = max(r["workers"] for r in rows)
        ax.plot([1, most], [one, one * most], ":", color="gray", label="ideal (n x 1 worker)")
    ax.axvline(res["cores"], color="red", alpha=0.3, label=f"{res['cores']} cores here")
    ax.set_xlabel("workers")
    ax.set_ylabel("seeds/s")
    ax.set_title(f"synthetic-{res['nodes']}, GraphSAGE 3x256, fan-outs 15,10,5")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def print_speed(rows: list[dict[str, Any]], peer: Optional[dict[str, Any]], nodes: int, rounds: int) -> None:
    base = rows[0]["seeds_per_s"]
    print(f"\nThroughput on synthetic-{nodes}: GraphSAGE 3x256, fan-outs 15,10,5, batch 1024 per worker, "
          f"1 thread per worker; medians of {rounds} alternating rounds")
    print(f"{'system':<34}{'seeds/s':>10}{'vs 1 worker':>13}{'hidden':>8}{'MiB sent/epoch':>16}"
          f"{'peak RSS/worker':>17}   runs")
    listed = [(peer["system"], peer, "", "")] if peer else []
    for r in rows:
        hidden = "" if r["hidden_fraction"] is None else f"{100 * r['hidden_fraction']:.0f}%"
        mib = f"{sum(r['bytes_sent'].values()) / 2**20:,.1f}"
        listed.append((f"graphdist {r['workers']} worker{'s' if r['workers'] > 1 else ''} --sync {r['sync']}", r,
                       hidden, mib))
    for name, r, hidden, mib in listed:
        rss = f"{r['peak_rss_bytes'] / 2**30:.2f} GiB" if r.get("peak_rss_bytes") else ""
        spread = " ".join(f"{v:,.0f}" for v in r.get("runs", []))
        print(f"{name:<34}{r['seeds_per_s']:>10,.0f}{r['seeds_per_s'] / base:>12.2f}x{hidden:>8}{mib:>16}"
              f"{rss:>17}   {spread}")
    if peer:
        ratio = base / peer["seeds_per_s"]
        print(f"graphdist 1 worker / DGL: {ratio:.2f}x seeds/s (target >= 2.0x: {'ok' if ratio >= 2.0 else 'MISSED'})")
        if peer.get("peak_rss_bytes") and rows[0].get("peak_rss_bytes"):
            mem = rows[0]["peak_rss_bytes"] / peer["peak_rss_bytes"]
            print(f"graphdist 1 worker / DGL: {mem:.2f}x peak RSS (target <= 1.0x: {'ok' if mem <= 1.0 else 'MISSED'})")
    dwbp = next((r for r in rows if r["workers"] == 2 and r["sync"] == "dwbp"), None)
    if dwbp:
        print(f"2 workers (dwbp) / 1 worker: {dwbp['seeds_per_s'] / base:.2f}x (target >= 1.8x)")


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--accuracy", action="store_true", help="accuracy vs worker count on cora and pubmed")
    p.add_argument("--speed", action="store_true", help="throughput: 1 worker vs 2 workers x 3 sync modes")
    p.add_argument("--high-degree", action="store_true",
                   help="sampled vs full-neighbour GCN on a mean-degree-32 graph (with --baseline: its sampled GCN too)")
    p.add_argument("--high-degree-nodes", type=int, default=HIGH_DEGREE_GRAPH["num_nodes"],
                   help=f"nodes of the --high-degree graph (default {HIGH_DEGREE_GRAPH['num_nodes']})")
    p.add_argument("--peers", action="store_true", help="also train the same workload with DGL 2.1")
    p.add_argument("--compression", action="store_true",
                   help="accuracy of --compress variants against none (datasets default pubmed, synthetic-100k)")
    p.add_argument("--compress", default="none,fp16,bf16,int8", help="variants of --compression")
    p.add_argument("--datasets", nargs="+", default=None, help="default cora pubmed (--compression: pubmed "
                   "synthetic-100k)")
    p.add_argument("--model", default="gcn", choices=["gcn", "sage", "gat"], help="model of the accuracy runs")
    p.add_argument("--workers", nargs="+", type=int, default=[1, 2, 4])
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--epochs", type=int, default=ACCURACY_EPOCHS,
                   help=f"epochs of each accuracy run (default {ACCURACY_EPOCHS}; the targets assume it)")
    p.add_argument("--nodes", type=int, default=1_000_000)
    p.add_argument("--steps", type=int, default=30, help="steps per epoch in the speed runs")
    p.add_argument("--syncs", default="dwbp,ddp,blocking", help="sync modes of the 2-worker speed runs")
    p.add_argument("--baseline", metavar="DIR",
                   help="with --speed: alternate against this checkout of another commit (git worktree add DIR REV)")
    p.add_argument("--pairs", type=int, default=5, help="alternating pairs with --baseline (default 5)")
    p.add_argument("--inference", action="store_true",
                   help="evaluation time (exact layer-at-a-time inference), 1 and 2 workers; with --peers DGL's; "
                        "with --baseline another checkout's")
    p.add_argument("--scaling", action="store_true",
                   help="seeds/s for 1, 2, 4 workers (--workers) and 2 emulated hosts x 1 and x 2 (root), with a PNG")
    p.add_argument("--scaling-rate", default="1gbit", help="--scaling: the emulated hosts' link rate (none: local runs only)")
    p.add_argument("--png", default=str(REPO / "bench" / "results" / "scaling.png"), help="--scaling: the plot")
    p.add_argument("--rounds", type=int, default=3,
                   help="--speed/--peers: alternating rounds of every system, medians reported (default 3)")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                   help="--speed: the runs' --precision (default fp32; run both to compare)")
    p.add_argument("--out", default=str(REPO / "bench" / "results" / "train.json"))
    args = p.parse_args(argv)
    if args.datasets is None:
        args.datasets = ["pubmed", "synthetic-100k"] if args.compression else ["cora", "pubmed"]
    if not (args.accuracy or args.speed or args.peers or args.high_degree or args.compression or args.scaling
            or args.inference):
        args.accuracy = args.speed = True
    result: dict[str, Any] = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "nproc": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="graphdist-bench-train-") as tmp_name:
        tmp = Path(tmp_name)
        parts = (("accuracy", bench_accuracy, print_accuracy), ("compression", bench_compression, print_compression),
                 ("high_degree", bench_high_degree, print_high_degree),
                 ("inference", bench_inference, print_inference), ("scaling", bench_scaling, print_scaling))
        for key, bench, show in parts:  # the JSON key is the flag's name
            if getattr(args, key):
                result[key] = bench(args, tmp)
                show(result[key])
        if args.scaling:
            plot_scaling(result["scaling"], Path(args.png))
            print(f"wrote {args.png}")
        if args.speed and args.baseline:
            result["baseline"] = bench_baseline(args, tmp)
            print_baseline(result["baseline"])
            rows, peer = result["baseline"]["this_rows"], None
        elif args.speed or (args.peers and not args.inference):
            rows, peer = bench_speed(args, tmp)
        if args.speed or (args.peers and not args.inference):
            result["speed"] = {"nodes": args.nodes, "steps": args.steps, "rounds": args.rounds, "rows": rows,
                               "peer": peer}
            print_speed(rows, peer, args.nodes, args.rounds)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
