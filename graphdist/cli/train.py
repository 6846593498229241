"""graphdist-train: train a GNN on a partitioned graph, locally or under torchrun/SLURM.

Run book:

    # one machine, the embedded default: GraphSAGE on a generated graph, 2 local workers
    graphdist-train
    # a dataset, partitioned on the fly into the cache
    graphdist-train --dataset cora --num-workers 2 --epochs 20
    # an existing partition directory
    graphdist-partition --dataset pubmed --num-parts 4 --out parts/pubmed-4
    graphdist-train --partitions parts/pubmed-4 --num-workers 4 --model sage --fanouts 15,10
    # two machines (same flags; torchrun sets RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT)
    torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint host0:29400 \\
        -m graphdist.cli.train --partitions parts/pubmed-4
    # resume, predict
    graphdist-train --resume runs/20261129-120000
    graphdist-train --predict runs/20261129-120000

Precedence: CLI flag > GRAPHDIST_<FIELD> environment variable > --config YAML > default.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

EXIT_CODES = """exit codes:
  0    done
  1    failed after the workers started (a worker raised or died, a collective timed out)
  2    refused before any worker started: a bad flag, GRAPHDIST_<NAME> variable or --config key,
       missing data or partitions, a resume that would change the model, a run directory in use
  130  interrupted (Ctrl-C); the last checkpoint is intact: graphdist-train --resume RUN continues
"""

EPILOG = """examples:
  graphdist-train                                   # generated graph, 2 workers, a few minutes
  graphdist-train --dataset cora --epochs 20 --num-workers 2
  graphdist-train --partitions parts/pubmed-4 --num-workers 4 --sync blocking
  graphdist-train --config run.yaml --lr 0.01       # flags override the file
  graphdist-train --resume runs/<name>              # continue from the last checkpoint
  graphdist-train --predict runs/<name>             # predictions + embeddings by original node id

environment:
  GRAPHDIST_DATA    :-separated dataset directories (read only); GRAPHDIST_CACHE where derived files go
  GRAPHDIST_<NAME>  any option, e.g. GRAPHDIST_EPOCHS=20 (flags override it; it overrides --config)
  GRAPHDIST_LOG     debug (what --verbose prints), info (default) or warning

