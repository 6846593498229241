"""``graphdist-train --predict RUN_DIR``: predictions and embeddings for every node, by original id.

Workers load their partitions and the run's checkpoint, run exact layer-at-a-time
inference, and rank 0 writes ``RUN_DIR/predictions.npz`` with ``orig_id``
(sorted), ``pred`` (the class; a 0/1 row of labels for multi-label runs; absent for link
prediction, whose ``logits`` are the nodes' embeddings that its decoder scores), ``logits`` and
``embedding`` (the last hidden layer). A typed graph's (docs/hetero.md) also get ``node_type`` (the index of
each node's type in ``node_types``, their names) and ``type_id`` (its id within its type, as the dataset
numbers it): every node of every type is predicted; the target type's rows are the classified ones.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from graphdist.config import TrainConfig

PREDICTIONS_NAME = "predictions.npz"


def _predict_worker(rank: int, world_size: int, cfg: TrainConfig, run_dir: str, init_method: str,
                    checkpoint: str) -> None:
    from graphdist import comm
    from graphdist.checkpoint import load_checkpoint
    from graphdist.trainers.run import build_strategy, join_job
    from graphdist.trainers.typed import typed_prediction_keys

    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    join_job(rank, world_size, cfg, init_method)
    try:
        strategy = build_strategy(rank, world_size, cfg, cfg.partitions)
        strategy.model.load_state_dict(load_checkpoint(Path(run_dir) / checkpoint)["model"])
        mine = strategy.predict()
        pred = strategy.task.predict(mine.logits) if strategy.task.name != "link" else None
        strategy.close()
        pieces = comm.all_gather_object((mine.orig_ids, mine.logits, mine.embeddings, pred))
        if comm.is_main_process():
            orig_all = torch.cat([p[0] for p in pieces]).numpy()
            order = np.argsort(orig_all, kind="stable")
            logits_all = torch.cat([p[1] for p in pieces]).numpy()[order]
            hidden_all = torch.cat([p[2] for p in pieces]).numpy()[order]
            out = Path(run_dir) / PREDICTIONS_NAME
            tmp = out.with_name(f".{out.name}.tmp.npz")
            arrays = {"orig_id": orig_all[order], "logits": logits_all, "embedding": hidden_all}
            if pieces[0][3] is not None:
                arrays["pred"] = torch.cat([p[3] for p in pieces]).numpy()[order].astype(
                    np.uint8 if pieces[0][3].dim() == 2 else np.int64)
            arrays.update(typed_prediction_keys(strategy.ctx.partitions.meta, arrays["orig_id"]))
            np.savez(tmp, **arrays)
            os.replace(tmp, out)
    finally:
        comm.shutdown()


def choose_checkpoint(run_dir: Path, which: str = "best") -> tuple[str, str]:
    """The checkpoint file ``--predict`` loads, and a line saying which and why.

    ``best``: ``best.pt``, the best-validation epoch's model; a run that never evaluated
    (``--eval-every 0``) has none, and falls back to the last checkpoint, saying so.

    Raises:
        FileNotFoundError: the run has no checkpoint at all.
    """
    from graphdist import runlog
    from graphdist.checkpoint import BEST_NAME, CHECKPOINT_NAME

    status = runlog.read_status(run_dir)
    if not (run_dir / CHECKPOINT_NAME).exists():
        raise FileNotFoundError(f"--predict {run_dir}: no {CHECKPOINT_NAME} there; the run never finished an epoch")
    last = f"{CHECKPOINT_NAME} (the last checkpoint, epoch {status.get('checkpoint_epoch', '?')})"
    if which == "last":
        return CHECKPOINT_NAME, f"using {last}"
    if (run_dir / BEST_NAME).exists():
        key, value = status.get("best_metric", "val_acc"), status.get("best_value", status.get("best_val_acc"))
        shown = f", {key.replace('_', ' ')} {100 * value:.2f}%)" if value is not None else ")"
        return BEST_NAME, f"using {BEST_NAME} (the best validation epoch, {status.get('best_epoch', '?')}" + shown
    return CHECKPOINT_NAME, f"using {last}: the run never evaluated (--eval-every 0), so it has no {BEST_NAME}"


def predict(run_dir: str, num_workers: Optional[int] = None, checkpoint: str = "best") -> Path:
    """Writes ``run_dir/predictions.npz`` from the run's best (or last) checkpoint; returns its path.

    Example:
        >>> import contextlib, io, tempfile
        >>> import numpy as np
        >>> import graphdist as gd
        >>> run = tempfile.mkdtemp()
        >>> with contextlib.redirect_stdout(io.StringIO()):
        ...     _ = gd.train(None, dataset="synthetic-2000", num_workers=1, epochs=1, hidden=16, run_dir=run)
        >>> out = predict(run)
        >>> sorted(np.load(out).files), np.load(out)["orig_id"][:3].tolist()
        (['embedding', 'logits', 'orig_id', 'pred'], [0, 1, 2])
    """
    import logging

    from graphdist import runlog
    from graphdist.config import resolve
    from graphdist.launch import spawn

    run = Path(os.path.abspath(Path(run_dir).expanduser()))
    cfg = resolve({}, environ={}, base=runlog.read_config(run))
    if not cfg.partitions:
        raise ValueError(f"{run}/config.yaml names no partition directory")
    if not Path(cfg.partitions).is_dir():
        raise FileNotFoundError(f"--predict {run_dir}: the run's partitions {cfg.partitions} are gone; "
                                f"recreate them with graphdist-partition (same arguments) at that path")
    name, line = choose_checkpoint(run, checkpoint)
    logging.getLogger("graphdist").info("predict: %s", line)
    world = num_workers or cfg.num_workers
    with tempfile.TemporaryDirectory(prefix="graphdist-init-") as tmp:
        init = f"file://{os.path.join(tmp, 'store')}"
        spawn(_predict_worker, world, args=(world, cfg, str(run), init, name))
    return run / PREDICTIONS_NAME
