"""``Task``: the interface of what a run learns (``--task``), behind every strategy's training step and evaluation.

The node tasks and ``make_task`` are in ``trainers/tasks.py``, link prediction in ``trainers/link.py``;
the interface is here so that ``tasks.make_task`` can build a ``LinkPrediction`` and ``link`` can
implement ``Task`` without the two modules importing each other.
"""

from __future__ import annotations

import abc
from typing import Any, Optional

import torch

from graphdist.models.registry import capabilities
from graphdist.trainers.features import model_inputs
from partition.part import Partition


class Task(abc.ABC):
    """The loss of a step and the metrics of an evaluation.

    Attributes:
        name: the task's name in logs.
        best_key: the validation metric that picks the best epoch (higher is better).
    """

    name: str = ""
    best_key: str = "val_acc"
    items: str = "seeds"  # what a batch is made of (logs; a link batch's items are edges)

    def out_dim(self, meta: dict[str, Any], hidden: int) -> int:
        """The model's output width for a partition's ``meta.json`` (classes by default)."""
        return int(meta.get("num_classes") or 0)

    @abc.abstractmethod
    def loss(self, out: torch.Tensor, y: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
        """The training loss of outputs ``out`` against labels ``y`` (``mean`` over rows, or ``sum``)."""

    @abc.abstractmethod
    def count_correct(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """How many rows were predicted right (the epoch's ``train_acc`` numerator), as a 0-d tensor
        on ``out``'s device: the step loop reads it when it needs the number, not every step."""

    def correct(self, out: torch.Tensor, y: torch.Tensor) -> float:
        """:meth:`count_correct` as a number."""
        return float(self.count_correct(out, y))

    @abc.abstractmethod
    def predict(self, out: torch.Tensor) -> torch.Tensor:
        """The prediction of each row of outputs."""

    @abc.abstractmethod
    def empty_prediction(self, rows: int, classes: int) -> torch.Tensor:
        """Predictions for ``rows`` nodes none of which is predicted yet (filled in by evaluation)."""

    @abc.abstractmethod
    def metrics(self, pred: torch.Tensor, part: Partition) -> dict[str, float]:
        """Train (full-neighbour), val and test metrics over all workers (collective: every rank calls it)."""

    def batch_weight(self, batch: Any) -> int:
        """What a step's gradient is averaged over (its seeds): the seed-weighted sync's weight."""
        return int(batch.seed_nodes.numel())

    # What a mini-batch worker trains on: node tasks keep the node loader's seeds, sampler and labels;
    # link prediction batches edges instead (trainers/link.py).
    def wrap_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """The model trained for this task, built around the node model (node tasks: the model itself)."""
        return model

    def train_items(self, ctx: Any, part: Partition) -> torch.Tensor:
        """What this worker's loader batches: its train nodes (global ids)."""
        return part.mask_global_ids("train_mask")

    def train_sampler(self, sampler: Any, ctx: Any, seed: int) -> Any:
        """The sampler the loader calls on a batch of items (node tasks: the node sampler)."""
        return sampler

    def train_labels(self, part: Partition) -> Optional[Any]:
        """Labels by global id of the worker's train nodes (and seeds handed over later)."""
        from graphdist.trainers.features import GlobalLabels

        if part.y is None:
            return None
        return GlobalLabels(part.y if part.y.dim() == 2 else part.y.to(torch.int64), part.inner_local)

    def evaluate(self, model: torch.nn.Module, part: Partition, batches: Any, device: torch.device,
                 with_degrees: bool) -> dict[str, float]:
        """Metrics over all workers (collective): exact layer-at-a-time inference, or full-neighbour blocks for
        models without ``layer_forward``."""
        from graphdist.trainers.evaluate import evaluated_nodes, exact_inference, sampled_inference

        if capabilities(model).layer_forward:
            out = exact_inference(model, part, batches.features.x, device, with_degrees, owners=batches.owners)
            return self.metrics(self.predict(out), part)
        nodes = evaluated_nodes(part)
        pred = self.empty_prediction(part.num_inner, int(part.meta.get("num_classes") or 0))
        out = sampled_inference(model, batches.neighbor_source, batches.features, part.inner_global_ids()[nodes],
                                batches.ctx.cfg.layers, device, with_degrees)
        if out.numel():
            pred[nodes] = self.predict(out)
        return self.metrics(pred, part)

    def batch_loss(self, model: torch.nn.Module, batch: Any, with_degrees: bool,
                   device: torch.device) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """Forward of one sampled batch: ``(loss, outputs, rows right)``.

        A batch without seeds still runs forward and a zero loss, so backward issues every
        layer's collective as on the other ranks.
        """
        x, blocks = model_inputs(batch.x, batch.blocks, with_degrees)
        out = model(x, blocks)
        if not batch.seed_nodes.numel():
            return out.sum() * 0.0, out, torch.zeros(())
        return self.loss(out, batch.y), out, self.count_correct(out.detach(), batch.y)


__all__ = ["Task"]
