"""The one training loop: join the group, plan, build the strategy, resume, epochs, metrics, checkpoints.

``worker_main`` is what the local launcher spawns and what each torchrun/srun process
calls. Any ``Strategy`` (``trainers/base.py``) runs under it: the loop owns epochs, the
metrics record, evaluation cadence, checkpoints, plots and resume; the strategy owns how
an epoch trains. Rank 0 writes the run directory; every rank contributes its RNG and
strategy state to the checkpoint so that a resume is bit-identical.
"""

from __future__ import annotations

import logging
import math
import os
import random
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import torch

from graphdist import comm, runlog
from graphdist.console import EpochProgress, bars_and_logs, draws_bars, logging_restored, setup_logging
from graphdist._numba import expect_calls
from graphdist.data.memory import peak_rss_bytes
from graphdist.config import TrainConfig
from graphdist.config import replace as replace_cfg
from graphdist.plugins import load_plugins_from_environment
from graphdist.section import fail_at
from graphdist.trainers.heap import frozen_heap
from graphdist.trainers.base import EpochStats, Strategy, WorkerContext, strategy_class
from graphdist.trainers.devices import cluster_spec, heterogeneous, resolve_device  # noqa: F401 - heterogeneous: re-exported
from graphdist.trainers.tensorboard import open_log as open_tensorboard

logger = logging.getLogger("graphdist")


def worker_seed(seed: int, rank: int) -> int:
    """Seed of a rank's global RNGs (torch, numpy, random): distinct per rank.

    Example:
        >>> worker_seed(0, 2)
        2
    """
    return int(seed) + int(rank)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def apply_cluster(cfg: TrainConfig, world_size: Optional[int] = None) -> TrainConfig:
    """``cfg`` with ``--cluster``'s workers applied: worker count, devices, and the memory the
    full-graph check uses (the smallest worker's); unchanged without a spec.

    Args:
        world_size: the job's size under torchrun/SLURM (None: the local launcher, one host).

    Raises:
        ValueError: a spec of several hosts for the local launcher, a worker count other than the
            job's, ``--devices`` contradicting the spec, or the spec's own mistakes (one line each).
    """
    if not cfg.cluster:
        return cfg
    spec = cluster_spec(cfg.cluster)
    if world_size is None and len(spec.hosts) > 1:
        raise fail_at("cluster", cfg.cluster, f"has {len(spec.hosts)} hosts; the local launcher runs one host's "
                      "workers: start each host with torchrun (see docs/multi-node.md#2-torchrun)")
    if world_size is not None and world_size != spec.num_workers:
        raise fail_at("cluster", cfg.cluster, f"lists {spec.num_workers} workers but the job has WORLD_SIZE={world_size}")
    devices = tuple(w.device for w in spec.workers)
    if cfg.devices not in (("cpu",), devices):
        raise fail_at("devices", cfg.devices, f"contradicts {{0}} ({','.join(devices)}); give one of them",
                      ("cluster", cfg.cluster))
    memory = min(w.memory_bytes for w in spec.workers) / 2**30
    return replace_cfg(cfg, num_workers=spec.num_workers, devices=devices,
                       max_memory=cfg.max_memory if cfg.max_memory is not None else memory)


def worker_threads(cfg: TrainConfig, rank: int) -> int:
    """Torch threads of ``rank``: its ``--cluster`` entry's, else ``--threads``."""
    if not cfg.cluster:
        return cfg.threads
    return cluster_spec(cfg.cluster).workers[rank].threads


def local_threads(rank: int, world_size: int, cfg: TrainConfig) -> tuple[int, list[int]]:
    """This worker's local rank, and the torch threads of each worker on its machine by local rank.

    The local launcher's workers are all on this machine; torchrun and SLURM number a machine's
    workers consecutively (``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``).

    Example:
        >>> local_threads(1, 2, TrainConfig(threads=2))
        (1, [2, 2])
    """
    from graphdist.launch import detect_environment

    env = detect_environment()
    if env.kind == "local":
        local_rank, local_world = rank, world_size
    else:
        local_rank, local_world = env.local_rank, env.local_world_size
    first = rank - local_rank
    return local_rank, [worker_threads(cfg, r) for r in range(first, min(first + local_world, world_size))]


