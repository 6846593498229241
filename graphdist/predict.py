"""``graphdist-train --predict RUN_DIR``: predictions and embeddings for every node, by original id.

Workers load their partitions and the run's checkpoint, run exact layer-wise
inference, and rank 0 writes ``RUN_DIR/predictions.npz`` with ``orig_id``
(sorted), ``pred`` (class), ``logits`` and ``embedding`` (the last hidden layer).
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


def _predict_worker(rank: int, world_size: int, cfg: TrainConfig, run_dir: str, init_method: str) -> None:
    from graphdist import comm
    from graphdist.checkpoint import load_checkpoint
    from graphdist.trainers.run import build_strategy, join_job

    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    join_job(rank, world_size, cfg, init_method)
    try:
        strategy = build_strategy(rank, world_size, cfg, cfg.partitions)
        strategy.model.load_state_dict(load_checkpoint(Path(run_dir))["model"])
        mine = strategy.predict()
        strategy.close()
        pieces = comm.all_gather_object((mine.orig_ids, mine.logits, mine.embeddings))
        if comm.is_main_process():
            orig_all = torch.cat([p[0] for p in pieces]).numpy()
            order = np.argsort(orig_all, kind="stable")
            logits_all = torch.cat([p[1] for p in pieces]).numpy()[order]
            hidden_all = torch.cat([p[2] for p in pieces]).numpy()[order]
            out = Path(run_dir) / PREDICTIONS_NAME
            tmp = out.with_name(f".{out.name}.tmp.npz")
            np.savez(tmp, orig_id=orig_all[order], pred=logits_all.argmax(axis=1), logits=logits_all,
                     embedding=hidden_all)
            os.replace(tmp, out)
    finally:
        comm.shutdown()


def predict(run_dir: str, num_workers: Optional[int] = None) -> Path:
    """Writes ``run_dir/predictions.npz``; returns its path.

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
    from graphdist import runlog
    from graphdist.config import resolve
    from graphdist.launch import spawn

    saved = runlog.read_config(Path(run_dir))
    saved = {k: v for k, v in saved.items() if k not in ("resume", "predict", "dry_run")}
    cfg = resolve(saved, environ={})
    if not cfg.partitions:
        raise ValueError(f"{run_dir}/config.yaml names no partition directory")
    world = num_workers or cfg.num_workers
    with tempfile.TemporaryDirectory(prefix="graphdist-init-") as tmp:
        init = f"file://{os.path.join(tmp, 'store')}"
        spawn(_predict_worker, world, args=(world, cfg, str(run_dir), init))
    return Path(run_dir) / PREDICTIONS_NAME
