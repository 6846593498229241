"""Link prediction (``--task link``): graphdist on 1, 2 and 4 workers against a single-process PyG reference.

Both sides train on the same edge split: the reference calls ``partition.edges.split_edges`` on the
loaded graph with the run's seed and the default fractions, exactly as graphdist's on-the-fly
partitioning does (and the bench checks, after every graphdist run, that the partition holds the
same train/val/test edges and stored negatives). The recipe is graphdist's defaults, read from
``TrainConfig`` (one owner per number): GraphSAGE 2 x 128, mean aggregation, ReLU + dropout 0.5
between the layers, MLP decoder over ``h_u * h_v``, Adam lr 0.005, 512 positive edges per step
(globally) with 1 uniform negative each (same source), BCE with logits, raw features.

- The reference (:func:`reference_run`) is plain PyG + torch: ``torch_geometric.nn.SAGEConv``
  (mean, root weight, bias, no normalisation: graphdist's ``SAGELayer`` is equal to it), full
  neighbourhoods on the message-passing graph at every step (no sampling), one process, one thread.
- graphdist runs through ``graphdist.train(None, dataset=..., task="link", ...)`` with fan-outs
  10,5 (the default; ``--fanouts=-1,-1`` gives it full neighbourhoods, to tell sampling from a bug).
- Both evaluate the same way: every node embedded in eval mode; AUC of all val/test positives
  against all their stored negatives (``graphdist.trainers.link.roc_auc``), MRR and Hits@10 of
  each positive among its own 100 negatives (``rank_metrics``). Test metrics are read at the
  best-``val_auc`` epoch (first on ties, as ``result.best``) and at the last epoch.

Seeds are paired (seed s for the reference and for every worker count: the same split, the same
stored negatives); within a seed the runs alternate order (reference first on even seeds, last on
odd ones) so that drift on a shared machine hits both sides. Differences are means of paired
differences in AUC points (x100), with 2 standard errors of those differences.

Targets: graphdist 1 worker within 1 point of the PyG reference; 2 and 4 workers within 1 point of
1 worker (best-epoch test AUC, |mean paired difference| <= 1); cora with the defaults and 5
epochs: test AUC >= 0.90 for every worker count.

Epochs per dataset (``--epochs`` overrides): 5 on both, graphdist's default. cora: the target is
stated at 5 epochs (9 steps of 512 edges per epoch, 45 steps: AUC still rises, so this also
compares how fast each side learns). pubmed: 74 steps per epoch; in a 10-epoch trial val AUC levels
off by epoch 5-6 and drifts down after, so 5 epochs compares converged models.

Run book (2 CPU cores; graphdist's runs use 1 thread per worker, the reference 1 thread):
    export GRAPHDIST_DATA=/path/to/datasets   # cora.npz, pubmed.npz
    python bench/bench_link.py --datasets cora pubmed --seeds 5 --workers 1 2 4   # ~25 min
    python bench/bench_link.py --datasets cora --seeds 5                          # ~3 min
    python bench/bench_link.py --datasets cora --seeds 5 --fanouts=-1,-1          # graphdist without sampling
    python bench/bench_link.py --datasets cora --seeds 1 --epochs 1 --workers 1 2 # seconds
Results: bench/results/bench_link.json (git-ignored); each run's log in a temporary directory,
shown when a run fails.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
sys.path.insert(0, str(REPO))

# Epochs per dataset when --epochs is not given (the module doc says why); others: TrainConfig's.
EPOCHS = {"cora": 5, "pubmed": 5}
WITHIN = 1.0  # AUC points: graphdist vs the reference, and W workers vs 1 worker
CORA_TARGET = 90.0  # test AUC (%) on cora with the defaults and 5 epochs
_SCORE_CHUNK = 2048  # held-out edges scored at once (bounds the [chunk * K, H] negatives' embeddings)


def recipe() -> dict[str, Any]:
    """graphdist's defaults for ``--task link`` (``TrainConfig``), which the reference copies."""
    from graphdist.config import TrainConfig

    d = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    keys = ("model", "hidden", "layers", "fanouts", "dropout", "batch_size", "lr", "weight_decay", "num_negatives",
            "neg_sampling", "decoder", "eval_negatives", "hits_k", "edge_split", "feature_norm", "epochs")
    out = {k: d[k] for k in keys}
    out["fanouts"], out["edge_split"] = list(out["fanouts"]), list(out["edge_split"])
    # The reference implements these settings only; a changed default must be mirrored there first.
    expected = {"model": "sage", "decoder": "mlp", "neg_sampling": "uniform", "feature_norm": "none"}
    wrong = {k: out[k] for k, v in expected.items() if out[k] != v}
    if wrong:
        raise SystemExit(f"bench_link: the reference implements {expected}; TrainConfig's defaults are now {wrong}")
    return out