def bind_worker(rank: int, world_size: int, cfg: TrainConfig) -> Optional[list[int]]:
    """Binds this worker to its own cores as ``--bind-cores`` says (``graphdist.launch.worker_cores``); returns them or None."""
    from graphdist.launch import bind_to_cores, usable_cores, worker_cores

    local_rank, threads = local_threads(rank, world_size, cfg)
    cores = worker_cores(usable_cores(), threads, local_rank, cfg.bind_cores)
    if cores is not None:
        bind_to_cores(cores)
        logging.getLogger(__name__).debug("rank %d bound to cores %s (--no-bind-cores to leave it to the scheduler)",
                                          rank, cores)
    return cores


def join_job(rank: int, world_size: int, cfg: TrainConfig, init_method: str) -> Optional[list[int]]:
    """What every worker process does first: logging, cores, allocator, threads, device, process group.
    Returns the cores this worker is bound to (None: left to the scheduler).

    NCCL only when every worker has a GPU; otherwise gloo for all (CPU ranks cannot join NCCL).
    """
    from graphdist.launch import tune_allocator

    setup_logging(rank, cfg.verbose)
    # First: threads started from here on (torch's pool, gloo's) inherit the binding.
    cores = bind_worker(rank, world_size, cfg)
    tune_allocator()
    torch.set_num_threads(worker_threads(cfg, rank))
    all_cuda = all(d.startswith("cuda") for d in cfg.devices)
    if all_cuda and cfg.device_of(rank).startswith("cuda"):
        torch.cuda.set_device(torch.device(cfg.device_of(rank)))
    comm.init_process_group(rank, world_size, init_method, backend="nccl" if all_cuda else "gloo",
                            timeout_s=cfg.timeout)
    return cores


def plan_job(partition_dir: str, cfg: TrainConfig, world_size: int) -> Any:
    """The placement ``Plan`` from the partition's ``meta.json`` (pure: every rank gets the same).

    One part per worker: part ``i`` on rank ``i``. More parts than workers: ``placement.assign``
    groups them (each worker's memory holds its parts, train nodes follow the workers' speeds,
    connected parts together) and every worker trains on the union of its parts. Shares follow
    each worker's train nodes, so an epoch still visits every train node once.

    Raises:
        ValueError: fewer parts than workers; ``PlacementError`` (a ValueError): the parts fit no
            worker's memory, naming the part, the worker and the shortfall.
    """
    from partition.api import read_meta
    from placement.assign import part_loads
    from placement.plan import default_plan, grouped_plan

    meta = read_meta(partition_dir)
    num_parts = int(meta["num_parts"])
    counts, memory = part_loads(meta)
    if num_parts == world_size:
        return default_plan(counts, cfg.batch_size, cfg.devices, cfg.max_steps)
    if num_parts < world_size:
        raise ValueError(f"{partition_dir} has {num_parts} parts but the job has {world_size} workers; repartition "
                         f"with --num-parts {world_size} (or a multiple of it) or run --num-workers {num_parts}")
    from partition.api import part_edges
    from placement.assign import assign_parts
    from placement.cluster import local_cluster

    # Deterministic: the launcher checks the grouping before any worker starts, each worker gets the same.
    spec = cluster_spec(cfg.cluster) if cfg.cluster else local_cluster(world_size)
    groups = assign_parts(counts, memory, part_edges(partition_dir), [w.speed for w in spec.workers],
                          [w.memory_bytes for w in spec.workers])
    return grouped_plan(groups, counts, cfg.batch_size, cfg.devices, cfg.max_steps)


