"""``--strategy aggregation`` (RandomTMA / SuperTMA, LLCG): train alone on each part, average the models.

Each worker trains mini-batches (the same ``--fanouts`` and global ``--batch-size``, split by
the plan as in ``minibatch``) on the subgraph induced by its own part's inner nodes: no
cross-part edges, no remote sampling, no feature bytes between workers while it trains. Its
parameters are averaged with the other workers' every ``--avg-every K`` steps (or every
``--avg-seconds T``: the ranks agree on the step with a one-number all-reduce) and always at
the end of every epoch, so every rank evaluates and checkpoints the same model.
``--avg-overlap`` hides each mid-epoch average behind the next step (it lands one step late;
``sync.averaging``). Optimizer state stays local unless ``--avg-optimizer``. GCN normalises with the induced subgraph's
degrees in training and the global degrees in evaluation.

Randomised partitions (``random``, ``super``) are what make plain averaging work: each part
then sees the global label mix, where METIS's parts are label-skewed (the partition stats'
TVD says how much). ``--correction-steps S`` (LLCG) runs S global mini-batch steps after each
averaging, sampled from the whole graph through the distributed sampler with gradient sync,
which removes plain averaging's residual error.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Optional, Sequence

import torch

from graphdist import comm
from graphdist.models.registry import capabilities
from graphdist.trainers.base import (EpochStats, Predictions, Progress, Strategy, WorkerContext, adam,
                                     gradient_allreduce, job_sync)
from graphdist.trainers.batches import DistributedBatches
from graphdist.trainers.devices import resolve_device
from graphdist.trainers.kit import (broadcast_parameters, build_model, loader_count, loader_seed, predictions,
                                    sampler_seed, use_prefetch)
from graphdist.trainers.precision import loss_scaler
from graphdist.trainers.samplers import local_graph, training_loader
from graphdist.trainers.steps import reporter, train_steps
from partition.stats import group_label_tvd

logger = logging.getLogger(__name__)


def part_label_tvd(meta: dict[str, Any], part_ids: Sequence[int]) -> float:
    """The label TVD of parts ``part_ids`` against the whole graph (``partition.stats.group_label_tvd``; nan: no labels).

    Example:
        >>> part_label_tvd({"parts": [{"label_counts": [3, 1]}, {"label_counts": [1, 3]}]}, [0])
        0.25
    """
    return group_label_tvd([p.get("label_counts") for p in meta["parts"]], part_ids)


def make_averager(cfg: Any, algorithm: Any) -> Any:
    """``--avg-seconds`` (time-based) if given, else ``--avg-every``."""
    from graphdist.sync.averaging import PeriodicAverager, TimedAverager

    if cfg.avg_seconds is not None:
        return TimedAverager(cfg.avg_seconds, algorithm=algorithm, overlap=cfg.avg_overlap)
    return PeriodicAverager(cfg.avg_every, algorithm=algorithm, overlap=cfg.avg_overlap)


class AggregationStrategy(Strategy):
    """Local training on each part's induced subgraph, parameters averaged (optionally corrected)."""

    name = "aggregation"

    def __init__(self, ctx: WorkerContext) -> None:
        super().__init__(ctx)
        from graphdist.sync import NoSync

        cfg, rank = ctx.cfg, ctx.rank
        mine = ctx.plan.of(rank)
        self.device = resolve_device(mine.device)
        self.partition = part = ctx.partitions.load(mine.parts)
        model = build_model(ctx, int(part.x.shape[1]), self.task.out_dim(part.meta, cfg.hidden))
        self.with_degrees = capabilities(model).global_degrees
        # Training sees the induced subgraph only: its own degrees (GCN) in the table's last column.
        self.local_graph = local_graph(part, cfg.feature_norm, self.with_degrees)
        train = (part.train_mask.to(torch.bool).nonzero().view(-1) if part.train_mask is not None
                 else torch.arange(part.num_inner))
        self.loader = training_loader(cfg.sampler, self.local_graph, train, ctx.plan.steps_per_epoch, mine.batch_share,
                                      cfg, seed=loader_seed(cfg.seed, rank),
                                      prefetch=use_prefetch(cfg.prefetch, torch.get_num_threads()),
                                      sampler_seed=sampler_seed(cfg.seed, rank), device=self.device,
                                      loaders=loader_count(cfg.loaders, self.device, torch.get_num_threads(),
                                                           ctx.world_size))
        # Evaluation (and correction steps) read the whole graph: the distributed sources, global degrees.
        self.batches = DistributedBatches(ctx, part, self.with_degrees, num_batches=max(1, cfg.correction_steps),
                                          task=self.task, device=self.device)
        self.model = model.to(self.device)
        broadcast_parameters(self.model)
        self.optimizer = adam(self.model.parameters(), cfg.lr, cfg.weight_decay)
        # The correction steps' own optimizer (LLCG's server): every rank starts it alike and feeds
        # it the same synced gradients, so it stays identical everywhere, and so do the parameters;
        # the local optimizers' moments differ from rank to rank.
        self.correction_optimizer = adam(self.model.parameters(), cfg.lr, cfg.weight_decay)
        # fp16: the local steps' scale follows this rank's own gradients; the correction steps sum
        # every rank's scaled gradients, so they need one scale on every rank: a scaler of their own.
        self.scalers = {"train": loss_scaler(cfg.precision, self.device),
                        "correction": loss_scaler(cfg.precision, self.device)}
        self.local_sync = NoSync(self.model)
        self.algorithm = gradient_allreduce(ctx, self.model)
        self.averager = make_averager(cfg, self.algorithm)
        self.label_tvd = part_label_tvd(part.meta, part.parts)
        if cfg.avg_seconds is None and cfg.avg_every >= self.steps_per_epoch and comm.is_main_process():
            logger.warning("--avg-every %d >= the %d steps of an epoch: parameters are averaged once per epoch only",
                           cfg.avg_every, self.steps_per_epoch)
        if comm.is_main_process():
            logger.debug("%s: %s inner nodes, %s of %s in-edges kept (induced subgraph), %s train seeds, "
                        "averaging %s, optimizer state %s, %d correction steps", part.name, f"{part.num_inner:,}",
                        f"{self.local_graph.num_edges:,}", f"{int(part.indptr[part.num_inner]):,}",
                        f"{int(train.numel()):,}", f"every {cfg.avg_seconds} s" if cfg.avg_seconds else
                        f"every {cfg.avg_every} steps" + (", overlapped" if cfg.avg_overlap else ""),
                        "averaged" if cfg.avg_optimizer else "local",
                        cfg.correction_steps)

    @property
    def steps_per_epoch(self) -> int:
        return len(self.loader)

    def describe(self) -> list[tuple[str, str]]:
        from graphdist.sync.layerwise import describe_algorithm

        cfg = self.ctx.cfg
        every = f"every {cfg.avg_seconds:g} s" if cfg.avg_seconds else f"every {cfg.avg_every} steps"
        words = [f"aggregation, {self.steps_per_epoch} local steps an epoch on the part's own edges",
                 f"rank 0's label TVD {self.label_tvd:.2f}" if self.label_tvd == self.label_tvd else ""]  # nan: no labels
        sync = [f"parameters averaged {every}" + (", overlapped" if cfg.avg_overlap else ""),
                f"optimizer state {'averaged' if cfg.avg_optimizer else 'local'}",
                f"{cfg.correction_steps} correction steps" if cfg.correction_steps else "",
                f"allreduce {describe_algorithm(self.algorithm)}" if self.ctx.world_size > 1 else ""]
        return [("strategy", ", ".join(w for w in words if w)), ("sync", ", ".join(w for w in sync if w))]

    # ---------------------------------------------------------------- training

    def _average(self) -> None:
        self.averager.average_now(self._averaged_tensors())

    def _averaged_tensors(self) -> list[torch.Tensor]:
        from graphdist.sync.averaging import optimizer_tensors

        tensors = [p.data for p in self.model.parameters()]
        return tensors + optimizer_tensors(self.optimizer) if self.ctx.cfg.avg_optimizer else tensors

    def _after_step(self, step: int, seeds: int = 0) -> None:
        if step < self.steps_per_epoch and self.averager.average_parameters(self._averaged_tensors()):
            self._correct()

    def _correct(self) -> None:
        """LLCG's global correction: S mini-batch steps over the whole graph, gradients synced."""
        steps = self.ctx.cfg.correction_steps
        if not steps:
            return

        # A sync for these steps only: local steps must not meet its gradient hooks.
        sync = job_sync(self.ctx, self.model, self.algorithm)
        try:
            self._correction_stats = train_steps(self.batches.loader, sync, self.correction_optimizer, self.device,
                                                 self.with_degrees, stats=self._correction_stats, task=self.task,
                                                 precision=self.ctx.cfg.precision, scaler=self.scalers["correction"])
        finally:
            sync.close()

    def train_epoch(self, epoch: int, progress: Optional[Progress] = None) -> EpochStats:
        self.model.train()
        start = time.perf_counter()
        self.loader.stats.reset()
        self._correction_stats = EpochStats()
        averages_before = self.averager.averages
        cfg = self.ctx.cfg
        report = (reporter(progress, epoch, self.steps_per_epoch, self.ctx.world_size, cfg.log_interval)
                  if progress is not None else None)
        stats = train_steps(self.loader, self.local_sync, self.optimizer, self.device, self.with_degrees,
                            after_step=self._after_step, task=self.task, precision=cfg.precision,
                            scaler=self.scalers["train"], log_interval=cfg.log_interval,
                            progress=report, advance=progress.advance if progress is not None else None)
        self.averager.step += 1  # the epoch's last step: it always averages (below), never twice
        self._average()
        self._correct()
        stats.time_s = time.perf_counter() - start
        stats.sample_wait_s = self.loader.stats.wait_s
        stats.extras = {"averages": float(self.averager.averages - averages_before),
                        "correction_steps": float(self._correction_stats.steps), "label_tvd": self.label_tvd}
        return stats

    # ------------------------------------------------------------- evaluation

    def evaluate(self) -> dict[str, float]:
        return self.task.evaluate(self.model, self.partition, self.batches, self.device, self.with_degrees)

    def predict(self) -> Predictions:
        return predictions(self.model, self.partition, self.batches, self.device, self.with_degrees)

    # ------------------------------------------------------------- checkpoint

    def close(self) -> None:
        self.loader.close()  # its loader processes, if any

    def state_dict(self) -> dict[str, Any]:
        # This rank's own optimizer: its moments are local (the checkpoint's optimizer is rank 0's).
        return {"loader": self.loader.state_dict(), "averager": self.averager.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "correction": self.batches.state_dict(), "correction_optimizer": self.correction_optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loader.load_state_dict(state["loader"])
        self.averager.load_state_dict(state["averager"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.batches.load_state_dict(state["correction"])
        self.correction_optimizer.load_state_dict(state["correction_optimizer"])

    def resized_state(self, fresh: dict[str, Any], saved: list[dict[str, Any]]) -> dict[str, Any]:
        """On another worker count: the optimizer's moments averaged over the saved ranks (each rank kept its own
        between averages, unless ``--avg-optimizer``); the rest as built for the new formation."""
        return {**fresh, "optimizer": averaged_optimizer_state([r["optimizer"] for r in saved])}


def averaged_optimizer_state(states: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Several ranks' ``optimizer.state_dict()`` of one model as one: floating tensors (Adam's moments)
    averaged, the rest (its step count) taken from the first.

    Example:
        >>> a = {"state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.tensor([1.0])}}, "param_groups": [{}]}
        >>> b = {"state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.tensor([3.0])}}, "param_groups": [{}]}
        >>> averaged_optimizer_state([a, b])["state"][0]["exp_avg"]
        tensor([2.])
    """
    first = states[0]
    merged = {}
    for key, slots in first["state"].items():
        merged[key] = {name: (torch.stack([s["state"][key][name] for s in states]).mean(0)
                              if isinstance(value, torch.Tensor) and value.is_floating_point() and name != "step"
                              else value)
                       for name, value in slots.items()}
    return {"state": merged, "param_groups": first["param_groups"]}


__all__ = ["AggregationStrategy", "averaged_optimizer_state", "make_averager", "part_label_tvd"]
