"""The one training loop: join the group, plan, build the strategy, resume, epochs, metrics, checkpoints.

``worker_main`` is what the local launcher spawns and what each torchrun/srun process
calls. Any ``Strategy`` (``trainers/base.py``) runs under it: the loop owns epochs, the
metrics record, evaluation cadence, checkpoints, plots and resume; the strategy owns how
an epoch trains. Rank 0 writes the run directory; every rank contributes its RNG and
strategy state to the checkpoint so that a resume is bit-identical.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from graphdist import comm, runlog
from graphdist._numba import expect_calls
from graphdist.config import TrainConfig
from graphdist.config import replace as replace_cfg
from graphdist.console import EpochProgress, bars_and_logs, draws_bars, logging_restored, setup_logging
from graphdist.data.memory import peak_rss_bytes
from graphdist.plugins import load_plugins_from_environment
from graphdist.rundir import RunDir
from graphdist.section import ConfigError, fail_at
from graphdist.trainers.base import Strategy, WorkerContext, strategy_class
from graphdist.trainers.checkpoints import load as load_checkpoint
from graphdist.trainers.checkpoints import finish_writes, resume, save, save_best, saved_decisions, saved_world_size
from graphdist.trainers.devices import cluster_spec, heterogeneous, resolve_device  # noqa: F401 - heterogeneous: re-exported
from graphdist.trainers.heap import frozen_heap
from graphdist.trainers.kit import seed_everything
from graphdist.trainers.profile import start_plan
from graphdist.trainers.records import epoch_line, reduce_epoch, traffic
from graphdist.trainers.tensorboard import open_log as open_tensorboard
from partition.handle import PartitionDir, opened

logger = logging.getLogger("graphdist")


def worker_seed(seed: int, rank: int) -> int:
    """Seed of a rank's global RNGs (torch, numpy, random): distinct per rank.

    Example:
        >>> worker_seed(0, 2)
        2
    """
    return int(seed) + int(rank)


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
        raise ConfigError("devices", f"contradicts {{0}} ({','.join(devices)}); give one of them",
                          mentions=(("cluster", cfg.cluster),), at=cfg.devices)
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
                            timeout_s=cfg.timeout, peer_timeout_s=cfg.peer_timeout)
    return cores


def plan_job(partitions: PartitionDir | str, cfg: TrainConfig, world_size: int) -> Any:
    """The placement ``Plan`` for ``partitions`` (``placement.assign.job_plan``: pure, every rank gets the same).

    Raises:
        ValueError: fewer parts than workers, naming the directory; ``PlacementError`` (a ValueError):
            the parts fit no worker's memory.
    """
    from placement.assign import job_plan

    partitions = opened(partitions)
    workers = cluster_spec(cfg.cluster).workers if cfg.cluster else ()
    return job_plan(partitions.meta, world_size, cfg.batch_size, cfg.devices, cfg.max_steps,
                    part_edges=partitions.part_edges, workers=workers, where=str(partitions.path))


def check_parts_here(partitions: PartitionDir, plan: Any, rank: int) -> None:
    """Every rank holds the files of the parts the plan gave it, or every rank refuses in one line naming the
    host, the part and the path, before anything is trained (collective). After a regrouping (a resume on
    another worker count) a host may be given parts it never read: the partition directory must be on
    storage every host reads, or copied to every host."""
    import socket

    mine = [(socket.gethostname(), rank, part, str(path)) for part, path in partitions.missing(plan.of(rank).parts)]
    missing = [m for gathered in comm.all_gather_object(mine) for m in gathered]
    if missing:
        host, who, part, path = missing[0]
        more = f" (and {len(missing) - 1} more files)" if len(missing) > 1 else ""
        raise fail_at("partitions", str(partitions.path), f"host {host} (rank {who}) was given part {part}, but {path} "
                      f"is not there{more}; put the partition directory on storage every host reads, or a copy of "
                      "it on every host (docs/multi-node.md#elastic-jobs-resuming-on-another-worker-count)")


def build_strategy(rank: int, world_size: int, cfg: TrainConfig, partitions: PartitionDir | str,
                   model: Optional[torch.nn.Module] = None, run_dir: Optional[RunDir | str] = None,
                   checkpoint: Optional[dict[str, Any]] = None) -> Strategy:
    """Topology, plan and ``cfg.strategy`` built for this rank (collective: every rank calls it).

    Args:
        checkpoint: ``cfg.resume``'s checkpoint when the caller has loaded it (else read here when resuming).
    """
    from graphdist.trainers.precision import check_precision

    topology = comm.discover_topology()
    partitions = opened(partitions)  # meta.json read once per process, here
    plan = plan_job(partitions, cfg, world_size)
    check_parts_here(partitions, plan, rank)
    if cfg.resume and checkpoint is None:
        checkpoint = load_checkpoint(cfg.resume)
    decisions = saved_decisions(checkpoint) if cfg.resume else {}
    if cfg.resume and saved_world_size(checkpoint) != world_size:
        decisions = {}  # measured for the old formation (its shares, its hosts): measured again
    if comm.is_main_process():
        logger.debug("topology: %s; plan:\n%s", topology.describe(), plan.describe())
        if decisions:
            logger.info("resume: keeping what the run's start measured and chose (not measured again): %s",
                        ", ".join(f"{k} {v}" for k, v in sorted(decisions.items()) if not k.endswith("_why")))
    # Every strategy's steps run under --precision: refused here, once, where this rank's device cannot run it.
    check_precision(cfg.precision, resolve_device(plan.of(rank).device))
    ctx = WorkerContext(rank=rank, world_size=world_size, cfg=cfg, partitions=partitions, plan=plan,
                        topology=topology, model=model, run_dir=RunDir.at(run_dir) if run_dir is not None else None,
                        decisions=decisions)
    strategy = strategy_class(cfg.strategy)(ctx)
    start = start_plan(ctx, strategy.probe_target())  # the profiler's shares, or the plan's
    if start != plan:
        strategy.apply_plan(start)
    return strategy


# ----------------------------------------------------------------------- loop


def run_epochs(strategy: Strategy, cfg: TrainConfig, run_dir: RunDir | Path,
               between_epochs: Callable[[], None] = lambda: None,
               cores: Optional[list[int]] = None, checkpoint: Optional[dict[str, Any]] = None) -> list[dict[str, Any]]:
    """Resume if asked (from ``checkpoint`` when already loaded), then epochs ``start+1 .. cfg.epochs``: train,
    record, evaluate, checkpoint; ``between_epochs()`` after each (``frozen_heap``'s settle). Rank 0 prints
    the banner (``cores``: where it is bound), progress and one line per epoch."""

    main = comm.is_main_process()
    run_dir = RunDir.at(run_dir)
    start_epoch = resume(strategy, Path(cfg.resume), checkpoint) if cfg.resume else 0
    checkpoint = None  # restored: not kept through training
    if cfg.resume:
        comm.barrier()  # every rank has loaded the checkpoint: only now the resumed run counts as started
        if main:
            run_dir.truncate_metrics(start_epoch)
            # The changes this resume made (epochs, lr, ...) become the run's record.
            run_dir.write_config(replace_cfg(cfg, resume=None, predict=None).to_dict())
            logger.info("resumed from %s after epoch %d", cfg.resume, start_epoch)
    if main:
        from graphdist.trainers.banner import start_banner

        logger.info(start_banner(strategy, run_dir, cores, resumed=start_epoch))
    history = run_dir.read_metrics() if main else []
    key = strategy.task.best_key
    best = runlog.best_epoch(history).get(key)
    tensorboard = open_tensorboard(run_dir, history) if cfg.tensorboard and main else None
    # Steps x hops: about the sampler's and normalisation's calls that may run compiled loops.
    expect_calls((cfg.epochs - start_epoch) * strategy.steps_per_epoch * max(1, cfg.layers))
    bars = main and draws_bars()
    for epoch in range(start_epoch + 1, cfg.epochs + 1):
        comm.reset_byte_counts()
        with bars_and_logs(bars), EpochProgress(epoch, strategy.steps_per_epoch, bars, logger.info) as progress:
            stats = strategy.train_epoch(epoch, progress=progress if main else None)
        stats.per_rank["peak_rss_bytes"] = peak_rss_bytes()  # each worker's own (VmHWM)
        record = {"epoch": epoch, **reduce_epoch(stats), **traffic()}
        if strategy.carried_seeds:  # resumed inside this epoch: its seeds trained before the checkpoint count too
            record["seeds"] += strategy.carried_seeds
            strategy.carried_seeds = 0
        if cfg.eval_every and (epoch % cfg.eval_every == 0 or epoch == cfg.epochs):
            comm.injection_point("evaluate")
            t0 = time.perf_counter()
            record.update(strategy.evaluate())
            record["eval_time_s"] = time.perf_counter() - t0
        # The checkpoint comes after the record and best.pt (a checkpoint of N epochs implies both;
        # a run killed before it redoes epoch N from the previous one), and the epoch line after the
        # checkpoint: "epoch N done" means it is saved.
        if main:
            run_dir.append_metrics(record)
            history.append(record)
            if tensorboard is not None:
                tensorboard.log_epoch(record, stats.step_losses)  # stats is this rank's: rank 0's step losses
        if main and record.get(key) is not None and (best is None or record[key] > best):
            best = record[key]
            save_best(strategy, run_dir, record)
        if epoch % cfg.checkpoint_every == 0 or epoch == cfg.epochs:
            save(strategy, run_dir, epoch)
        if main:
            logger.info(epoch_line(record))
        between_epochs()
    if main and cfg.plots:
        try:
            run_dir.plot(history, title=f"{cfg.dataset} | {cfg.model} | {cfg.strategy} | "
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
    partitions: PartitionDir | str,
    run_dir: RunDir | str,
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
        return _train(rank, world_size, cfg, partitions, run_dir, model, cores)


def _train(rank: int, world_size: int, cfg: TrainConfig, partitions: PartitionDir | str, run_dir: RunDir | str,
           model: Optional[torch.nn.Module], cores: Optional[list[int]]) -> list[dict[str, Any]]:
    """``worker_main`` once the process joined the job: build the strategy, run the epochs, leave the group."""
    try:
        seed_everything(worker_seed(cfg.seed, rank))
        # Read once (the decisions, then the states), and handed on rather than held: run_epochs drops it
        # once resumed, so a model-sized copy does not live through training.
        held = [load_checkpoint(cfg.resume) if cfg.resume else None]
        run_dir = RunDir.at(run_dir)
        strategy = build_strategy(rank, world_size, cfg, partitions, model=model, run_dir=run_dir,
                                  checkpoint=held[0])
        failed = True
        # The strategy closes inside the frozen heap too: a collection it makes (DDP's wrapper) then skips
        # the ~290,000 frozen objects, where after thawing it took ~0.2 s of every worker's exit.
        with frozen_heap() as settle:
            try:
                history = run_epochs(strategy, cfg, run_dir, between_epochs=settle, cores=cores,
                                     checkpoint=held.pop())
                failed = False
                return history
            finally:
                try:
                    finish_writes(failed)  # a mid-epoch checkpoint still being written lands (or says why not)
                finally:
                    strategy.close()
    finally:
        comm.shutdown()


def profile_worker(rank: int, world_size: int, cfg: TrainConfig, partitions: PartitionDir | str, out_dir: str,
                   init_method: str) -> None:
    """``graphdist-plan``'s profile job on this rank (the local launcher's ``fn(rank, *args)``): the strategy is
    built under ``--placement profiled``, whose start-up profiler probes a copy of the model and writes
    ``profile.json`` into ``out_dir``; nothing is trained."""
    from graphdist.console import LOG_ENV

    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    os.environ.setdefault(LOG_ENV, "warning")  # graphdist-plan prints what the profile says, not the job's log
    with logging_restored():
        join_job(rank, world_size, cfg, init_method)
        try:
            seed_everything(worker_seed(cfg.seed, rank))
            build_strategy(rank, world_size, cfg, partitions, run_dir=RunDir.at(out_dir)).close()
        finally:
            comm.shutdown()


def spawned_worker(rank: int, world_size: int, cfg: TrainConfig, partitions: PartitionDir | str, run_dir: RunDir | str,
                   init_method: str, model: Optional[torch.nn.Module] = None) -> None:
    """The local launcher's entry point (``fn(rank, *args)``)."""
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    try:
        worker_main(rank, world_size, cfg, partitions, run_dir, init_method, model=model)
    except KeyboardInterrupt:
        # The parent handles Ctrl-C and stops everyone; a quiet exit here avoids N tracebacks.
        sys.exit(130)
