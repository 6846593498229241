"""What every strategy builds a worker from: seeds, the model and its first weights, labels, predictions.

A strategy composes these (``minibatch.py``, ``aggregation.py``, ``fullgraph.py``); none imports
another strategy. The distributed batches (sampler, features, loader) are ``batches.py``.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from graphdist import comm
from graphdist.models.registry import MODELS, capabilities
from graphdist.plugins import call as call_hook
from graphdist.trainers.base import Predictions, WorkerContext
from graphdist.trainers.evaluate import exact_inference


def sampler_seed(seed: int, rank: int) -> int:
    """Seed of a rank's neighbour sampler (its own draws; other ranks' requests use the serving seed).

    Example:
        >>> sampler_seed(0, 1), sampler_seed(3, 0)
        (1, 3000)
    """
    return int(seed) * 1000 + int(rank)


def loader_seed(seed: int, rank: int) -> int:
    """Seed of a rank's loader (shuffle and padding), apart from its sampler's.

    Example:
        >>> loader_seed(0, 1)
        18
    """
    return sampler_seed(seed, rank) + 17


def resized_seed(seed: int, epoch: int, rank: int) -> int:
    """Seed of a rank's random streams after a resume on another worker count: from the run's seed, the
    epochs done and the rank in the new formation, so a checkpoint resumed twice on W' workers trains alike.

    Example:
        >>> resized_seed(0, 3, 1) == resized_seed(0, 3, 1) != resized_seed(0, 3, 0)
        True
    """
    return (int(seed) * 1_000_003 + int(epoch) * 10_007 + int(rank) * 101 + 7) % 2**62


def seed_everything(seed: int) -> None:
    """Seeds the global RNGs (torch, numpy, random)."""
    import random

    import numpy as np

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def reseeded(state: Any, seed: int, epoch: int) -> Any:
    """``state`` (a strategy's ``state_dict()``) with every generator state replaced by a fresh generator's, seeded
    from ``seed`` in traversal order, and every loader's epoch counter set to ``epoch``.

    Example:
        >>> g = torch.Generator().manual_seed(5)
        >>> out = reseeded({"loader": {"epoch": 0, "generator": g.get_state()}}, seed=1, epoch=4)
        >>> out["loader"]["epoch"], torch.equal(out["loader"]["generator"], torch.Generator().manual_seed(1).get_state())
        (4, True)
    """
    counter = [0]

    def walk(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.dtype == torch.uint8:  # a generator's state
            counter[0] += 1
            return torch.Generator().manual_seed(seed + counter[0] - 1).get_state()
        if isinstance(value, dict):
            out = {k: walk(v) for k, v in value.items()}
            if "epoch" in out and "generator" in out:  # a loader's: the epochs it has run
                out["epoch"] = epoch
            return out
        if isinstance(value, (list, tuple)):
            return type(value)(walk(v) for v in value)
        return value

    return walk(state)


def use_prefetch(setting: Optional[bool], threads: int, remote: bool = False) -> bool:
    """``--prefetch`` as given, or (None) whether a background loading thread pays.

    It does when the batches wait on other ranks (``remote``: the thread's sampling and fetches
    wait for their replies while this thread computes, even on one core: a 2-worker job bound to
    one core each ran its epoch in 0.37 s with it, 0.45 s without), or when this process may run
    on a core beyond its ``threads``. Otherwise the thread only steals time from the step it overlaps.

    Example:
        >>> use_prefetch(False, 1), use_prefetch(None, 1, remote=True)
        (False, True)
    """
    if setting is not None:
        return setting
    if remote:
        return True
    from graphdist.launch import usable_cores

    return len(usable_cores()) > threads


# --loaders' default for a GPU worker: its share of the spare cores, at most this many (each loader holds
# prefetch_depth + 3 shared-memory slots of a batch's features; a container's /dev/shm is often small).
AUTO_MAX_LOADERS = 4


def loader_count(setting: Optional[int], device: torch.device, threads: int, world_size: int = 1) -> int:
    """``--loaders`` as given, or (None) this worker's loader processes: on an accelerator, its share of the
    machine's cores beyond every local worker's ``threads`` (at most ``AUTO_MAX_LOADERS``; ``world_size``: the
    job's workers, all on this machine under the local launcher); 0 on a CPU worker, whose cores the step uses.

    Example:
        >>> loader_count(2, torch.device("cpu"), 1), loader_count(None, torch.device("cpu"), 1)
        (2, 0)
    """
    if setting is not None:
        return setting
    if device.type == "cpu":
        return 0
    from graphdist.launch import detect_environment, usable_cores

    env = detect_environment()
    local = max(1, env.local_world_size if env.kind != "local" else world_size)  # the local launcher: all here
    spare = len(usable_cores()) - local * threads
    return max(0, min(AUTO_MAX_LOADERS, spare // local))


def emulated_slowdown(rank: int) -> Optional[Any]:
    """This rank's emulated slowdown (a stretch), or None: what the ``slowdown`` hook of ``graphdist.plugins``
    answers; ``graphdist.testing.slowdown`` installs it in a worker whose ``GRAPHDIST_TEST_SLOWDOWN`` is set."""
    return call_hook("slowdown", rank)


def build_model(ctx: WorkerContext, in_dim: int, num_classes: int) -> torch.nn.Module:
    """The user's model, or ``cfg.model`` built with the same initial weights on every rank.

    ``num_classes`` is the model's output width (the task's ``out_dim``: classes, labels, or the
    embedding width of link prediction).
    """
    from graphdist.models import build_model as build_reference

    if ctx.model is not None:
        return ctx.model
    cfg = ctx.cfg
    entry = MODELS[cfg.model]
    options = entry.constructor_options(cfg)
    if entry.typed:  # R-GCN and relation-wise SAGE: the node types and relations (trainers/typed.py checked them)
        from graphdist.trainers.typed import schema_of

        options["schema"] = schema_of(ctx.partitions.meta)
    torch.manual_seed(cfg.seed)  # same initial weights on every rank
    return build_reference(cfg.model, in_dim, cfg.hidden, num_classes, cfg.layers, dropout=cfg.dropout, **options)


def broadcast_parameters(model: torch.nn.Module) -> None:
    """Rank 0's initial weights everywhere (a user model may have been built with any seed)."""
    with torch.no_grad():
        for p in model.state_dict().values():
            if torch.is_floating_point(p):
                comm.broadcast(p, src=0, tag="init")


def class_labels(y: torch.Tensor) -> torch.Tensor:
    """Labels as training reads them: class ids as int64, a multi-label ``[N, C]`` matrix as it is."""
    return y if y.dim() == 2 else y.to(torch.int64)


def predictions(model: torch.nn.Module, part: Any, batches: Any, device: torch.device,
                with_degrees: bool) -> Predictions:
    """Logits and last hidden layer of this rank's inner nodes, keyed by original id."""
    if not capabilities(model).layer_forward:
        raise ValueError("--predict needs a model with layer_forward (num_layers, layer_forward(i, x, block))")
    logits, hidden = exact_inference(model, part, batches.features.x, device, with_degrees, owners=batches.owners,
                                     keep_hidden=True)
    orig = part.orig_ids.index_select(0, part.global_ids[: part.num_inner])
    return Predictions(orig_ids=orig, logits=logits, embeddings=hidden)


__all__ = ["broadcast_parameters", "build_model", "class_labels", "emulated_slowdown", "loader_seed", "predictions",
           "sampler_seed", "use_prefetch", "loader_count", "AUTO_MAX_LOADERS"]