# ------------------------------------------------------------- the reference


def reference_model(in_dim: int, r: dict[str, Any]) -> Any:
    """PyG GraphSAGE encoder + graphdist's MLP decoder, as one ``nn.Module``."""
    import torch
    import torch.nn.functional as F
    from torch import nn
    from torch_geometric.nn import SAGEConv

    class Reference(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            dims = [in_dim] + [r["hidden"]] * r["layers"]
            # PyG's defaults: aggr mean, root_weight=True (lin_r, no bias), lin_l with bias,
            # normalize=False: graphdist's SAGELayer computes the same (SAGELayer.load_sageconv).
            self.convs = nn.ModuleList(SAGEConv(dims[i], dims[i + 1], aggr="mean") for i in range(r["layers"]))
            h = r["hidden"]
            self.mlp = nn.Sequential(nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 1))

        def embed(self, x: torch.Tensor, adj_t: torch.Tensor) -> torch.Tensor:
            for i, conv in enumerate(self.convs):
                x = conv(x, adj_t)
                if i < len(self.convs) - 1:  # no input dropout, none after the last layer: as graphdist
                    x = F.dropout(F.relu(x), p=r["dropout"], training=self.training)
            return x

        def score(self, h_u: torch.Tensor, h_v: torch.Tensor) -> torch.Tensor:
            return self.mlp(h_u * h_v).squeeze(-1)

    return Reference()


def reference_scores(model: Any, h: Any, pos_edges: Any, negatives: Any) -> tuple[Any, Any]:
    """Logits of held-out edges ``[E]`` and of their stored negatives ``[E, K]``."""
    import torch

    e, k = pos_edges.shape[1], negatives.shape[1]
    pos, neg = torch.empty(e), torch.empty(e, k)
    for start in range(0, e, _SCORE_CHUNK):
        s = slice(start, start + _SCORE_CHUNK)
        h_u = h[pos_edges[0, s]]
        pos[s] = model.score(h_u, h[pos_edges[1, s]])
        neg[s] = model.score(h_u.repeat_interleave(k, dim=0), h[negatives[s].reshape(-1)]).view(-1, k)
    return pos, neg


def reference_evaluate(model: Any, x: Any, adj_t: Any, split: Any, hits_k: int) -> dict[str, float]:
    """graphdist's metrics of the val and test edges, from full-graph embeddings in eval mode."""
    import torch

    from graphdist.trainers.link import rank_metrics, roc_auc

    model.eval()
    out: dict[str, float] = {}
    with torch.no_grad():
        h = model.embed(x, adj_t)
        for name in ("val", "test"):
            pos_edges = torch.from_numpy(getattr(split, name))
            negatives = torch.from_numpy(getattr(split, f"{name}_neg"))
            pos, neg = reference_scores(model, h, pos_edges, negatives)
            reciprocal, hits, count = rank_metrics(pos, neg, hits_k)
            out.update({f"{name}_auc": roc_auc(pos, neg.reshape(-1)), f"{name}_mrr": reciprocal / count,
                        f"{name}_hits@{hits_k}": hits / count})
    return out