def build_strategy(rank: int, world_size: int, cfg: TrainConfig, partition_dir: str,
                   model: Optional[torch.nn.Module] = None, run_dir: Optional[str] = None,
                   checkpoint: Optional[dict[str, Any]] = None) -> Strategy:
    """Topology, plan and ``cfg.strategy`` built for this rank (collective: every rank calls it).

    Args:
        checkpoint: ``cfg.resume``'s checkpoint when the caller has loaded it (else read here when resuming).
    """
    from graphdist.trainers.precision import check_precision

    topology = comm.discover_topology()
    plan = plan_job(partition_dir, cfg, world_size)
    decisions = saved_decisions(checkpoint if checkpoint is not None else _load(cfg.resume)) if cfg.resume else {}
    if comm.is_main_process():
        logger.debug("topology: %s; plan:\n%s", topology.describe(), plan.describe())
        if decisions:
            logger.info("resume: keeping what the run's start measured and chose (not measured again): %s",
                        ", ".join(f"{k} {v}" for k, v in sorted(decisions.items())))
    # Every strategy's steps run under --precision: refused here, once, where this rank's device cannot run it.
    check_precision(cfg.precision, resolve_device(plan.of(rank).device))
    ctx = WorkerContext(rank=rank, world_size=world_size, cfg=cfg, partition_dir=partition_dir, plan=plan,
                        topology=topology, model=model, run_dir=run_dir, decisions=decisions)
    return strategy_class(cfg.strategy)(ctx)


# ----------------------------------------------------------------- checkpoint


def _rank_state(strategy: Strategy) -> dict[str, Any]:
    from graphdist.checkpoint import rng_state

    return {"rng": rng_state(), "scalers": {k: s.state_dict() for k, s in strategy.scalers.items()},
            **strategy.state_dict()}


def save(strategy: Strategy, run_dir: Path, epoch: int) -> None:
    """Every rank's states gathered to rank 0, which writes one atomic checkpoint."""
    from graphdist.checkpoint import save_checkpoint


    ranks = comm.all_gather_object(_rank_state(strategy))
    if comm.is_main_process():
        save_checkpoint(run_dir, strategy.model, strategy.optimizer, epoch,
                        extra={"ranks": ranks, "world_size": strategy.ctx.world_size, "strategy": strategy.name,
                               "decisions": strategy.ctx.decisions})
        runlog.write_status(run_dir, checkpoint_epoch=epoch)


def save_best(strategy: Strategy, run_dir: Path, record: dict[str, Any]) -> None:
    """Rank 0 keeps the best-validation epoch's model as ``best.pt`` (atomic, like the checkpoint).

    No collective: every rank holds the same parameters after an epoch (the strategies sync them).
    """
    from graphdist.checkpoint import BEST_NAME, save_checkpoint

    key = strategy.task.best_key
    save_checkpoint(run_dir, strategy.model, strategy.optimizer, record["epoch"], name=BEST_NAME,
                    extra={key: record[key], "strategy": strategy.name})
    runlog.write_status(run_dir, best_epoch=record["epoch"], best_metric=key, best_value=record[key],
                        **({"best_val_acc": record[key]} if key == "val_acc" else {}))


def _load(resume_dir: Any) -> dict[str, Any]:
    from graphdist.checkpoint import load_checkpoint

    return load_checkpoint(Path(resume_dir))


def saved_decisions(ckpt: dict[str, Any]) -> dict[str, Any]:
    """The timed and measured choices a checkpoint recorded (``WorkerContext.decisions``); empty for a
    checkpoint written before they were recorded."""
    return dict(ckpt["extra"].get("decisions") or {})


