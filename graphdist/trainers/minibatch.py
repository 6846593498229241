"""``--strategy minibatch`` (DistDGL-like): distributed sampling, layer-wise gradient sync.

Per worker: load its partition; sample seeds from its own train nodes with the
distributed sampler (remote neighbourhoods and features come from their owners,
hot remote features from a cache); train; sync gradients layer by layer
(DWBP by default). Every worker runs the plan's steps per epoch, each with the plan's
batch share of its train nodes. Evaluation is exact layer-at-a-time full-neighbour inference,
distributed the same way (``trainers/evaluate.py``).

This module composes the pieces; the algorithms live in ``sampling``, ``graphdist.sync``,
``graphdist.models`` and ``graphdist.comm``.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Callable, Optional

import torch

from graphdist import comm
from graphdist.config import checkpoint_interval
from graphdist.models.registry import capabilities
from graphdist.trainers.base import (EpochStats, Predictions, Progress, Strategy, WorkerContext, adam,
                                     job_sync, recheck_sync)
from graphdist.trainers.batches import DistributedBatches
from graphdist.trainers.devices import resolve_device
from graphdist.trainers.evaluate import exact_inference
from graphdist.trainers.kit import broadcast_parameters, build_model, emulated_slowdown, predictions
from graphdist.trainers.precision import loss_scaler
from graphdist.trainers.probes import ProbeTarget, time_syncs
from graphdist.trainers.row_adam import RowShard
from graphdist.trainers.steps import reporter, train_steps

if TYPE_CHECKING:
    from placement.plan import Plan

logger = logging.getLogger(__name__)


class MinibatchStrategy(Strategy):
    """Mini-batch training on each worker's parts (one, or a union), with distributed sampling and features.

    Set-up (collective, the same order on every rank): device, partition, the distributed
    batches (sampling group, owner map, sources, feature cache, loader), model, optimizer,
    gradient sync.
    """

    name = "minibatch"
    moves_shares = True

    def __init__(self, ctx: WorkerContext) -> None:
        super().__init__(ctx)
        cfg, rank = ctx.cfg, ctx.rank
        mine = ctx.plan.of(rank)
        self.device = resolve_device(mine.device)
        self.partition = ctx.partitions.load(mine.parts)
        model = build_model(ctx, int(self.partition.x.shape[1]), self.task.out_dim(self.partition.meta, cfg.hidden))
        self.with_degrees = capabilities(model).global_degrees
        self.stretch = emulated_slowdown(rank)
        self.batches = DistributedBatches(ctx, self.partition, self.with_degrees, stretch=self.stretch, task=self.task,
                                          replicate=cfg.replicate, sampler=cfg.sampler, device=self.device)
        self.model = self.task.wrap_model(model).to(self.device)
        broadcast_parameters(self.model)
        # Every rank steps on the same synced gradients: each keeps 1/world of the tables' Adam state.
        self.optimizer = adam(self.model.parameters(), cfg.lr, cfg.weight_decay, shard=RowShard(rank, ctx.world_size))
        self.scalers = {"train": loss_scaler(cfg.precision, self.device)}
        self.sync = self._build_sync()
        self._warm_epochs = 1  # epochs before the sync choice's re-check reads the step time
        if self.stretch is not None:  # prepended: ticks before the sync's hook starts the row-count exchange
            self.stretch.attach(self.model)
        self._stats = EpochStats()
        self.rebalancer = self._build_rebalancer()
        # --checkpoint-interval: every so many steps, or seconds of rank 0's clock (0: off)
        self._interval, self._interval_s = checkpoint_interval(cfg.checkpoint_interval)
        self._last_save = time.perf_counter()
        self._pending: Optional[dict[str, Any]] = None  # a mid-epoch checkpoint's progress, to train the rest of
        self._log_setup()

    # The pieces, under the names evaluation and benches use.
    loader = property(lambda self: self.batches.loader)
    features = property(lambda self: self.batches.features)
    neighbor_source = property(lambda self: self.batches.neighbor_source)
    owners = property(lambda self: self.batches.owners)
    train_seeds = property(lambda self: self.batches.train_seeds)

    def _build_rebalancer(self) -> Any:
        from graphdist.trainers.rebalance import Rebalancer

        cfg = self.ctx.cfg
        return Rebalancer(self.loader, self.batches.labels, self.ctx.plan, every=cfg.rebalance_every,
                          eps=cfg.rebalance_eps, clock=self._busy_clock(), work_clock=self._work_clock)

    # ------------------------------------------------------------------ plan

    @property
    def plan(self) -> Plan:
        """The plan in force: the job's, the profiler's start shares, or the rebalancer's last move."""
        return self.rebalancer.plan

    def apply_plan(self, plan: Plan, step: int = 0) -> None:
        """Trains at ``plan``'s batch shares from the batch after ``step`` on (0: the next epoch's start);
        within an epoch the unvisited seeds migrate to fit them (collective)."""
        self.rebalancer.apply(plan, step)

    def probe_target(self) -> Optional[ProbeTarget]:
        """What the start-up profiler times: this rank's sampler, feature gather and step (``trainers/probes.py``);
        None under ``--sampler cluster``, whose batches are whole clusters, not shares of seeds."""
        cfg = self.ctx.cfg
        if cfg.sampler != "neighbor":
            return None
        return ProbeTarget(batches=self.batches, model=self.model, device=self.device, with_degrees=self.with_degrees,
                           loss=self.task.loss, make_sync=lambda model, mode=None: job_sync(self.ctx, model, mode=mode),
                           rank=self.ctx.rank,
                           precision=cfg.precision, timeout=cfg.timeout, stretch=self.stretch)

    def _work_clock(self) -> float:
        """All of this rank's own work so far: its CPU time (gloo waits without spinning) plus emulated slowdown."""
        return time.process_time() + (self.stretch.slept_s if self.stretch is not None else 0.0)

    def _busy_clock(self) -> Callable[[], float]:
        """What counts as a rank's own, movable work (``trainers/rebalance.py`` says why).

        ``--replicate graph``: nothing but the gradient sync communicates, so the whole step moves
        with the seeds: the training thread's wall time less its waits in collectives (``finish``
        and backward's wait for the step's seed count), plus its waits for batches (sampling and
        gathering, its own work, in this thread or the prefetch thread). Wall time, not the
        process's CPU time, which leaves out time its threads are runnable but not running: with
        it the rebalancer overshot to 3:1 shares for a 2x slowdown (synthetic-100k).
        ``structure``: sampling is local and moves, the
        gather's fetch is served by the rows' owners: compute plus sampling time. ``none``: a
        part's neighbourhoods and features are served by its owner whoever trains the seed: only
        the training thread's compute time (``train_steps`` accumulates it in ``self._stats``).
        """
        replicate = self.ctx.cfg.replicate
        if replicate == "graph":  # no collective but the gradient sync: the whole step moves
            return lambda: self._stats.compute_s + self.loader.stats.wait_s
        if replicate == "structure":  # sampling is local; the gather's fetch waits on peers
            return lambda: self._stats.compute_s + self.loader.stats.sample_s
        return lambda: self._stats.compute_s

    def _build_sync(self) -> Any:
        # --sync auto decides here, before the sync exists (across hosts: probe steps of each candidate)
        return job_sync(self.ctx, self.model, probe=self._sync_probe())

    def _sync_probe(self) -> Any:
        """``--sync auto``'s probe: ``probe(modes)`` times steps of each mode (``time_syncs``); None without a
        probe target."""
        target = self.probe_target()
        return (lambda modes: time_syncs(target, modes)) if target else None

    def _log_setup(self) -> None:
        if comm.is_main_process():
            part = self.partition
            logger.debug(
                "%s: %s inner, %s halo, %s train %s, batch share %d, %d steps/epoch, cache %s remote rows "
                "(%.0f MiB), %s", part.name, f"{part.num_inner:,}", f"{part.num_halo:,}",
                f"{int(self.train_seeds.numel()):,}", self.task.items, self.loader.batch_size, len(self.loader),
                f"{int(self.features.cache_ids.numel()):,}", self.features.cache_bytes / 2**20,
                f"{self.loader.loaders} loader processes" if self.loader.loaders else
                f"prefetch {'on' if self.loader.prefetch else 'off'}",
            )

    # ---------------------------------------------------------------- training

    @property
    def steps_per_epoch(self) -> int:
        return len(self.loader)

    def describe(self) -> list[tuple[str, str]]:
        cfg = self.ctx.cfg
        fanouts = ",".join(str(f) for f in cfg.fanouts)
        batch = (f"batch {cfg.batch_size} (fan-outs {fanouts})" if cfg.sampler == "neighbor" else
                 f"ClusterGCN batches of {self.loader.batch_size} clusters of each part")
        loading = (f"{self.loader.loaders} loader process{'es' if self.loader.loaders > 1 else ''}" if self.loader.loaders
                   else f"prefetch {'on' if self.loader.prefetch else 'off'}")
        words = [f"minibatch, {batch}, {self.steps_per_epoch} steps an epoch", loading]
        if cfg.replicate != "none":
            words.append(f"--replicate {cfg.replicate}")
        if self.rebalancer.active:
            words.append(f"rebalancing every {cfg.rebalance_every} steps")
        return [("strategy", ", ".join(words)), *super().describe()[1:]]

    def resume_progress(self, progress: dict[str, Any]) -> None:
        """The next epoch trains only the seeds a mid-epoch checkpoint's epoch had not (:meth:`_remaining`)."""
        self._pending = progress

    def _remaining(self, progress: dict[str, Any]) -> tuple[torch.Tensor, Callable[[], None]]:
        """Sets the loader to this rank's seeds the checkpoint had not trained, over as many steps as the rank
        with the most needs (collective: one all-reduce); returns the mask of the seeds trained before and
        what puts the loader back for the next epoch."""
        from graphdist.trainers.checkpoints import trained_mask

        done = trained_mask(progress)
        loader = self.loader
        seeds, batches = loader.seeds, loader.num_batches
        own = self.batches.train_seeds
        left = own[~done[own]]
        steps = torch.tensor([float(-(-left.numel() // max(1, loader.batch_size)))])
        steps = comm.all_reduce(steps, op="max")
        loader.seeds, loader.num_batches = left, int(steps.item())
        self.carried_seeds = int(progress["seeds"])

        def restore() -> None:
            loader.seeds, loader.num_batches = seeds, batches

        return done, restore

    def _save_progress(self, epoch: int, step: int, trained: list[torch.Tensor], done: Optional[torch.Tensor]) -> None:
        """A mid-epoch checkpoint after ``step`` (collective, every rank at the same step): the model, and every
        seed this epoch trained so far on any rank (with ``done``, those of the checkpoint this epoch resumed from)."""
        from graphdist.trainers.checkpoints import progress_record, save

        # host ids: a rank that samples on its device recorded device tensors, which other ranks could not unpickle
        mine = torch.cat([t.to("cpu", torch.int64) for t in trained]) if trained else torch.zeros(0, dtype=torch.int64)
        everyone = torch.cat([t.to(torch.int64) for t in comm.all_gather_object(mine)])
        if done is not None:
            everyone = torch.cat([everyone, done.nonzero().view(-1)])
        num_nodes = int(self.ctx.partitions.meta["num_nodes"])
        save(self, self.ctx.run_dir, epoch - 1, progress=progress_record(epoch, step, everyone, num_nodes))

    def _save_now(self, step: int) -> bool:
        """Whether every rank checkpoints after this step: a multiple of the interval's steps; or, in seconds, a
        flag rank 0 raised for this step when its clock passed the interval, carried to every rank by the
        step's seed-count all-reduce (no collective of its own; one step late)."""
        if self._interval:
            return step % self._interval == 0
        weights = getattr(getattr(self.sync, "hook_state", None), "weights", None)
        due = self.ctx.rank == 0 and time.perf_counter() - self._last_save >= self._interval_s
        if weights is None:  # one worker: nobody to agree with
            return due
        asked = weights.asked()
        weights.ask(due and not asked)  # for the next step's count
        return asked

    def train_epoch(self, epoch: int, progress: Optional[Progress] = None) -> EpochStats:
        """One epoch of the plan's steps on this rank (after a mid-epoch resume: the rest of that epoch)."""
        partial, self._pending = self._pending, None
        done, restore = self._remaining(partial) if partial is not None else (None, None)
        try:
            return self._train_epoch(epoch, progress, done, partial is not None)
        finally:
            if restore is not None:
                restore()

    def _train_epoch(self, epoch: int, progress: Optional[Progress], done: Optional[torch.Tensor],
                     partial: bool) -> EpochStats:
        self.model.train()
        start = time.perf_counter()
        self.loader.stats.reset()
        self.features.stats = type(self.features.stats)()
        self.sync.reset_summary()

        if self.stretch is not None:
            self.stretch.set_epoch(epoch)
            self.stretch.mark()
        self._stats = EpochStats()
        # The rest of a resumed epoch trains its own seeds at the plan's shares: nothing to migrate.
        rebalancer = self.rebalancer if self.rebalancer.active and not partial else None
        if rebalancer is not None:
            rebalancer.begin_epoch(epochs_left=self.ctx.cfg.epochs - epoch + 1)
        share_at_start = self.loader.batch_size
        busy_at_start = self.rebalancer.read_clock()

        trained: list[torch.Tensor] = []
        steps = len(self.loader)
        saving = (self._interval > 0 or self._interval_s > 0) and self.ctx.run_dir is not None

        def after_step(step: int, seeds: int) -> float:
            if self.stretch is not None:
                self.stretch.tick()
            held = 0.0
            if saving and self._save_now(step) and step < steps:  # every rank at the same step
                t0 = time.perf_counter()
                self._save_progress(epoch, step, trained, done)
                self._last_save = time.perf_counter()
                held = self._last_save - t0
            if rebalancer is None:
                return held
            # The rebalancer's exchanges (and, on a fast rank, its wait there for a slow one) are
            # not work that moves with seeds. Counted as busy, they were 37-47 ms an epoch of the
            # fast rank's (5-7%), which the rebalancer then read as balance (synthetic-100k, batch 4096).
            t0 = time.perf_counter()
            plan = rebalancer.after_step(step, seeds)
            if plan is not None:  # decided on every rank at this step: every rank applies it here
                self.apply_plan(plan, step)
            return held + time.perf_counter() - t0

        interval = self.ctx.cfg.log_interval
        batches = _Recording(self.loader, trained) if saving else self.loader
        stats = train_steps(batches, self.sync, self.optimizer, self.device, self.with_degrees,
                            after_step=after_step,
                            progress=(reporter(progress, epoch, self.steps_per_epoch, self.ctx.world_size, interval,
                                               suffix=self._comm_words) if progress is not None else None),
                            advance=progress.advance if progress is not None else None,
                            log_interval=interval, stats=self._stats, task=self.task,
                            before_finish=self.stretch.tick if self.stretch is not None else None,
                            precision=self.ctx.cfg.precision, scaler=self.scalers["train"])
        stats.time_s = time.perf_counter() - start
        stats.sample_wait_s = self.loader.stats.wait_s
        stats.sync = self.sync.summary.as_list()
        stats.extras = {"cache_hit_rate": self.features.stats.hit_rate}
        busy = self.rebalancer.read_clock() - busy_at_start
        stats.per_rank = {"batch_share": float(share_at_start), "batch_share_end": float(self.loader.batch_size),
                          "busy_s": busy, "idle_s": max(0.0, stats.time_s - busy), "compute_s": stats.compute_s,
                          "sync_wait_s": stats.comm_exposed_s, "sample_wait_s": stats.sample_wait_s}
        if rebalancer is not None:
            stats.per_rank["seeds_received"] = float(rebalancer.migrated)
        by_scheme = getattr(self.sync.hook_state, "scheme_bytes", None)
        if by_scheme:  # SACP: this epoch's gradient bytes per layer and scheme, one dict per rank
            stats.per_rank["grad_bytes_by_layer"] = {f"{layer}:{scheme}": n for (layer, scheme), n in by_scheme.items()}
            by_scheme.clear()
        self._recheck_sync(epoch, stats.time_s / max(1, steps))
        return stats

    def _recheck_sync(self, epoch: int, step_s: float) -> None:
        """``--sync auto`` across hosts: the timed choice measured again when the step time moved (``recheck_sync``);
        the sync is rebuilt around the model if the other candidate won. Skips this process's first epoch and the
        first after a change: their steps carry warm-up."""
        if not self.ctx.decisions.get("sync_timed") or epoch >= self.ctx.cfg.epochs:  # no epoch left to use it
            return
        if self._warm_epochs:
            self._warm_epochs -= 1
            return
        slowest = float(comm.all_reduce(torch.tensor([step_s], dtype=torch.float64), op="max")[0])
        before = self.ctx.decisions["sync"]
        chosen = recheck_sync(self.ctx, slowest, self._sync_probe())
        if chosen is None:
            return
        if chosen != before:
            self.sync.close()
            self.sync = job_sync(self.ctx, self.model, mode=chosen)
            self._warm_epochs = 1
        if comm.is_main_process():
            logger.info("epoch %d: --sync auto: %s%s (%s)", epoch, chosen, "" if chosen != before else " kept",
                        self.ctx.decisions["sync_why"])

    def _comm_words(self, stats: EpochStats) -> str:
        """The progress line's tail: the exposed share of communication, and DWBP's hidden share."""
        comm_share = stats.comm_exposed_s / max(1e-9, stats.comm_exposed_s + stats.compute_s)
        hidden = self.sync.summary.hidden_fraction
        return f" | comm {100 * comm_share:.0f}%" + (f" hidden {100 * hidden:.0f}%" if hidden == hidden else "")

    # ------------------------------------------------------------- evaluation

    def _exact(self, keep_hidden: bool = False) -> Any:
        return exact_inference(self.model, self.partition, self.features.x, self.device, self.with_degrees,
                               owners=self.owners, keep_hidden=keep_hidden)

    def evaluate(self) -> dict[str, float]:
        """The task's train (full-neighbour), val and test metrics over all workers."""
        return self.task.evaluate(self.model, self.partition, self.batches, self.device, self.with_degrees)

    def predict(self) -> Predictions:
        """Logits and embeddings of this rank's inner nodes (exact layer-at-a-time inference)."""
        return predictions(self.model, self.partition, self.batches, self.device, self.with_degrees)

    # ------------------------------------------------------------- checkpoint

    def state_dict(self) -> dict[str, Any]:
        return {**self.batches.state_dict(), "sync": self.sync.state_dict()}  # the plan: the checkpoint's own

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.batches.load_state_dict(state)
        self.rebalancer.load_state_dict(state.get("placement", {}))  # a checkpoint from before it held the plan
        self.sync.load_state_dict(state.get("sync", {}))

    def close(self) -> None:
        self.sync.close()
        self.loader.close()  # its loader processes, if any
        # The rebalancer's clocks call back into this strategy: without that cycle the strategy, and
        # the sampling and sync groups in it, go with its last reference instead of waiting for a
        # garbage collection (the one at exit costs ~0.2 s per process; see comm.group).
        self.rebalancer = None


__all__ = ["MinibatchStrategy"]


class _Recording:
    """The loader's batches, each one's seed nodes kept in ``trained`` as it is handed to the step (what a
    mid-epoch checkpoint records)."""

    def __init__(self, loader: Any, trained: list[torch.Tensor]) -> None:
        self.loader, self.trained = loader, trained

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Any:
        for batch in self.loader:
            self.trained.append(batch.seed_nodes)
            yield batch
