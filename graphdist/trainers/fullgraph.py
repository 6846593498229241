"""``--strategy fullgraph`` (PipeGCN / DistGNN style): partition-parallel full-graph training.

Each worker holds its part's inner nodes and their 1-hop halo and runs every layer on its
whole part; before layers 1..L-1 the halo rows of the previous layer's embeddings come from
their owners (``graphdist.sync.halo``: one all-to-all per layer, gradients back in backward).
The input layer's halo features never change: they are fetched once. One epoch is one step
over the whole graph. The loss of each worker is its part of one global mean (sum over its
train nodes / all train nodes), so the parameter gradients are summed, not seed-weighted:
halo gradients already carry other workers' losses into this worker's layers.

``--staleness 0`` is exact: N workers compute the same logits, loss and gradients as one
process on the whole graph. ``--staleness 1`` is stale by one step (PipeGCN: layers use last step's halo
embeddings and gradients while this step's exchanges travel); ``--smoothing g`` smooths them.

Before training, each worker's peak memory is estimated (:func:`memory_estimate`) and checked
against ``--max-memory``; a part that does not fit is refused with the figures and what to do.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch

from graphdist import comm
from graphdist.models.registry import MODELS, capabilities
from graphdist.trainers.base import (EpochStats, Predictions, Progress, Strategy, WorkerContext, adam,
                                     job_sync)
from graphdist.trainers.devices import resolve_device
from graphdist.trainers.evaluate import exact_inference, full_block
from graphdist.trainers.features import feature_table
from graphdist.trainers.fullgraph_net import FullGraphNet
from graphdist.trainers.kit import broadcast_parameters, build_model, class_labels
from graphdist.trainers.precision import autocast, loss_scaler

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class MemoryEstimate:
    """A worker's estimated peak bytes in full-graph training, by what holds them."""

    features: int
    graph: int
    activations: int
    stale: int

    @property
    def total(self) -> int:
        return self.features + self.graph + self.activations + self.stale

    def describe(self) -> str:
        gib = 2**30
        return (f"{self.total / gib:.2f} GiB (features {self.features / gib:.2f}, graph {self.graph / gib:.2f}, "
                f"activations and their gradients {self.activations / gib:.2f}, stale buffers {self.stale / gib:.2f})")


def memory_estimate(num_inner: int, num_halo: int, num_edges: int, dims: list[int], staleness: int = 0,
                    heads: int = 1) -> MemoryEstimate:
    """Estimated peak of one worker: float32 tables, int64 CSR, per layer what autograd keeps.

    Per layer with input width ``d_in`` and output ``d_out``: the full input (inner + halo rows)
    kept for backward, and on the inner rows the aggregate, the pre- and post-activation output
    and the dropout mask; backward holds as much again in gradients. GAT keeps per-edge scores
    per head. Stale buffers (``staleness=1``): per exchanged layer the halo rows, the owed halo
    gradients and the payloads in flight.

    Example:
        >>> e = memory_estimate(num_inner=1000, num_halo=200, num_edges=10_000, dims=[100, 64, 7])
        >>> e.features, e.graph, e.total > e.features + e.graph
        (480000, 160000, True)
    """
    local = num_inner + num_halo
    features = 4 * local * dims[0]
    graph = 16 * num_edges  # src and dst int64 of the full block (CSR indptr is small)
    activations = 0
    for d_in, d_out in zip(dims[:-1], dims[1:]):
        activations += 4 * (local * d_in + num_inner * (d_in + 3 * d_out)) + 3 * 4 * num_edges * heads
    activations *= 2  # their gradients in backward
    stale = sum(4 * 2 * (num_halo + num_inner) * d for d in dims[1:-1]) if staleness else 0
    return MemoryEstimate(features, graph, activations, stale)


class MemoryBudgetError(ValueError):
    """A part's estimated full-graph peak exceeds the memory a worker has; says what to do."""