def resume(strategy: Strategy, resume_dir: Path, ckpt: Optional[dict[str, Any]] = None) -> int:
    """Restores model, optimizer, this rank's RNGs and strategy state from ``resume_dir``'s checkpoint
    (``ckpt`` when the caller has loaded it); returns the epochs completed."""
    from graphdist.checkpoint import set_rng_state

    ckpt = ckpt if ckpt is not None else _load(resume_dir)
    saved_world = int(ckpt["extra"].get("world_size", 1))
    if saved_world != strategy.ctx.world_size:
        raise ValueError(
            f"--resume {resume_dir}: the checkpoint was written by {saved_world} workers, "
            f"this job has {strategy.ctx.world_size}; resume with --num-workers {saved_world}"
        )
    saved_strategy = ckpt["extra"].get("strategy", "minibatch")
    if saved_strategy != strategy.name:
        raise ValueError(f"--resume {resume_dir}: the checkpoint was written by --strategy {saved_strategy}, "
                         f"this job runs --strategy {strategy.name}; resume with --strategy {saved_strategy}")
    strategy.model.load_state_dict(ckpt["model"])
    strategy.optimizer.load_state_dict(ckpt["optimizer"])
    saved = ckpt["extra"]["ranks"][strategy.ctx.rank]
    set_rng_state(saved["rng"])
    for name, scaler_state in saved.get("scalers", {}).items():  # (older checkpoints have none)
        if name in strategy.scalers:
            strategy.scalers[name].load_state_dict(scaler_state)
    strategy.load_state_dict({k: v for k, v in saved.items() if k not in ("rng", "scalers")})
    return int(ckpt["epoch"])


# --------------------------------------------------------------------- record


def reduce_epoch(stats: EpochStats) -> dict[str, Any]:
    """The epoch's record over all workers: counts and sync totals summed, the slowest rank's time,
    strategy extras averaged over ranks, per-rank numbers as lists in rank order."""
    from graphdist.sync import SyncSummary

    keys = sorted(stats.extras)
    sync = stats.sync or SyncSummary().as_list()
    sums = torch.tensor([stats.loss_sum, stats.seeds, stats.correct, *sync, *(stats.extras[k] for k in keys)],
                        dtype=torch.float64)
    comm.all_reduce(sums, tag="eval")
    times = torch.tensor([stats.time_s], dtype=torch.float64)
    comm.all_reduce(times, op="max", tag="eval")
    ranks = comm.get_world_size()
    values = sums.tolist()
    loss_sum, seeds, correct = values[:3]
    summary = SyncSummary.from_list(values[3 : 3 + len(sync)])
    extras = {k: v / ranks for k, v in zip(keys, values[3 + len(sync) :])}
    epoch_time = float(times[0])
    record: dict[str, Any] = {
        "loss": loss_sum / max(1.0, seeds),
        "train_acc": correct / max(1.0, seeds),
        "seeds": int(seeds),
        "steps": stats.steps,
        "epoch_time_s": epoch_time,
        "seeds_per_s": seeds / max(1e-9, epoch_time),
        # DWBP (docs/design.md#dwbps-timing-model), all steps and ranks; None where unmeasured (ddp, 1 worker).
        "hidden_fraction": _finite(summary.hidden_fraction),
        "predicted_hidden_fraction": _finite(summary.predicted_hidden_fraction),
        "backward_s": summary.backward_s / ranks,  # per rank, summed over the epoch's steps
        "grad_comm_s": summary.comm_s / ranks,  # T_comm: the layers' collective service times, per rank
        # This rank's (rank 0's) split of its epoch time.
        "time_sample_s": stats.sample_wait_s,
        "time_compute_s": stats.compute_s,
        "time_comm_s": stats.comm_exposed_s,
    }
    record.update(extras)
    if stats.per_rank:
        gathered = comm.all_gather_object(stats.per_rank)
        record.update({k: [g.get(k) for g in gathered] for k in sorted(stats.per_rank)})
    return record


def _finite(x: float) -> Optional[float]:
    return None if math.isnan(x) else x


def _traffic() -> dict[str, dict[str, int]]:
    """Bytes sent this epoch over all ranks, per tag, and the part that crossed hosts."""
    sent = comm.all_gather_object((comm.byte_counts(), comm.inter_host_byte_counts()))

    def total(i: int) -> dict[str, int]:
        keys = sorted({k for s in sent for k in s[i]})
        return {k: sum(s[i].get(k, 0) for s in sent) for k in keys}

    return {"bytes_sent": total(0), "bytes_inter_host": total(1)}


# ----------------------------------------------------------------------- loop