""" + EXIT_CODES


def _add(group: argparse._ArgumentGroup, flag: str, **kwargs: Any) -> None:
    """A dashed flag with its underscore alias (torchrun's convention); unset = None."""
    names = [flag]
    if "-" in flag[2:]:
        names.append("--" + flag[2:].replace("-", "_"))
    group.add_argument(*names, default=None, **kwargs)


def _switch(group: argparse._ArgumentGroup, flag: str, on: str, off: str) -> None:
    """``--X`` (True) and ``--no-X`` (False), one or the other; unset = None (auto)."""
    dest = flag[2:].replace("-", "_")
    pair = group.add_mutually_exclusive_group()
    pair.add_argument(flag, dest=dest, action="store_const", const=True, default=None, help=on)
    pair.add_argument("--no-" + flag[2:], dest=dest, action="store_const", const=False, default=None, help=off)


def build_parser() -> argparse.ArgumentParser:
    from graphdist.cli.args import OneLineParser
    from graphdist.config import (ALLREDUCE_MODES, COMPRESS_MODES, DECODERS, FEATURE_NORMS, MODELS, NEGATIVES,
                                  PARTITION_METHODS, PRECISIONS, SACP_MODES, SAMPLERS, STRATEGIES, SYNC_MODES, TASKS,
                                  TrainConfig)

    default = TrainConfig.__dataclass_fields__  # the defaults shown in --help come from the config

    def d(name: str) -> str:
        value = default[name].default
        return ",".join(map(str, value)) if isinstance(value, tuple) else str(value)
    p = OneLineParser(
        prog="graphdist-train",
        description="Train a GNN with distributed sampling and wait-free layer-wise gradient sync.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    data = p.add_argument_group("Data")
    _add(data, "--dataset", metavar="NAME|PATH",
         help="cora, citeseer, pubmed, ogbn-arxiv, ogbn-products, ogbn-papers100M, synthetic-<N> "
              "(e.g. synthetic-100k) or a path (default synthetic-100k)")
    _add(data, "--partitions", metavar="DIR", help="an existing partition directory (graphdist-partition)")
    _add(data, "--partition-method", choices=list(PARTITION_METHODS),
         help=f"how --dataset is partitioned on the fly (default {d('partition_method')})")
    _add(data, "--task", choices=list(TASKS),
         help="node: node classification (multi-label when y is a [N, C] 0/1 matrix: BCE, micro-F1); link: "
              "link prediction on a partition made with --task link (held-out edges, AUC/MRR/Hits@K) "
              f"(default {d('task')})")
    link = p.add_argument_group("Link prediction (--task link; --strategy minibatch)")
    _add(link, "--edge-split", metavar="TRAIN,VAL,TEST",
         help=f"shares of the edges when --dataset is partitioned on the fly (default {d('edge_split')})")
    _add(link, "--eval-negatives", type=int, metavar="K",
         help=f"stored negatives per val/test edge, on the fly (default {d('eval_negatives')})")
    _add(link, "--num-negatives", type=int, help=f"negatives per positive edge in training (default {d('num_negatives')})")
    _add(link, "--neg-sampling", choices=list(NEGATIVES),
         help=f"training negatives: uniform over nodes, or degree ~ degree^0.75 (default {d('neg_sampling')})")
    _add(link, "--decoder", choices=list(DECODERS),
         help=f"pair scorer: dot <h_u, h_v>, or mlp over h_u * h_v (default {d('decoder')})")
    _add(link, "--hits-k", type=int, metavar="K", help=f"report Hits@K (default {d('hits_k')})")
    model = p.add_argument_group("Model")
    _add(model, "--model", choices=list(MODELS), help=f"reference model (default {d('model')})")
    _add(model, "--hidden", type=int, help=f"hidden width (default {d('hidden')})")
    _add(model, "--layers", type=int, help=f"GNN layers (default {d('layers')})")
    _add(model, "--sampler", choices=tuple(SAMPLERS),
         help="how training batches are drawn: " + "; ".join(f"{k} ({v})" for k, v in SAMPLERS.items())
              + f" (default {d('sampler')})")
    _add(model, "--fanouts", metavar="K1,K2,..",
         help=f"neighbours per layer from the seeds outward, -1 = all (default {d('fanouts')})")
    _add(model, "--dropout", type=float, help=f"dropout (default {d('dropout')})")
    _add(model, "--heads", type=int, help=f"GAT attention heads (default {d('heads')})")
    _add(model, "--num-bases", type=int, metavar="B",
         help="R-GCN basis matrices per layer (default 0: half the relations, 2 to 8)")
    _add(model, "--relation-fanouts", metavar="REL=K1,K2;..",
         help="typed graphs: fan-outs of the named relations, replacing --fanouts for them, e.g. "
              "'cites=15,5;writes=10,5' (0: skip the relation, -1: all; docs/hetero.md)")
    _add(model, "--feature-norm", choices=list(FEATURE_NORMS),
         help="row: divide each feature row by its L1 norm (its sum for non-negative features), as usual for cora/citeseer/pubmed (default none)")
    opt = p.add_argument_group("Optimisation")
    _add(opt, "--batch-size", type=int, help=f"seeds (positive edges with --task link) per step over all workers (default {d('batch_size')})")
    _add(opt, "--epochs", type=int, help=f"epochs (default {d('epochs')})")
    _add(opt, "--max-steps", type=int, help="cap on steps per epoch (default 0 = every train node once)")
    _add(opt, "--lr", type=float, help=f"Adam learning rate (default {d('lr')})")
    _add(opt, "--weight-decay", type=float, help=f"Adam weight decay (default {d('weight_decay')})")
    _add(opt, "--precision", choices=list(PRECISIONS),
         help="bf16: the training steps' dense products in bfloat16 on float32 parameters (1.2-2.3x faster "
              "products on CPUs with AVX512_BF16/AMX, and on GPUs); fp16: float16 with dynamic loss scaling, "
              "for GPUs without bfloat16 (V100, T4); gradients, optimizer and evaluation stay float32 "
              "(default fp32)")
    sync = p.add_argument_group("Sync")
    _add(sync, "--strategy", choices=list(STRATEGIES),
         help=f"training strategy (default {d('strategy')})")
    _add(sync, "--sync", choices=list(SYNC_MODES),
         help="gradient sync: " + "; ".join(f"{k}: {v.summary}" for k, v in SYNC_MODES.items())
         + f" (default {d('sync')})")
    _add(sync, "--allreduce", choices=list(ALLREDUCE_MODES),
         help="how gradients (and averaged parameters) are summed: "
              + "; ".join(f"{k}: {v}" for k, v in ALLREDUCE_MODES.items())
              + f". --sync ddp keeps torch's own allreduce (default {d('allreduce')})")
    _add(sync, "--compress", choices=list(COMPRESS_MODES),
         help="gradient payloads: " + "; ".join(f"{k}: {v}" for k, v in COMPRESS_MODES.items())
              + f" (default {d('compress')})")
    _add(sync, "--sacp", choices=list(SACP_MODES),
         help="structure-aware sync: " + "; ".join(f"{k}: {v}" for k, v in SACP_MODES.items())
              + f". Exact either way (default {d('sacp')})")
    _add(sync, "--sacp-override", metavar="LAYER=SCHEME,..",
         help="force dense or sfb for named layers, e.g. layers.1.lin=sfb (debugging; names as in the log)")
    full = p.add_argument_group("Full graph (--strategy fullgraph)")
    _add(full, "--staleness", type=int,
         help=f"0: exact halo exchange each layer; 1: one step stale (PipeGCN), layers use last step's halo "
              f"embeddings and gradients while this step's travel (default {d('staleness')})")
    _add(full, "--smoothing", type=float,
         help=f"stale-buffer smoothing g: h <- g*h_old + (1-g)*h_new (default {d('smoothing')})")
    _add(full, "--boundary-sample", type=float, metavar="P",
         help=f"BNS-GCN: keep each boundary node with probability P each epoch, drop the others' edges "
              f"(default {d('boundary_sample')}: all, exact)")
    _add(full, "--max-memory", type=float, metavar="GIB",
         help="memory per worker the full-graph estimate is checked against (default: this machine's memory "
              "divided by its local workers)")
    agg = p.add_argument_group("Model aggregation (--strategy aggregation)")
    _add(agg, "--avg-every", type=int, metavar="K",
         help=f"average parameters every K steps, and at every epoch end (default {d('avg_every')})")
    _add(agg, "--avg-seconds", type=float, metavar="T", help="average every T seconds instead of every K steps")
    agg.add_argument("--avg-optimizer", action="store_const", const=True, default=None,
                     help="average the optimizer's moments too (default: they stay local)")
    agg.add_argument("--avg-overlap", action="store_const", const=True, default=None,
                     help="hide each mid-epoch average behind the next step: it lands one step late, keeping "
                          "that step's local update (Overlap-Local-SGD); the epoch's last average stays "
                          "synchronous (default: off)")
    _add(agg, "--correction-steps", type=int, metavar="S",
         help=f"LLCG: S global mini-batch steps after each average (default {d('correction_steps')})")
    place = p.add_argument_group("Placement (--strategy minibatch)")
    _add(place, "--cluster", metavar="FILE",
         help="cluster spec (YAML; see docs/placement.md#cluster-specs---cluster-specyaml): hosts, and per worker its device, threads, memory "
              "and speed. Sets --num-workers (local), --devices, the threads of each worker and the memory "
              "the full-graph check uses; graphdist-plan prints the plan it gives")
    _add(place, "--placement", choices=("auto", "profiled", "equal"),
         help="start shares: profiled (a few probe steps per worker, costs fitted, shares balanced; cached in "
              "the run directory), equal (in proportion to each part's train nodes), auto (default: profiled "
              "when workers differ in device, or in threads or speed in --cluster; else equal, which keeps "
              "runs deterministic)")
    _add(place, "--rebalance-every", type=int, metavar="R",
         help=f"every R steps, move batch share from slow workers to fast ones by their measured busy time; "
              f"unvisited seeds migrate so every train node is still seen once per epoch (default "
              f"{d('rebalance_every')}: fixed shares)")
    _add(place, "--rebalance-eps", type=float, metavar="EPS",
         help=f"rebalance only when predicted busy times differ by more than 1+EPS (default {d('rebalance_eps')})")
    system = p.add_argument_group("System")
    _add(system, "--num-workers", type=int, help=f"local workers to spawn (default {d('num_workers')}; torchrun sets its own)")
    _add(system, "--devices", metavar="D1,D2,..", help="cpu (default), or one per worker, e.g. cpu,cuda:0")
    _add(system, "--threads", type=int, help=f"torch threads per worker (default {d('threads')})")
    _add(system, "--seed", type=int, help=f"random seed (default {d('seed')})")
    _add(system, "--timeout", type=float, help=f"seconds before a collective fails instead of hanging (default {default['timeout'].default:g})")
    _add(system, "--peer-timeout", type=float, metavar="S",
         help="seconds a peer's heartbeat may stay still before this rank ends naming it (a host that died "
              f"silently), so torchrun can form the job again (default {default['peer_timeout'].default:g}; 0 = off)")
    _add(system, "--replicate", choices=("none", "structure", "graph"),
         help="what each worker holds beyond its part: none (default; remote neighbourhoods and features come "
              "from their owners), structure (the whole CSR, 8 bytes per node and edge: sampling is local), "
              "graph (CSR and features: only gradients travel). Replication lets --rebalance-every move a "
              "seed's sampling and gather work with it, not only its compute")
    _add(system, "--cache-rows", type=int,
         help="remote-feature cache rows per worker, chosen by the probability that a batch reads them (1-hop "
              "and 2-hop remote nodes): -1 (default) every remote node a batch may read while their rows fit in "
              "512 MiB per worker, the likeliest beyond (a 10M-node graph in 4 parts would need ~2.8 GB for its "
              "whole halo); 0 none; N the N likeliest")
    _switch(system, "--prefetch", on="always sample the next batch in a background thread (default: when "
            "batches wait on other workers, or the worker may use a core beyond its --threads)",
            off="sample in the training thread")
    _add(system, "--loaders", type=int, metavar="K",
         help="processes per worker that sample and gather its batches into shared memory while it trains "
              "(default: a GPU worker's share of the machine's spare cores, at most 4; 0 for a CPU worker: its "
              "prefetch thread). 1 gives the batches 0 gives; 2+ are deterministic for a given K. Where batches are "
              "sampled across parts every worker runs the largest K asked, loader k of each in a sampling group of "
              "its own")
    _add(system, "--sample-on", choices=("auto", "cpu", "device"),
         help="where batches are sampled: device (the worker's GPU holds the CSR, and the features where they fit; "
              "needs every node's CSR: one worker or --replicate structure|graph), cpu, or auto (default: device on a "
              "GPU worker whose CSR fits half its free memory). A device draws differently from the CPU: the choice "
              "is kept on resume")
    _switch(system, "--bind-cores", on="bind each worker on this machine to its own --threads cores (default: "
            "when 2+ workers' threads fill the machine's cores exactly)",
            off="let the scheduler move workers between cores")
    _add(system, "--log-interval", type=int,
         help=f"steps between progress lines, and between reads of the loss (default {d('log_interval')})")
    system.add_argument("--verbose", "-v", action="store_const", const=True, default=None,
                        help="also print the diagnostics: resolved config, topology and plan, sync wiring, bound "
                             "cores, each part's cache (GRAPHDIST_LOG=debug does the same)")
    system.add_argument("--tensorboard", action="store_const", const=True, default=None,
                        help="also write each epoch's metrics and each step's loss as TensorBoard scalars to "
                             "<run-dir>/tensorboard (rank 0; needs pip install 'graphdist[tensorboard]')")
    _switch(system, "--plots", on="draw loss_acc.png, time_breakdown.png and breakdown.png into the run directory "
            "after the last epoch (default)",
            off="skip them: about 1.2 s of CPU less at the end of a run (metrics.jsonl, which they draw, is written "
            "anyway)")
    _add(system, "--checkpoint-every", type=int,
         help=f"epochs between checkpoints; the last is always saved (default {d('checkpoint_every')})")
    _add(system, "--checkpoint-interval", metavar="Nsteps|Ts",
         help="also checkpoint inside an epoch every N steps or T seconds (--strategy minibatch), e.g. 500steps or "
              "30s: a resume, on any worker count, trains the epoch's remaining seeds once (default: epoch ends only)")
    _add(system, "--eval-every", type=int, help=f"evaluate every N epochs, and after the last (default {d('eval_every')}; 0 = never)")
    _add(system, "--run-dir", metavar="DIR", help="where metrics, checkpoints and plots go (default runs/<time>)")
    _add(system, "--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its last checkpoint")
    system.add_argument("--overwrite", action="store_const", const=True, default=None,
                        help="start a new run in a --run-dir that holds another run's checkpoint or metrics: that "
                             "record moves aside to RUN_DIR.old-<time> (nothing is deleted); without it such a "
                             "run is refused")
    system.add_argument("--inexact-resume", action="store_const", const=True, default=None,
                        help="with --resume: continue a run that cannot resume bit for bit (--avg-seconds averages at "
                             "wall-clock times no second run repeats) from its checkpoint anyway; without it such "
                             "a resume is refused")
    _add(system, "--predict", metavar="RUN_DIR", help="write predictions and embeddings of RUN_DIR's model")
    _add(system, "--checkpoint", choices=("best", "last"),
         help="what --predict loads: best (default; the best-validation epoch's model, best.pt) or last")
    _add(system, "--config", metavar="FILE", help="YAML file of options (flags override it)")
    system.add_argument("--dry-run", action="store_const", const=True, default=None,
                        help="load the data, print its statistics and the resolved config, train nothing")
    return p


def _cli_values(ns: argparse.Namespace) -> dict[str, Any]:
    values = {k: v for k, v in vars(ns).items() if v is not None and k != "config"}
    return values


def join_negative_values(argv: Sequence[str], flags: tuple[str, ...] = ("--fanouts",)) -> list[str]:
    """``--fanouts -1,-1`` as ``--fanouts=-1,-1``: argparse takes a value starting with ``-`` for a flag.

    Example:
        >>> join_negative_values(["--fanouts", "-1,-1", "--epochs", "2"])
        ['--fanouts=-1,-1', '--epochs', '2']
    """
    out: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] in flags and i + 1 < len(argv) and argv[i + 1][:2] in {f"-{d}" for d in "0123456789"}:
            out.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out


def _resolve(argv: Optional[Sequence[str]]):
    """Flags, environment and ``--config`` resolved into a ``TrainConfig``; a resume's saved config is the base
    (everything given now overrides it, and ``graphdist.resume`` refuses what may not change)."""
    return _resolve_with_origin(argv)[0]


def _resolve_with_origin(argv: Optional[Sequence[str]]):
    """``_resolve``, and where each setting not given as a flag came from (``GRAPHDIST_LR``,
    ``--config FILE: lr``), so that a later refusal can name it."""
    from graphdist.config import resolve_with_origin
    from graphdist import runlog

    ns = build_parser().parse_args(join_negative_values(sys.argv[1:] if argv is None else list(argv)))
    refuse_outside_predict(ns)
    base = runlog.read_config(ns.resume) if ns.resume else None
    return resolve_with_origin(_cli_values(ns), ns.config, base=base)


# What --predict reads besides the run directory: which checkpoint, and how much the console says.
PREDICT_FLAGS = frozenset({"predict", "checkpoint", "verbose"})


def refuse_outside_predict(ns: argparse.Namespace) -> None:
    """``--predict`` predicts with the run's own config.yaml and model, so a training flag given with it would
    change nothing: refused, as is ``--checkpoint`` (what ``--predict`` loads) without it.

    Example:
        >>> refuse_outside_predict(build_parser().parse_args(["--predict", "runs/a", "--epochs", "3"]))
        Traceback (most recent call last):
        ...
        graphdist.cli.args.UsageError: --epochs does not apply to --predict, which predicts with the run's own ...
    """
    from graphdist.cli.args import UsageError

    # named as given: a switch's False came from its --no- form
    given = [("--no-" if v is False else "--") + k.replace("_", "-") for k, v in _cli_values(ns).items()
             if k not in PREDICT_FLAGS] + (["--config"] if ns.config else [])
    if ns.predict and given:
        raise UsageError(f"{given[0]} does not apply to --predict, which predicts with the run's own config and "
                         "model: give only --checkpoint or --verbose with it")
    if not ns.predict and ns.checkpoint is not None:
        raise UsageError("--checkpoint chooses the checkpoint --predict loads: give it with --predict RUN_DIR")


def dry_run(cfg) -> None:
    from graphdist.data import load_graph

    if cfg.partitions:
        from partition.api import read_meta

        meta = read_meta(cfg.partitions)
        print(f"partitions {cfg.partitions}: {meta['num_nodes']:,} nodes, {meta['num_edges']:,} edges, "
              f"{meta['num_parts']} parts ({meta['method']})")
        return
    graph = load_graph(cfg.source)
    deg = graph.degrees().float()
    print(graph)
    print(f"degree: mean {deg.mean():.1f}, median {deg.median():.0f}, max {int(deg.max()):,}")
    print("resolved config:", cfg.to_dict())


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``graphdist-train``; returns the exit code (see ``EXIT_CODES``)."""
    from graphdist.console import logging_restored

    with logging_restored():  # called in-process (tests, a notebook): the caller's logging as it was
        return _main(argv)


def _main(argv: Optional[Sequence[str]]) -> int:
    import time

    from graphdist.console import closing_table, setup_logging, shown_path

    started_at = time.perf_counter()
    trainer = None
    origin: dict[str, str] = {}  # a refusal from resolving already names where its values came from
    try:
        cfg, origin = _resolve_with_origin(argv)
        setup_logging(None, cfg.verbose)
        if cfg.dry_run:
            dry_run(cfg)
            return 0
        if cfg.predict:
            from graphdist.predict import predict

            out = predict(cfg.predict, num_workers=None, checkpoint=cfg.checkpoint)
            print(f"predictions written to {out}")
            return 0
        from graphdist.api import Trainer

        trainer = Trainer(cfg)
        result = trainer.fit()
    except KeyboardInterrupt:
        print("graphdist-train: interrupted; workers stopped" + _resume_hint(trainer), file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 -- every error becomes one line and an exit code
        started = trainer is not None and trainer.started
        if not started and not _expected_refusal(exc):
            raise  # a bug, not a refusal: keep the traceback
        from graphdist.config import ConfigError, with_origin

        told = [with_origin(exc, origin)] if isinstance(exc, ConfigError) and not started else error_lines(exc)
        lines = [f"graphdist-train: error: {line}" for line in told]
        hint = _resume_hint(trainer) if started else ""
        if hint:
            lines.append(f"graphdist-train:{hint.lstrip(';')}")
        # One write: torchrun's agent SIGTERMs a survivor as soon as it sees a peer die, and a second
        # print could be cut off, leaving the error without the line that says what to do next.
        sys.stderr.write("\n".join(lines) + "\n")
        sys.stderr.flush()
        return 1 if started else 2
    if result.history:  # under torchrun/SLURM rank 0's; the other ranks have said all they had to
        print(closing_table(result.history, result.best, shown_path(result.run_dir),
                            wall_s=time.perf_counter() - started_at, tensorboard=trainer.config.tensorboard))
    return 0



def _expected_refusal(exc: BaseException) -> bool:
    """The errors graphdist raises on purpose before workers start (bad input, a held lock, no data)."""
    from graphdist.runlog import RunDirLocked

    return isinstance(exc, (ValueError, FileNotFoundError, OSError, RunDirLocked, RuntimeError))


def error_lines(exc: BaseException) -> list[str]:
    """What the user reads: one line (the cluster spec: one per mistake); a worker's traceback becomes
    ``worker rank R: <ExceptionType>: <message>``.

    Example:
        >>> error_lines(RuntimeError("worker rank 1 raised:\\nTraceback ...\\nValueError: bad part"))
        ['worker rank 1: ValueError: bad part']
    """
    from placement.cluster import ClusterSpecError

    text = str(exc).strip()
    if isinstance(exc, ClusterSpecError):
        return text.splitlines()
    lines = text.splitlines()
    if not lines:
        return [type(exc).__name__]
    first = lines[0]
    if first.startswith("worker rank ") and first.endswith("raised:"):
        return [f"{first[: -len(' raised:')]}: {_root_cause(text)}"]
    return [first]


def _resume_hint(trainer: Any) -> str:
    """``; continue with: graphdist-train --resume RUN`` when the run has a checkpoint to continue from."""
    from graphdist.checkpoint import CHECKPOINT_NAME

    run_dir = getattr(getattr(trainer, "config", None), "run_dir", None)
    if not run_dir or not (Path(run_dir) / CHECKPOINT_NAME).exists():
        return ""
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0) or 0)
    if attempt < int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", 0) or 0):
        return (f"; the last checkpoint is intact: torchrun restarts the job (--max-restarts), which resumes "
                f"{run_dir} by itself")
    return f"; the last checkpoint is intact, continue with: graphdist-train --resume {run_dir}"


def _root_cause(text: str) -> str:
    """The last exception line of a worker traceback (``Type: message``), module path dropped.

    Example:
        >>> _root_cause("Traceback ...\\n  File \\"x.py\\", line 1\\npartition.format.PartitionFormatError: bad meta")
        'PartitionFormatError: bad meta'
    """
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        head, sep, rest = line.partition(": ")
        if sep and not line.startswith("File ") and head.replace(".", "").replace("_", "").isalnum():
            return f"{head.rsplit('.', 1)[-1]}: {rest}"
    return lines[-1] if lines else ""


def entry() -> None:
    """The ``graphdist-train`` command: :func:`main`, then a fast exit (``graphdist.cli.args.finish``)."""
    from graphdist.cli.args import finish

    finish(main())


if __name__ == "__main__":
    entry()