def check_memory(cfg: Any, meta: dict[str, Any], part_ids: Sequence[int], local_workers: int) -> MemoryEstimate:
    """The estimate of a worker holding ``part_ids`` from ``meta.json`` (a union's halo: at most the sum of its
    parts'); raises :class:`MemoryBudgetError` over ``--max-memory``.

    Example:
        >>> from graphdist.config import TrainConfig
        >>> meta = {"feature_dim": 100, "num_classes": 7,
        ...         "parts": [{"num_inner": 10**6, "num_halo": 10**5, "num_inner_edges": 2 * 10**7}]}
        >>> try:
        ...     check_memory(TrainConfig(strategy="fullgraph", max_memory=1.0), meta, [0], 1)
        ... except MemoryBudgetError as e:
        ...     print(e)
        --strategy fullgraph: part 0 needs about 8.19 GiB (features 0.41, graph 0.30, activations and their gradients 7.48, stale buffers 0.00) but a worker has --max-memory 1.00 GiB; partition into more parts (--num-parts), or use --strategy minibatch
        >>> check_memory(TrainConfig(strategy="fullgraph", max_memory=16.0), meta, [0], 1).total // 2**20
        8383
    """
    counts = {k: sum(int(meta["parts"][p][k]) for p in part_ids)
              for k in ("num_inner", "num_halo", "num_inner_edges")}
    which = f"part {part_ids[0]}" if len(part_ids) == 1 else f"parts {list(part_ids)}"
    widen = MODELS[cfg.model].width_factor(cfg) if cfg.model in MODELS else 1
    dims = [int(meta["feature_dim"])] + [cfg.hidden * widen] * (cfg.layers - 1) + [int(meta.get("num_classes") or 1)]
    estimate = memory_estimate(counts["num_inner"], counts["num_halo"], counts["num_inner_edges"],
                               dims, cfg.staleness, widen)
    limit = cfg.max_memory if cfg.max_memory is not None else default_max_memory_gib(local_workers)
    if estimate.total > limit * 2**30:
        raise MemoryBudgetError(
            f"--strategy fullgraph: {which} needs about {estimate.describe()} but a worker has "
            f"--max-memory {limit:.2f} GiB; partition into more parts (--num-parts), or use --strategy minibatch"
        )
    return estimate


def default_max_memory_gib(local_workers: int) -> float:
    """This machine's memory divided by the workers it runs (the ``--max-memory`` default)."""
    import psutil

    return psutil.virtual_memory().total / 2**30 / max(1, local_workers)


