"""Mini-batch training (DistDGL-like): one partition per worker, distributed sampling, layer-wise sync.

Per worker: load its partition; sample seeds from its own train nodes with the
distributed sampler (remote neighbourhoods and features come from their owners,
hot remote features from a cache); train; sync gradients layer by layer
(DWBP by default). Every worker runs the same number of steps per epoch: the
global batch is split in proportion to each worker's train nodes. Evaluation is
exact layer-wise full-neighbour inference, distributed the same way.

This module composes the pieces; the algorithms live in ``sampling``,
``graphdist.sync``, ``graphdist.models`` and ``graphdist.comm``.
"""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F

from graphdist import comm
from graphdist.config import TrainConfig

logger = logging.getLogger(__name__)


@dataclass
class EpochStats:
    """What one epoch measured on this rank (summed or averaged over ranks by ``reduce``)."""

    loss_sum: float = 0.0
    seeds: int = 0
    correct: int = 0
    time_s: float = 0.0
    sample_wait_s: float = 0.0
    compute_s: float = 0.0
    comm_exposed_s: float = 0.0
    comm_total_s: float = 0.0
    backward_s: float = 0.0
    hidden_sum: float = 0.0
    predicted_sum: float = 0.0
    hidden_steps: int = 0


@dataclass
class WorkerState:
    """Everything one worker holds while training."""

    rank: int
    world_size: int
    cfg: TrainConfig
    device: torch.device
    partition: Any
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    sync: Any
    loader: Any
    sampler: Any
    neighbor_source: Any
    features: Any
    train_seeds: torch.Tensor
    steps_per_epoch: int
    with_degrees: bool = False  # features carry a last column of global in-degrees (GCN)


def _log(rank: int, msg: str, *args: Any) -> None:
    if rank == 0:
        logger.info(msg, *args)


# ------------------------------------------------------------------- set-up


def resolve_device(spec: str) -> torch.device:
    """``cpu`` or ``cuda[:i]``, checked: a CUDA device on a CPU-only build is a clear error."""
    if spec.startswith("cuda"):
        if not torch.cuda.is_available():
            raise RuntimeError(f"--devices asks for {spec} but this torch build / machine has no CUDA device")
        return torch.device(spec)
    return torch.device("cpu")


def steps_per_epoch(train_counts: list[int], batch_size: int) -> int:
    """Steps every worker runs: the global batch covers all train nodes once per epoch.

    Example:
        >>> steps_per_epoch([100, 60], 64)
        3
    """
    return max(1, math.ceil(sum(train_counts) / batch_size))


def use_prefetch(setting: Optional[bool], threads: int) -> bool:
    """``--prefetch`` as given, or (None) whether this process may run on more cores than it computes on.

    Example:
        >>> use_prefetch(False, 1)
        False
    """
    if setting is not None:
        return setting
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    return cores > threads


def local_batch_size(num_train: int, steps: int) -> int:
    """This worker's batch share: its train nodes spread over the common step count."""
    return max(1, math.ceil(num_train / steps)) if num_train else 1


