"""Atomic checkpoints of model, optimizer, epoch and every RNG state.

A checkpoint is written to a temporary file beside its target and renamed over
it, so an interrupted write (Ctrl-C, a full disk, a killed worker) never leaves
a half-written file where a good one was. Everything stored is tensors, numbers,
strings, lists and dicts, so ``torch.load(path, weights_only=True)`` reads it.
"""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

CHECKPOINT_NAME = "checkpoint.pt"
BEST_NAME = "best.pt"  # the best-validation epoch's model (and optimizer); no per-rank state


def atomic_torch_save(obj: Any, path: Path) -> None:
    """``torch.save`` to a temp file in the same directory, fsync, then rename.

    The object is serialized in memory first and written in one go: torch's own file writer
    reports a full disk as ``unexpected pos`` without an errno, a plain write says ENOSPC.

    Raises:
        OSError: with the path named (and, for a full disk, the free space), if the write fails;
            the previous file at ``path`` is left untouched and no temporary file is left.
    """
    import io

    from graphdist.data.paths import write_error

    path = Path(path)
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as f:
            f.write(buffer.getbuffer())
            f.flush()
            os.fsync(f.fileno())
        from graphdist.comm import injection_point

        injection_point("checkpoint")  # test-only: a kill here, between write and rename, must tear nothing
        os.replace(tmp, path)
    except BaseException as exc:
        error = None
        if isinstance(exc, OSError):
            error = write_error(exc, path, "checkpoint",
                                f"the previous {path.name} is intact" if path.exists() else "nothing was written")
        if tmp is not None:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
        if error is not None:
            raise error from exc
        raise


def rng_state() -> dict[str, Any]:
    """The torch, numpy and Python global RNG states, as weights-only-loadable values."""
    np_state = np.random.get_state()
    py_version, py_internal, py_gauss = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "numpy": {
            "name": str(np_state[0]),
            "keys": torch.from_numpy(np.asarray(np_state[1], dtype=np.int64)),
            "pos": int(np_state[2]),
            "has_gauss": int(np_state[3]),
            "cached_gaussian": float(np_state[4]),
        },
        "python": {"version": int(py_version), "internal": list(py_internal), "gauss": py_gauss},
    }


def set_rng_state(state: dict[str, Any]) -> None:
    """Restores what :func:`rng_state` captured."""
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state(
        (n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached_gaussian"])
    )
    p = state["python"]
    random.setstate((p["version"], tuple(p["internal"]), p["gauss"]))


def save_checkpoint(
    run_dir: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    epoch: int,
    extra: Optional[dict[str, Any]] = None,
    name: str = CHECKPOINT_NAME,
) -> Path:
    """Writes ``run_dir/name`` atomically; ``epoch`` is the number of epochs completed.

    Example:
        >>> import tempfile
        >>> model = torch.nn.Linear(2, 1)
        >>> opt = torch.optim.SGD(model.parameters(), lr=0.1)
        >>> gen = torch.Generator().manual_seed(0)
        >>> path = save_checkpoint(Path(tempfile.mkdtemp()), model, opt, epoch=3, extra={"sampler": gen.get_state()})
        >>> state = load_checkpoint(path)
        >>> state["epoch"], sorted(state["model"]), torch.equal(state["extra"]["sampler"], gen.get_state())
        (3, ['bias', 'weight'], True)
    """
    state = {
        "format": 1,
        "epoch": int(epoch),
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "rng": rng_state(),
        "extra": extra or {},
    }
    path = Path(run_dir) / name
    atomic_torch_save(state, path)
    return path


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Reads a checkpoint with ``weights_only=True``.

    Raises:
        FileNotFoundError: naming the path, when there is no checkpoint.
        ValueError: when the file is not a graphdist checkpoint.
    """
    path = Path(path)
    if path.is_dir():
        path = path / CHECKPOINT_NAME
    if not path.exists():
        raise FileNotFoundError(f"no checkpoint at {path}: was the run started with this --run-dir?")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001
        raise ValueError(f"{path}: not a readable graphdist checkpoint ({exc})") from exc
    if not isinstance(state, dict) or state.get("format") != 1:
        raise ValueError(f"{path}: not a graphdist checkpoint (expected format 1)")
    return state
