"""``--tensorboard``: a run's metrics as TensorBoard scalars in ``<run_dir>/tensorboard/``, from rank 0.

Run book::

    pip install 'graphdist[tensorboard]'
    graphdist-train --dataset cora --epochs 20 --tensorboard --run-dir runs/cora
    tensorboard --logdir runs            # every run under runs/, side by side

What is written, all against one x axis, the global optimizer step (1 = the run's first step):

- each epoch's record (``metrics.jsonl``): every numeric scalar under its own key (``loss``,
  ``val_acc``, ``epoch_time_s``, ``seeds_per_s``, ...), each dict of numbers as ``key/<name>``
  (``bytes_sent/grad``), and ``epoch`` itself, at the epoch's last step;
- each step's loss as ``step/loss`` (rank 0's mean loss of that step: not reduced over ranks).

One axis, because a resumed run must hide what the crashed run logged after its checkpoint:
TensorBoard's purge (``purge_step``) drops every tag's events from a step on, which is right for
all tags only when they share the axis. A resume continues from the steps in the kept records.

metrics.jsonl stays the record: a failed write here (a full disk) warns once and stops the
TensorBoard log, never the run.
"""

from __future__ import annotations

import importlib.util
import logging
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

from graphdist.section import fail

logger = logging.getLogger(__name__)

TENSORBOARD_DIR = "tensorboard"
STEP_LOSS_TAG = "step/loss"
MISSING = "needs the tensorboard package: pip install 'graphdist[tensorboard]'"


def require_tensorboard(enabled: bool) -> None:
    """Refuses ``--tensorboard`` before any worker starts when the package is missing.

    Raises:
        ValueError: ``enabled`` and no ``tensorboard`` package (``torch.utils.tensorboard`` needs it).

    Example:
        >>> require_tensorboard(False)  # not asked for: nothing to check
    """
    if enabled and importlib.util.find_spec("tensorboard") is None:
        raise fail("tensorboard", MISSING, None)


def epoch_scalars(record: Mapping[str, Any]) -> dict[str, float]:
    """Every numeric scalar of an epoch record; dicts of numbers flattened to ``key/name``.

    Per-rank lists and None (not measured) are left out: they are no scalar.

    Example:
        >>> epoch_scalars({"epoch": 2, "loss": 0.5, "hidden_fraction": None, "busy_s": [1.0, 2.0],
        ...                "bytes_sent": {"grad": 4096, "sample": 10}})
        {'epoch': 2.0, 'loss': 0.5, 'bytes_sent/grad': 4096.0, 'bytes_sent/sample': 10.0}
    """
    out: dict[str, float] = {}
    for key, value in record.items():
        if isinstance(value, Mapping):
            out.update({f"{key}/{name}": float(v) for name, v in value.items() if _is_number(v)})
        elif _is_number(value):
            out[key] = float(value)
    return out


def _is_number(value: Any) -> bool:
    # bool is an int to Python, but a flag, not a measurement; NaN/inf would hide the curve's scale.
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class TensorBoardLog:
    """Rank 0's TensorBoard writer for one run directory.

    Args:
        run_dir: the run directory; events go to ``run_dir/tensorboard``.
        first_step: optimizer steps already taken (a resume: the kept records' ``steps`` summed;
            default 0). Events the directory holds from that step on are hidden (TensorBoard's purge).

    Example:
        >>> import tempfile
        >>> log = TensorBoardLog(tempfile.mkdtemp())
        >>> log.log_epoch({"epoch": 1, "steps": 2, "loss": 0.7, "bytes_sent": {"grad": 1024}}, [0.9, 0.5])
        >>> log.step, log.close()
        (2, None)
    """

    def __init__(self, run_dir: Path, first_step: int = 0) -> None:
        self.step = int(first_step)
        self.path = Path(run_dir) / TENSORBOARD_DIR
        self.writer: Any = None
        try:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(log_dir=str(self.path), purge_step=self.step + 1)
        except OSError as exc:
            self._give_up(exc)

    def log_epoch(self, record: Mapping[str, Any], step_losses: Sequence[float]) -> None:
        """Writes one epoch: its step losses, then its record's scalars at its last step; flushed.

        Args:
            record: the epoch's metrics record (as appended to ``metrics.jsonl``).
            step_losses: rank 0's loss of each of the epoch's optimizer steps, in order.
        """
        first = self.step
        self.step += int(record.get("steps", len(step_losses)))
        if self.writer is None:
            return
        try:
            for i, loss in enumerate(step_losses, start=1):
                self.writer.add_scalar(STEP_LOSS_TAG, float(loss), first + i)
            for tag, value in epoch_scalars(record).items():
                self.writer.add_scalar(tag, value, self.step)
            self.writer.flush()  # a crash keeps every finished epoch, as in metrics.jsonl
        except OSError as exc:
            self._give_up(exc)

    def close(self) -> None:
        if self.writer is None:
            return
        try:
            self.writer.close()
        except OSError as exc:
            self._give_up(exc)

    def _give_up(self, exc: OSError) -> None:
        logger.warning("--tensorboard: cannot write %s (%s); training goes on, metrics.jsonl has every epoch",
                       self.path, exc)
        self.writer = None


def open_log(run_dir: Path, history: Sequence[Mapping[str, Any]]) -> TensorBoardLog:
    """A ``TensorBoardLog`` continuing after ``history`` (the records kept so far; empty for a new run).

    Example:
        >>> import tempfile
        >>> log = open_log(Path(tempfile.mkdtemp()), [{"epoch": 1, "steps": 7}])
        >>> log.step, log.close()
        (7, None)
    """
    return TensorBoardLog(run_dir, first_step=sum(int(r.get("steps", 0)) for r in history))


__all__ = ["MISSING", "TENSORBOARD_DIR", "TensorBoardLog", "epoch_scalars", "open_log", "require_tensorboard"]