def build_worker(
    rank: int,
    world_size: int,
    cfg: TrainConfig,
    partition_dir: str,
    model: Optional[torch.nn.Module] = None,
) -> WorkerState:
    """Loads this rank's partition and builds sampler, loader, model, optimizer and sync."""
    from graphdist.models import build_model
    from graphdist.sync import LayerwiseSync
    from partition.api import load_partition
    from sampling import NeighborSampler, NodeLoader
    from sampling.distributed import DistFeatureSource, DistNeighborSource

    device = resolve_device(cfg.device_of(rank))
    part = load_partition(partition_dir, rank)
    if part.num_parts != world_size:
        raise ValueError(
            f"{partition_dir} has {part.num_parts} parts but the job has {world_size} workers; "
            f"repartition with --num-parts {world_size} or run --num-workers {part.num_parts}"
        )
    # Sampling and feature fetch may run in the prefetch thread: their collectives get a
    # group of their own, so they never interleave with gradient sync on the default group.
    sample_group = comm.new_group(cfg.timeout)
    neighbor_source = DistNeighborSource(part, group=sample_group, seed=cfg.seed)
    sampler = NeighborSampler(neighbor_source, cfg.fanouts, seed=cfg.seed * 1000 + rank)
    num_remote = part.num_local - part.num_inner
    cache_rows = cfg.cache_rows if cfg.cache_rows > 0 else None
    num_classes = int(part.meta.get("num_classes") or 0)
    if model is None:
        torch.manual_seed(cfg.seed)  # same initial weights on every rank
        extra = {"heads": cfg.heads} if cfg.model == "gat" else {}
        model = build_model(cfg.model, part.x.shape[1], cfg.hidden, num_classes, cfg.layers,
                            dropout=cfg.dropout, **extra)
    table = normalize_features(part.x, cfg.feature_norm)
    with_degrees = bool(getattr(model, "needs_global_degrees", False))
    if with_degrees:
        # Global in-degrees travel as one extra feature column: remote nodes' degrees then come
        # with their features (same fetch, same cache) and the batch carries them.
        table = torch.cat([table, inner_degrees(part).to(table.dtype).view(-1, 1)], dim=1)
    features = DistFeatureSource(part, group=sample_group, cache_rows=cache_rows, features=table)

    inner_ids = torch.arange(part.num_inner, dtype=torch.int64) + int(part.part_offsets[rank])
    train_seeds = inner_ids[part.train_mask.to(torch.bool)] if part.train_mask is not None else inner_ids
    counts = comm.all_gather_object(int(train_seeds.numel()))
    steps = steps_per_epoch(counts, cfg.batch_size)
    batch = local_batch_size(int(train_seeds.numel()), steps)
    if cfg.max_steps:
        steps = min(steps, cfg.max_steps)

    labels = part.y.to(torch.int64) if part.y is not None else None
    loader = NodeLoader(
        features,
        train_seeds,
        sampler,
        batch_size=batch,
        shuffle=True,
        labels=_GlobalLabels(labels, int(part.part_offsets[rank])) if labels is not None else None,
        num_batches=steps,
        prefetch=use_prefetch(cfg.prefetch, cfg.threads),
        seed=cfg.seed * 1000 + rank + 17,
    )

    model = model.to(device)
    _broadcast_parameters(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sync = LayerwiseSync(model, mode=cfg.sync)
    _log(
        rank,
        "part %d: %s inner, %s halo, %s train seeds, batch share %d, %d steps/epoch, cache %d of %d remote rows, "
        "prefetch %s",
        rank, f"{part.num_inner:,}", f"{num_remote:,}", f"{int(train_seeds.numel()):,}", batch, steps,
        int(features.cache_ids.numel()), num_remote, "on" if loader.prefetch else "off",
    )
    return WorkerState(
        rank=rank, world_size=world_size, cfg=cfg, device=device, partition=part, model=model,
        optimizer=optimizer, sync=sync, loader=loader, sampler=sampler, neighbor_source=neighbor_source,
        features=features, train_seeds=train_seeds, steps_per_epoch=steps,
        with_degrees=with_degrees,
    )


def normalize_features(x: torch.Tensor, how: str) -> torch.Tensor:
    """``row``: each row divided by its sum (rows summing to 0 stay 0); ``none``: ``x`` itself.

    Example:
        >>> normalize_features(torch.tensor([[1.0, 3.0], [0.0, 0.0]]), "row").tolist()
        [[0.25, 0.75], [0.0, 0.0]]
    """
    if how == "none":
        return x
    return x / x.sum(dim=1, keepdim=True).clamp(min=1e-12)


def inner_degrees(part: Any) -> torch.Tensor:
    """Global in-degree of this part's inner nodes: their CSR rows hold every in-neighbour."""
    indptr = part.indptr[: part.num_inner + 1]
    return indptr[1:] - indptr[:-1]


def model_inputs(x: torch.Tensor, blocks: list[Any], with_degrees: bool) -> tuple[torch.Tensor, list[Any]]:
    """Splits the degree column off ``x`` and normalises the blocks with it (GCN); else as given."""
    if not with_degrees:
        return x, blocks
    from graphdist.models import gcn_norm_block

    degrees = x[:, -1]
    return x[:, :-1], [gcn_norm_block(b, degrees[: b.num_src]) for b in blocks]


class _GlobalLabels:
    """Labels of this worker's inner nodes, indexed by global id (seeds are always inner)."""

    def __init__(self, y: torch.Tensor, offset: int) -> None:
        self.y, self.offset = y, offset

    def __call__(self, nodes: torch.Tensor) -> torch.Tensor:
        return self.y.index_select(0, nodes - self.offset)


def _broadcast_parameters(model: torch.nn.Module) -> None:
    """Rank 0's initial weights everywhere (a user model may have been built with any seed)."""
    with torch.no_grad():
        for p in model.state_dict().values():
            if torch.is_floating_point(p):
                comm.broadcast(p, src=0, tag="init")


# ------------------------------------------------------------------ training


def train_epoch(state: WorkerState, epoch: int, on_step: Optional[Callable[[int, float], None]] = None) -> EpochStats:
    """One epoch of ``steps_per_epoch`` steps on this rank."""
    model, sync, opt, cfg = state.model, state.sync, state.optimizer, state.cfg
    model.train()
    stats = EpochStats()
    start = time.perf_counter()
    interval_start, interval_seeds = start, 0
    state.loader.stats.reset()
    sync.reset_summary()
    for step, batch in enumerate(state.loader, start=1):
        t0 = time.perf_counter()
        batch = batch.to(state.device) if state.device.type != "cpu" else batch
        n = int(batch.seed_nodes.numel())
        opt.zero_grad(set_to_none=False)
        sync.begin_step(n)
        x, blocks = model_inputs(batch.x, batch.blocks, state.with_degrees)
        out = sync.model(x, blocks)  # the DDP wrapper in ddp mode
        if n:
            loss = F.cross_entropy(out, batch.y)
        else:
            # No seeds this step: a zero loss still runs backward, so every layer's
            # collective is issued as on the other ranks.
            loss = out.sum() * 0.0
        loss.backward()
        t_wait = time.perf_counter()
        sync.finish()
        t_synced = time.perf_counter()
        opt.step()
        t1 = time.perf_counter()
        stats.loss_sum += float(loss.detach()) * n
        stats.seeds += n
        if n:
            stats.correct += int((out.detach().argmax(dim=-1) == batch.y).sum())
        stats.comm_exposed_s += t_synced - t_wait
        stats.compute_s += (t1 - t0) - (t_synced - t_wait)
        step_stats = sync.last_step_stats
        if step_stats is not None and step_stats.comm_s > 0:
            stats.comm_total_s += step_stats.comm_s
            stats.backward_s += step_stats.backward_s
            stats.hidden_sum += step_stats.hidden_fraction
            stats.predicted_sum += step_stats.predicted_hidden_fraction
            stats.hidden_steps += 1
        interval_seeds += n
        if on_step is not None and (step % cfg.log_interval == 0 or step == state.steps_per_epoch):
            now = time.perf_counter()
            on_step(step, _progress(state, epoch, step, stats, interval_seeds, now - interval_start))
            interval_start, interval_seeds = now, 0
    stats.time_s = time.perf_counter() - start
    stats.sample_wait_s = state.loader.stats.wait_s
    return stats


def _progress(state: WorkerState, epoch: int, step: int, stats: EpochStats, seeds: int, seconds: float) -> str:
    ms = 1000.0 * seconds / max(1, min(state.cfg.log_interval, step))
    comm_share = stats.comm_exposed_s / max(1e-9, stats.comm_exposed_s + stats.compute_s)
    hidden = stats.hidden_sum / stats.hidden_steps if stats.hidden_steps else float("nan")
    loss = stats.loss_sum / max(1, stats.seeds)
    return (
        f"epoch {epoch} step {step}/{state.steps_per_epoch} | loss {loss:.4f} | {ms:.1f} ms/step | "
        f"{seeds * state.world_size / max(seconds, 1e-9):,.0f} seeds/s | comm {100 * comm_share:.0f}% "
        f"hidden {100 * hidden:.0f}%"
    )


# ---------------------------------------------------------------- evaluation


@torch.no_grad()
def layerwise_inference(state: WorkerState, keep_hidden: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Exact full-neighbour outputs (logits) for this rank's inner nodes, layer by layer.

    With ``keep_hidden`` also returns the last hidden layer's output (the input of
    the final layer: the nodes' embeddings).

    Each layer needs the previous layer's embeddings of halo nodes: one
    all-to-all fetches them from their owners, then the layer runs on the
    partition's own CSR (inner rows over inner + halo columns).
    """
    from sampling.base import Block
    from sampling.distributed import fetch_rows

    part, model = state.partition, state.model
    model.eval()
    num_inner = part.num_inner
    indptr = part.indptr[: num_inner + 1].clone()
    src = part.indices[: int(indptr[-1])].to(torch.int64)
    dst = torch.repeat_interleave(torch.arange(num_inner), indptr[1:] - indptr[:-1], output_size=src.numel())
    block = Block(src=src, dst=dst, num_src=part.num_local, num_dst=num_inner, indptr=indptr)
    halo_ids = part.global_ids[num_inner:]
    h = state.features.x
    if state.with_degrees:
        # Local table = inner rows then halo rows: the degree column of both, as one "x".
        halo_degrees = fetch_rows(part, h[:, -1:], halo_ids, group=None, tag="eval")
        h, (block,) = h[:, :-1], model_inputs(torch.cat([h[:, -1:], halo_degrees]), [block], True)[1]
    block = block.to(state.device)
    hidden = h
    for i in range(model.num_layers):
        halo = fetch_rows(part, h, halo_ids, group=None, tag="eval")
        x = torch.cat([h, halo]).to(state.device)
        hidden = h
        h = model.layer_forward(i, x, block).cpu()
    return (h, hidden) if keep_hidden else h


@torch.no_grad()
def sampled_inference(state: WorkerState, nodes_local: torch.Tensor, chunk: int = 1024) -> torch.Tensor:
    """Full-neighbour outputs of some inner nodes for models without ``layer_forward``.

    Samples every neighbour over all layers (exact, but each chunk materialises
    its L-hop neighbourhood: slower than layer-wise inference on large graphs).
    Every rank runs the same number of chunks (collectives inside).
    """
    from sampling.neighbor import NeighborSampler

    model = state.model
    model.eval()
    sampler = NeighborSampler(state.neighbor_source, [-1] * state.cfg.layers, seed=0)
    offset = int(state.partition.part_offsets[state.rank])
    chunks = max(comm.all_gather_object(math.ceil(nodes_local.numel() / chunk)))
    outs = []
    for i in range(chunks):
        seeds = nodes_local[i * chunk : (i + 1) * chunk] + offset
        batch = sampler.sample(seeds)
        x = state.features.gather(batch.input_nodes)
        if seeds.numel():
            x, blocks = model_inputs(x, batch.blocks, state.with_degrees)
            blocks = [b.to(state.device) for b in blocks]
            outs.append(model(x.to(state.device), blocks).cpu())
    return torch.cat(outs) if outs else torch.zeros(0)


def evaluate(state: WorkerState) -> dict[str, float]:
    """Train (full-neighbour), val and test accuracy over all workers (one all-reduce of counts)."""
    part = state.partition
    y = part.y.to(torch.int64)
    if hasattr(state.model, "layer_forward"):
        pred = layerwise_inference(state).argmax(dim=-1)
    else:
        wanted = torch.zeros(part.num_inner, dtype=torch.bool)
        for mask in (part.train_mask, part.val_mask, part.test_mask):
            if mask is not None:
                wanted |= mask.to(torch.bool)
        nodes = wanted.nonzero().view(-1)
        pred = torch.full((part.num_inner,), -1, dtype=torch.int64)
        out = sampled_inference(state, nodes)
        if out.numel():
            pred[nodes] = out.argmax(dim=-1)
    counts = []
    for mask in (part.train_mask, part.val_mask, part.test_mask):
        m = mask.to(torch.bool) if mask is not None else torch.zeros_like(y, dtype=torch.bool)
        counts += [float((pred[m] == y[m]).sum()), float(m.sum())]
    total = comm.all_reduce(torch.tensor(counts, dtype=torch.float64), tag="eval").tolist()
    acc = lambda c, n: c / n if n else float("nan")  # noqa: E731
    return {"train_full_acc": acc(*total[0:2]), "val_acc": acc(*total[2:4]), "test_acc": acc(*total[4:6])}


def reduce_epoch(stats: EpochStats) -> dict[str, float]:
    """Sums counts and takes the slowest rank's time over all workers."""
    sums = torch.tensor(
        [stats.loss_sum, stats.seeds, stats.correct, stats.hidden_sum, stats.predicted_sum, stats.hidden_steps,
         stats.backward_s, stats.comm_total_s], dtype=torch.float64,
    )
    comm.all_reduce(sums, tag="eval")
    times = torch.tensor([stats.time_s], dtype=torch.float64)
    comm.all_reduce(times, op="max", tag="eval")
    loss_sum, seeds, correct, hidden_sum, predicted_sum, hidden_steps, backward_s, comm_s = sums.tolist()
    ranks = comm.get_world_size()
    return {
        "loss": loss_sum / max(1.0, seeds),
        "train_acc": correct / max(1.0, seeds),
        "seeds": int(seeds),
        "epoch_time_s": float(times[0]),
        "seeds_per_s": seeds / max(1e-9, float(times[0])),
        # DWBP (DESIGN.md section 6), averaged over steps and ranks; None where not measured (ddp, 1 worker).
        "hidden_fraction": hidden_sum / hidden_steps if hidden_steps else None,
        "predicted_hidden_fraction": predicted_sum / hidden_steps if hidden_steps else None,
        "backward_s": backward_s / ranks,  # per rank, summed over the epoch's steps
        "grad_comm_s": comm_s / ranks,  # T_comm: the layers' collective service times, per rank
    }