def run_epochs(strategy: Strategy, cfg: TrainConfig, run_path: Path,
               between_epochs: Callable[[], None] = lambda: None,
               cores: Optional[list[int]] = None, checkpoint: Optional[dict[str, Any]] = None) -> list[dict[str, Any]]:
    """Resume if asked (from ``checkpoint`` when already loaded), then epochs ``start+1 .. cfg.epochs``: train,
    record, evaluate, checkpoint; ``between_epochs()`` after each (``frozen_heap``'s settle). Rank 0 prints
    the banner (``cores``: where it is bound), progress and one line per epoch."""

    main = comm.is_main_process()
    start_epoch = resume(strategy, Path(cfg.resume), checkpoint) if cfg.resume else 0
    checkpoint = None  # restored: not kept through training
    if cfg.resume:
        comm.barrier()  # every rank has loaded the checkpoint: only now the resumed run counts as started
        if main:
            runlog.truncate_metrics(run_path, start_epoch)
            # The changes this resume made (epochs, lr, ...) become the run's record.
            runlog.write_config(run_path, replace_cfg(cfg, resume=None, predict=None).to_dict())
            logger.info("resumed from %s after epoch %d", cfg.resume, start_epoch)
    if main:
        from graphdist.trainers.banner import start_banner

        logger.info(start_banner(strategy, run_path, cores, resumed=start_epoch))
    history = runlog.read_metrics(run_path) if main else []
    key = strategy.task.best_key
    best = runlog.best_epoch(history).get(key)
    tensorboard = open_tensorboard(run_path, history) if cfg.tensorboard and main else None
    # Steps x hops: about the sampler's and normalisation's calls that may run compiled loops.
    expect_calls((cfg.epochs - start_epoch) * strategy.steps_per_epoch * max(1, cfg.layers))
    bars = main and draws_bars()
    for epoch in range(start_epoch + 1, cfg.epochs + 1):
        comm.reset_byte_counts()
        with bars_and_logs(bars), EpochProgress(epoch, strategy.steps_per_epoch, bars, logger.info) as progress:
            stats = strategy.train_epoch(epoch, progress=progress if main else None)
        stats.per_rank["peak_rss_bytes"] = peak_rss_bytes()  # each worker's own (VmHWM)
        record = {"epoch": epoch, **reduce_epoch(stats), **_traffic()}
        if cfg.eval_every and (epoch % cfg.eval_every == 0 or epoch == cfg.epochs):
            comm.injection_point("evaluate")
            t0 = time.perf_counter()
            record.update(strategy.evaluate())
            record["eval_time_s"] = time.perf_counter() - t0
        # The checkpoint comes after the record and best.pt (a checkpoint of N epochs implies both;
        # a run killed before it redoes epoch N from the previous one), and the epoch line after the
        # checkpoint: "epoch N done" means it is saved.
        if main:
            runlog.append_metrics(run_path, record)
            history.append(record)
            if tensorboard is not None:
                tensorboard.log_epoch(record, stats.step_losses)  # stats is this rank's: rank 0's step losses
        if main and record.get(key) is not None and (best is None or record[key] > best):
            best = record[key]
            save_best(strategy, run_path, record)
        if epoch % cfg.checkpoint_every == 0 or epoch == cfg.epochs:
            save(strategy, run_path, epoch)
        if main:
            logger.info(epoch_line(record))
        between_epochs()
    if main:
        try:
            runlog.plot_run(run_path, history, title=f"{cfg.dataset} | {cfg.model} | {cfg.strategy} | "
                                                      f"{strategy.ctx.world_size} workers")
        except OSError as exc:  # the run is complete and checkpointed: missing figures do not fail it
            logger.warning("plots not written: %s", exc)
    if tensorboard is not None:
        tensorboard.close()
    return history