class FullGraphStrategy(Strategy):
    """Full-graph training on each worker's parts with halo embedding exchange (exact or stale)."""

    name = "fullgraph"

    def __init__(self, ctx: WorkerContext) -> None:
        super().__init__(ctx)
        from sampling.owners import OwnerMap

        cfg, rank = ctx.cfg, ctx.rank
        mine = ctx.plan.of(rank)
        self.device = resolve_device(mine.device)
        self.partition = part = ctx.partitions.load(mine.parts)
        model = build_model(ctx, int(part.x.shape[1]), self.task.out_dim(part.meta, cfg.hidden))
        _check_layer_forward(model)
        self.with_degrees = capabilities(model).global_degrees
        # Under torchrun no launcher checked before the workers started: each rank checks its part.
        self.memory = check_memory(cfg, part.meta, part.parts, int(os.environ.get("LOCAL_WORLD_SIZE",
                                                                                    cfg.num_workers)))
        self.owners = OwnerMap.from_parts(part.part_offsets, ctx.plan.rank_of_part, ctx.world_size)
        from graphdist.sync.compress import CAST_DTYPES
        from graphdist.sync.halo import HaloExchange

        # Halo exchanges get their own group: with staleness they are in flight while gradient
        # sync and evaluation use the default one.
        # --compress fp16|bf16 halves the halo's bytes too (int8 quantises gradient buckets only).
        wire = CAST_DTYPES.get(cfg.compress)
        self.halo = HaloExchange(part, self.owners, group=comm.new_group(cfg.timeout), staleness=cfg.staleness,
                                 smoothing=cfg.smoothing, boundary_sample=cfg.boundary_sample, seed=cfg.seed,
                                 wire_dtype=wire)
        self._build_inputs()
        self.model = model.to(self.device)
        broadcast_parameters(self.model)
        self.net = FullGraphNet(self.model, self.halo, self.x0, self.block, self.device)
        self.optimizer = adam(self.model.parameters(), cfg.lr, cfg.weight_decay)
        self.scalers = {"train": loss_scaler(cfg.precision, self.device)}
        if cfg.placement == "profiled" and ctx.world_size > 1:
            from graphdist.trainers.profile import profile_fullgraph

            # Nothing to choose (no batch shares): the profile is for graphdist-plan and the simulator.
            # Before the run's own sync exists: a model copy made after would carry its gradient hooks.
            profile_fullgraph(self, ctx.run_dir)
        self.sync = job_sync(ctx, self.net, seed_weighted=False)
        self._last_start: Optional[float] = None
        if comm.is_main_process():
            logger.debug("%s: %s inner, %s halo (%s boundary rows sent per layer), %s train nodes of %s, "
                        "staleness %d", part.name, f"{part.num_inner:,}", f"{part.num_halo:,}",
                        f"{self.halo.boundary_rows:,}", f"{int(self.train.numel()):,}", f"{self.num_train_total:,}",
                        cfg.staleness)

    def describe(self) -> list[tuple[str, str]]:
        cfg = self.ctx.cfg
        halo = "exact halo exchange" if cfg.staleness == 0 else f"halo {cfg.staleness} step stale (pipelined)"
        words = [f"fullgraph, {halo}", f"{self.halo.boundary_rows:,} boundary rows sent per layer"]
        if cfg.boundary_sample < 1:
            words.append(f"boundary sample {cfg.boundary_sample:g}")
        return [("strategy", ", ".join(words)), *super().describe()[1:]]

    # ------------------------------------------------------------ set-up steps

    def _build_inputs(self) -> None:
        """Input features of inner + halo rows, the normalised full block, labels and train rows."""
        from graphdist.models import gcn_norm_block

        part, cfg = self.partition, self.ctx.cfg
        table = feature_table(part, cfg.feature_norm, with_degrees=False)
        self.x0 = torch.cat([table, self.halo.fetch(table)]).to(self.device)
        block = full_block(part)
        if self.with_degrees:
            degrees = part.in_degrees().to(torch.float32).view(-1, 1)
            block = gcn_norm_block(block, torch.cat([degrees, self.halo.fetch(degrees)]).view(-1))
        self.full_block = self.block = block.to(self.device)
        self.y = class_labels(part.y).to(self.device) if part.y is not None else None
        mask = part.train_mask
        self.train = (mask.to(torch.bool).nonzero().view(-1) if mask is not None
                      else torch.arange(part.num_inner)).to(self.device)
        self.num_train_total = int(comm.all_reduce(torch.tensor([float(self.train.numel())]), tag="init").item())

    @classmethod
    def planned_steps(cls, cfg: Any, meta: dict[str, Any]) -> int:
        return 1  # the whole graph is the batch

    @classmethod
    def check(cls, cfg: Any, meta: dict[str, Any], model: Optional[torch.nn.Module] = None) -> None:
        """Before any worker starts: a model with layer_forward, and every part within --max-memory."""
        if model is not None:
            _check_layer_forward(model)
        for p in range(int(meta["num_parts"])):
            check_memory(cfg, meta, [p], cfg.num_workers)

    # ---------------------------------------------------------------- training

    @property
    def steps_per_epoch(self) -> int:
        return 1

    def train_epoch(self, epoch: int, progress: Optional[Progress] = None) -> EpochStats:
        """One full-graph step: every layer on the whole part, halo exchanged between layers."""
        stats = EpochStats()
        self.model.train()
        self.sync.reset_summary()
        comm_before = comm.time_counts().get("halo", 0.0)
        start = time.perf_counter()
        if self.ctx.cfg.boundary_sample < 1.0:
            self.halo.set_epoch(epoch)
            self.net.block = sampled_block(self.full_block, self.halo.kept_halo.to(self.device),
                                           self.partition.num_inner, self.ctx.cfg.boundary_sample)
        self.optimizer.zero_grad(set_to_none=False)
        n = int(self.train.numel())
        self.sync.begin_step(n)
        with autocast(self.ctx.cfg.precision, self.device):
            out = self.sync.model()
            loss = self.loss(out)
        scaler = self.scalers["train"]
        scaler.scale(loss).backward()
        t_wait = time.perf_counter()
        self.sync.finish()
        t_synced = time.perf_counter()
        scaler.step(self.optimizer)  # the plain step unless --precision fp16
        scaler.update()
        self.halo.step += 1
        stats.time_s = time.perf_counter() - start
        stats.steps = 1
        # loss_sum / seeds must give the global mean: this rank's share of it, times all train nodes.
        stats.loss_sum = float(loss.detach()) * self.num_train_total
        stats.seeds = n
        stats.step_losses = [stats.loss_sum / max(1, n)]  # this rank's own mean, as train_steps records
        if n:
            stats.correct = self.task.correct(out.detach().index_select(0, self.train),
                                              self.y.index_select(0, self.train))
        stats.comm_exposed_s = t_synced - t_wait
        halo_wait = comm.time_counts().get("halo", 0.0) - comm_before
        stats.compute_s = stats.time_s - stats.comm_exposed_s - halo_wait
        stats.sync = self.sync.summary.as_list()
        # With staleness the exchanges outlive the epoch: what they still need lands in whatever uses
        # the link next (the record's allreduce, evaluation), outside time_s. The period, start to
        # start (the previous epoch's evaluation and checkpoint included; 0 for the first), is what
        # an epoch really costs: benches time full-graph runs by it.
        period = start - self._last_start if self._last_start is not None else 0.0
        self._last_start = start
        stats.extras = {"halo_wait_s": halo_wait, "period_s": period}
        return stats  # one step per epoch: the loop's epoch line is the progress line

    def loss(self, out: torch.Tensor) -> torch.Tensor:
        """This rank's share of the global mean loss over every part's train nodes."""
        if not self.train.numel():
            return out.sum() * 0.0  # still runs backward: its halo gradients and collectives are owed
        return self.task.loss(out.index_select(0, self.train), self.y.index_select(0, self.train),
                              reduction="sum") / max(1, self.num_train_total)

    # ------------------------------------------------------------- evaluation

    def _exact(self, keep_hidden: bool = False) -> Any:
        table = feature_table(self.partition, self.ctx.cfg.feature_norm, self.with_degrees)
        return exact_inference(self.model, self.partition, table, self.device, self.with_degrees,
                               owners=self.owners, keep_hidden=keep_hidden)

    def evaluate(self) -> dict[str, float]:
        # every boundary node, whatever the sampling
        return self.task.metrics(self.task.predict(self._exact()), self.partition)

    def predict(self) -> Predictions:
        logits, hidden = self._exact(keep_hidden=True)
        part = self.partition
        return Predictions(orig_ids=part.orig_ids.index_select(0, part.global_ids[: part.num_inner]), logits=logits,
                           embeddings=hidden)

    # ------------------------------------------------------------- checkpoint

    def state_dict(self) -> dict[str, Any]:
        return {"halo": self.halo.state_dict(), "sync": self.sync.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.halo.load_state_dict(state.get("halo", {}))
        self.sync.load_state_dict(state.get("sync", {}))

    def close(self) -> None:
        self.halo.drain()  # nothing in flight when the groups go away
        self.sync.close()


def sampled_block(block: Any, kept_halo: torch.Tensor, num_inner: int, p: float) -> Any:
    """``block`` without the edges from dropped halo nodes (BNS-GCN); kept halo edges' weights / p.

    Dividing by p keeps a weighted sum (GCN) unbiased; mean and attention aggregators renormalise
    over the kept neighbours themselves.

    Example:
        >>> from sampling.base import Block
        >>> b = Block(src=torch.tensor([0, 2, 3]), dst=torch.tensor([0, 0, 1]), num_src=4, num_dst=2,
        ...           indptr=torch.tensor([0, 2, 3]), edge_weight=torch.ones(3))
        >>> s = sampled_block(b, torch.tensor([False, True]), num_inner=2, p=0.5)
        >>> s.src.tolist(), s.indptr.tolist(), s.edge_weight.tolist()
        ([0, 3], [0, 1, 2], [1.0, 2.0])
    """
    from dataclasses import replace

    from graphdist.data.graph import counts_to_indptr

    is_halo = block.src >= num_inner
    keep = ~is_halo | kept_halo[(block.src - num_inner).clamp(min=0)]
    dst = block.dst[keep]
    weight = None
    if block.edge_weight is not None:
        weight = block.edge_weight[keep] * torch.where(is_halo[keep], 1.0 / p, 1.0).to(block.edge_weight.dtype)
    return replace(block, src=block.src[keep], dst=dst, edge_weight=weight,
                   indptr=counts_to_indptr(torch.bincount(dst, minlength=block.num_dst)))


def _check_layer_forward(model: torch.nn.Module) -> None:
    if not capabilities(model).layer_forward:
        raise ValueError(
            f"--strategy fullgraph runs the model layer by layer, with a halo exchange between layers: "
            f"{type(model).__name__} needs num_layers and layer_forward(i, x, block) (wrap PyG layers with "
            "graphdist.models.as_block_model), or train it with --strategy minibatch"
        )


__all__ = ["FullGraphNet", "FullGraphStrategy", "MemoryBudgetError", "sampled_block", "MemoryEstimate", "check_memory",
           "default_max_memory_gib", "memory_estimate"]