def reference_run(graph: Any, seed: int, epochs: int, r: Optional[dict[str, Any]] = None) -> list[dict[str, Any]]:
    """Single-process full-neighbour GraphSAGE link prediction in plain PyG on graphdist's split.

    Args:
        graph: the loaded graph (``graphdist.data.load_graph``), original ids.
        seed: seeds the split (as graphdist's partitioning does), the initialisation, the
            shuffle and the training negatives.
        epochs: passes over the train edges.
        r: the recipe (default :func:`recipe`).

    Returns:
        One record per epoch: ``epoch``, ``loss``, ``steps``, ``epoch_time_s``, ``eval_time_s`` and
        graphdist's metric names (``val_auc``, ``test_auc``, ``test_mrr``, ``test_hits@10``, ...).
    """
    import torch
    import torch.nn.functional as F
    from torch_geometric.utils import to_torch_csr_tensor

    from partition.edges import split_edges

    r = r or recipe()
    mp, split = split_edges(graph, r["edge_split"], seed, r["eval_negatives"])
    n, k = mp.num_nodes, int(r["num_negatives"])
    x = mp.x.to(torch.float32)  # --feature-norm none: raw features
    # adj_t[dst, src] of the message-passing graph: SAGEConv aggregates each row (CSR: a sparse matmul).
    with warnings.catch_warnings():  # torch's "sparse CSR is beta" notes, once per run
        warnings.simplefilter("ignore", UserWarning)
        adj_t = to_torch_csr_tensor(mp.edge_index().flip(0), size=(n, n))
    torch.manual_seed(seed)
    model = reference_model(x.shape[1], r)
    optimizer = torch.optim.Adam(model.parameters(), lr=r["lr"], weight_decay=r["weight_decay"])
    gen = torch.Generator().manual_seed(seed)
    train = torch.from_numpy(split.train)
    history = []
    for epoch in range(1, epochs + 1):
        t0 = time.perf_counter()
        model.train()
        losses = []
        batches = torch.randperm(train.shape[1], generator=gen).split(int(r["batch_size"]))
        for ids in batches:
            u, v = train[:, ids]
            w = torch.randint(0, n, (u.numel() * k,), generator=gen)  # uniform, unchecked: as LinkSampler
            src, dst = torch.cat([u, u.repeat_interleave(k)]), torch.cat([v, w])
            labels = torch.cat([torch.ones(u.numel()), torch.zeros(u.numel() * k)])
            h = model.embed(x, adj_t)  # every node, every step: no sampling
            loss = F.binary_cross_entropy_with_logits(model.score(h[src], h[dst]), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
        t1 = time.perf_counter()
        metrics = reference_evaluate(model, x, adj_t, split, int(r["hits_k"]))
        history.append({"epoch": epoch, "loss": statistics.mean(losses), "steps": len(batches),
                        "epoch_time_s": t1 - t0, "eval_time_s": time.perf_counter() - t1, **metrics})
    return history


# ------------------------------------------------------------- graphdist


@contextlib.contextmanager
def output_to(path: Path) -> Iterator[None]:
    """File descriptors 1 and 2 (this process's and every spawned worker's) go to ``path`` for the block."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    try:
        with open(path, "ab") as log:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            try:
                yield
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])


def graphdist_run(dataset: str, workers: int, seed: int, epochs: int, run_dir: Path,
                  fanouts: Optional[Sequence[int]]) -> tuple[list[dict[str, Any]], dict[str, Any], Path]:
    """``graphdist.train`` with the defaults; returns the history, ``result.best`` and the partition directory."""
    import yaml

    import graphdist as gd

    options: dict[str, Any] = {"fanouts": tuple(fanouts)} if fanouts else {}
    log = run_dir.with_suffix(".log")
    try:
        with output_to(log):
            res = gd.train(None, dataset=dataset, task="link", num_workers=workers, epochs=epochs, seed=seed,
                           run_dir=str(run_dir), log_interval=100000, **options)
    except Exception as exc:
        tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
        raise RuntimeError(f"graphdist {dataset} workers={workers} seed={seed} failed: {exc}\n{tail}") from exc
    parts = Path(yaml.safe_load((run_dir / "config.yaml").read_text())["partitions"])
    return res.history, res.best, parts


def check_same_split(graph: Any, seed: int, parts: Path, r: dict[str, Any], done: dict[tuple[str, int], bool],
                     key: tuple[str, int]) -> None:
    """Raises unless the partition at ``parts`` holds the reference's split (mapped back to original ids)."""
    import numpy as np

    from partition.edges import load_link_edges, split_edges
    from partition.format import read_meta

    if key in done:
        return
    meta = read_meta(parts)
    orig = np.load(parts / "orig_ids.npy")
    edges = load_link_edges(parts, range(int(meta["num_parts"])), meta)
    _, split = split_edges(graph, r["edge_split"], seed, r["eval_negatives"])

    def rows(pairs: np.ndarray, negatives: Optional[np.ndarray] = None) -> np.ndarray:
        table = pairs.T if negatives is None else np.concatenate([pairs.T, negatives], axis=1)
        return np.unique(table, axis=0)

    same = np.array_equal(rows(orig[edges.train.numpy()]), rows(split.train))
    for name in ("val", "test"):
        mine = rows(orig[getattr(edges, name).numpy()], orig[getattr(edges, f"{name}_neg").numpy()])
        same = same and np.array_equal(mine, rows(getattr(split, name), getattr(split, f"{name}_neg")))
    if not same:
        raise RuntimeError(f"{parts}: its edge split differs from split_edges(seed={seed}) on the loaded graph; "
                           f"the comparison would not be paired")
    done[key] = True


# ------------------------------------------------------------- the bench


def summarise(history: list[dict[str, Any]], best: dict[str, Any], hits_k: int, wall_s: float) -> dict[str, Any]:
    """One run: the test metrics at the best-val_auc epoch and at the last, AUC per epoch, seconds."""
    keys = ("test_auc", "test_mrr", f"test_hits@{hits_k}")
    last = history[-1]
    return {"best_epoch": best["epoch"], "best_val_auc": best["val_auc"], **{k: best[k] for k in keys},
            **{f"last_{k}": last[k] for k in keys}, "wall_s": wall_s,
            "train_eval_s": sum(h["epoch_time_s"] + (h.get("eval_time_s") or 0.0) for h in history),
            "val_auc_by_epoch": [h["val_auc"] for h in history], "test_auc_by_epoch": [h["test_auc"] for h in history],
            "loss_by_epoch": [h.get("loss") for h in history]}


def run_key(workers: Optional[int]) -> str:
    return "reference" if workers is None else f"graphdist {workers} worker{'s' if workers > 1 else ''}"


def bench(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    import torch

    from graphdist.data import load_graph
    from graphdist.runlog import best_epoch  # the reference's best epoch is chosen as graphdist's

    r = recipe()
    torch.set_num_threads(1)  # the reference on one thread, as each graphdist worker
    out: dict[str, Any] = {}
    checked: dict[tuple[str, int], bool] = {}
    for ds in args.datasets:
        epochs = args.epochs or EPOCHS.get(ds, r["epochs"])
        graph = load_graph(ds)
        runs: dict[str, list[dict[str, Any]]] = {run_key(None): []}
        runs.update({run_key(w): [] for w in args.workers})
        for seed in range(args.seeds):
            order: list[Optional[int]] = [None, *args.workers]
            if seed % 2:
                order.reverse()
            for workers in order:
                t0 = time.perf_counter()
                if workers is None:
                    history = reference_run(graph, seed, epochs, r)
                    row = summarise(history, best_epoch(history), r["hits_k"], time.perf_counter() - t0)
                else:
                    run_dir = tmp / f"{ds}-w{workers}-s{seed}"
                    history, best, parts = graphdist_run(ds, workers, seed, epochs, run_dir, args.fanouts)
                    row = summarise(history, best, r["hits_k"], time.perf_counter() - t0)
                    check_same_split(graph, seed, parts, r, checked, (ds, seed))
                row["seed"] = seed
                runs[run_key(workers)].append(row)
                print(f"  {ds} seed {seed} {run_key(workers):<20} test AUC {100 * row['test_auc']:.2f} "
                      f"(epoch {row['best_epoch']}), last {100 * row['last_test_auc']:.2f}, "
                      f"MRR {row['test_mrr']:.3f}, {row['wall_s']:.1f} s", flush=True)
        out[ds] = {"epochs": epochs, "num_nodes": graph.num_nodes, "runs": runs}
    return out


def paired(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """Mean of the paired differences ``a - b`` (x100: AUC points) and 2 standard errors (nan with one pair)."""
    d = [100.0 * (x - y) for x, y in zip(a, b)]
    se2 = 2 * statistics.stdev(d) / math.sqrt(len(d)) if len(d) > 1 else float("nan")
    return statistics.mean(d), se2


def verdict(diff: float) -> str:
    return "ok" if abs(diff) <= WITHIN else "MISSED"


def print_tables(res: dict[str, Any]) -> dict[str, Any]:
    """The table per dataset and the target checks; returns the checks (for the JSON)."""
    hits_k = res["recipe"]["hits_k"]
    defaults = res["fanouts"] is None
    fanouts = ",".join(map(str, res["fanouts"] or res["recipe"]["fanouts"]))
    checks: dict[str, Any] = {}
    for ds, d in res["datasets"].items():
        runs = d["runs"]
        ref = runs["reference"]
        one = runs.get(run_key(1))
        print(f"\n{ds}: link prediction, test metrics (AUC in %) at the best-val_auc epoch and the last; "
              f"{len(ref)} paired seeds, {d['epochs']} epochs; graphdist fan-outs {fanouts}, reference full "
              f"neighbourhoods")
        print(f"{'run':<22}{'AUC':>7}{'std':>6}{'vs ref':>8}{'2 SE':>6}{'vs 1w':>7}{'2 SE':>6}"
              f"{'last':>8}{'vs ref':>8}{'2 SE':>6}{'MRR':>7}{f'Hits@{hits_k}':>9}{'s/run':>7}")
        for key, rows in runs.items():
            auc = [x["test_auc"] for x in rows]
            last = [x["last_test_auc"] for x in rows]
            std = 100 * statistics.pstdev(auc)
            cells = [f"{key:<22}{100 * statistics.mean(auc):>7.2f}{std:>6.2f}"]
            if key == "reference":
                cells.append(f"{'':>8}{'':>6}{'':>7}{'':>6}{100 * statistics.mean(last):>8.2f}{'':>8}{'':>6}")
            else:
                dr, sr = paired(auc, [x["test_auc"] for x in ref])
                cells.append(f"{dr:>+8.2f}{sr:>6.2f}")
                if one is not None and key != run_key(1):
                    d1, s1 = paired(auc, [x["test_auc"] for x in one])
                    cells.append(f"{d1:>+7.2f}{s1:>6.2f}")
                else:
                    cells.append(f"{'':>7}{'':>6}")
                dl, sl = paired(last, [x["last_test_auc"] for x in ref])
                cells.append(f"{100 * statistics.mean(last):>8.2f}{dl:>+8.2f}{sl:>6.2f}")
            cells.append(f"{statistics.mean(x['test_mrr'] for x in rows):>7.3f}"
                         f"{statistics.mean(x[f'test_hits@{hits_k}'] for x in rows):>9.3f}"
                         f"{statistics.mean(x['wall_s'] for x in rows):>7.1f}")
            print("".join(cells))
        mine: list[dict[str, Any]] = []
        if one is not None:
            diff, se2 = paired([x["test_auc"] for x in one], [x["test_auc"] for x in ref])
            mine.append({"check": "GraphSAGE 1 worker within 1 point of the PyG reference", "diff": diff,
                         "two_se": se2, "ok": verdict(diff) == "ok"})
            for key in runs:
                if key in ("reference", run_key(1)):
                    continue
                diff, se2 = paired([x["test_auc"] for x in runs[key]], [x["test_auc"] for x in one])
                mine.append({"check": f"{key} within 1 point of 1 worker", "diff": diff, "two_se": se2,
                             "ok": verdict(diff) == "ok"})
        if ds == "cora" and d["epochs"] == 5 and defaults:
            for key in runs:
                if key != "reference":
                    mean = 100 * statistics.mean(x["test_auc"] for x in runs[key])
                    mine.append({"check": f"cora with the defaults and 5 epochs: {key} test AUC >= {CORA_TARGET:.0f}",
                                 "value": mean, "ok": mean >= CORA_TARGET})
        for c in mine:
            value = (f"{c['diff']:+.2f} (2 SE {c['two_se']:.2f})" if "diff" in c else f"{c['value']:.2f}")
            print(f"  {c['check']}: {value}: {'ok' if c['ok'] else 'MISSED'}")
        checks[ds] = mine
    return checks


def machine() -> dict[str, Any]:
    import subprocess

    import torch
    import torch_geometric

    try:  # the code measured: other work may land in the tree while a long bench runs
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True,
                                timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
            "torch": torch.__version__, "torch_geometric": torch_geometric.__version__, "commit": commit}


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog="e.g. python bench/bench_link.py --datasets cora --seeds 1 --epochs 1 "
                                       "--workers 1 2", formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--datasets", nargs="+", default=["cora", "pubmed"], help="default cora pubmed")
    p.add_argument("--seeds", type=int, default=5, help="paired seeds 0..N-1 (default 5)")
    p.add_argument("--epochs", type=int, default=None,
                   help=f"epochs of every run (default per dataset: {EPOCHS}; others TrainConfig's)")
    p.add_argument("--workers", nargs="+", type=int, default=[1, 2, 4], help="graphdist worker counts (default 1 2 4)")
    p.add_argument("--fanouts", default=None,
                   help="graphdist's fan-outs, e.g. --fanouts=-1,-1 (full neighbourhoods); default TrainConfig's")
    p.add_argument("--out", default=str(RESULTS / "bench_link.json"))
    args = p.parse_args(argv)
    if args.seeds < 1 or (args.epochs is not None and args.epochs < 1) or min(args.workers) < 1:
        p.error(f"--seeds, --epochs and --workers must be >= 1 (got {args.seeds}, {args.epochs}, {args.workers})")
    if args.fanouts is not None:
        try:
            args.fanouts = [int(f) for f in args.fanouts.split(",")]
        except ValueError:
            p.error(f"--fanouts must be comma-separated integers, e.g. 10,5 or -1,-1 (got {args.fanouts!r})")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    result: dict[str, Any] = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": machine(),
                              "recipe": recipe(), "seeds": args.seeds, "workers": args.workers,
                              "fanouts": args.fanouts}
    with tempfile.TemporaryDirectory(prefix="graphdist-bench-link-") as name:
        result["datasets"] = bench(args, Path(name))
    result["checks"] = print_tables(result)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = out.with_name(out.name + ".tmp")
    tmp_out.write_text(json.dumps(result, indent=1))
    os.replace(tmp_out, out)
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