def worker_main(
    rank: int,
    world_size: int,
    cfg: TrainConfig,
    partition_dir: str,
    run_dir: str,
    init_method: str,
    model: Optional[torch.nn.Module] = None,
) -> list[dict[str, Any]]:
    """Runs training on this rank; returns the per-epoch history (on rank 0; empty elsewhere).

    Raises:
        CommError: a collective failed or timed out (names this rank and the operation).
    """
    # The test hooks this process's environment asks for (GRAPHDIST_TEST_FAULT, GRAPHDIST_TEST_SLOWDOWN):
    # installed here, by module name, so that neither comm nor the trainers import graphdist.testing.
    load_plugins_from_environment()
    comm.injection_point("startup", rank)
    # A worker run in the caller's process (one worker; a notebook) hands its logging back as it found it.
    with logging_restored():
        cores = join_job(rank, world_size, cfg, init_method)
        return _train(rank, world_size, cfg, partition_dir, run_dir, model, cores)


def _train(rank: int, world_size: int, cfg: TrainConfig, partition_dir: str, run_dir: str,
           model: Optional[torch.nn.Module], cores: Optional[list[int]]) -> list[dict[str, Any]]:
    """``worker_main`` once the process joined the job: build the strategy, run the epochs, leave the group."""
    try:
        seed_everything(worker_seed(cfg.seed, rank))
        # Read once (the decisions, then the states), and handed on rather than held: run_epochs drops it
        # once resumed, so a model-sized copy does not live through training.
        held = [_load(cfg.resume) if cfg.resume else None]
        strategy = build_strategy(rank, world_size, cfg, partition_dir, model=model, run_dir=run_dir,
                                  checkpoint=held[0])
        try:
            with frozen_heap() as settle:
                return run_epochs(strategy, cfg, Path(run_dir), between_epochs=settle, cores=cores,
                                  checkpoint=held.pop())
        finally:
            strategy.close()
    finally:
        comm.shutdown()


def epoch_line(r: dict[str, Any]) -> str:
    """The one log line per epoch.

    Example:
        >>> epoch_line({"epoch": 2, "loss": 0.5, "epoch_time_s": 1.25, "eval_time_s": 3.5, "seeds_per_s": 800.0,
        ...             "val_acc": 0.8, "bytes_sent": {"grad": 2**20}, "hidden_fraction": 0.9})
        'epoch 2 done | loss 0.5000 | train 1.2 s + eval 3.5 s | 800 seeds/s | val 80.00% | sent 1.0 MiB | hidden 90%'
    """
    took = f"train {r['epoch_time_s']:.1f} s"
    if r.get("eval_time_s") is not None:
        took += f" + eval {r['eval_time_s']:.1f} s"
    if r.get("period_s"):  # fullgraph: exchanges in flight across epochs land outside "train"
        took += f" (period {r['period_s']:.1f} s)"
    parts = [f"epoch {r['epoch']} done", f"loss {r['loss']:.4f}", took, f"{r['seeds_per_s']:,.0f} seeds/s"]
    for key in ("val_acc", "test_acc", "val_f1", "test_f1", "val_auc", "test_auc"):
        if r.get(key) is not None:
            metric = key.split("_", 1)[1]
            parts.append(f"{key.split('_')[0]} {100 * r[key]:.2f}%" if metric == "acc"
                         else f"{key.replace('_', ' ')} {100 * r[key]:.2f}")
    mb = sum(r.get("bytes_sent", {}).values()) / 2**20
    parts.append(f"sent {mb:,.1f} MiB")
    if r.get("hidden_fraction") is not None:
        parts.append(f"hidden {100 * r['hidden_fraction']:.0f}%")
    return " | ".join(parts)


def spawned_worker(rank: int, world_size: int, cfg: TrainConfig, partition_dir: str, run_dir: str,
                   init_method: str, model: Optional[torch.nn.Module] = None) -> None:
    """The local launcher's entry point (``fn(rank, *args)``)."""
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    try:
        worker_main(rank, world_size, cfg, partition_dir, run_dir, init_method, model=model)
    except KeyboardInterrupt:
        # The parent handles Ctrl-C and stops everyone; a quiet exit here avoids N tracebacks.
        sys.exit(130)
