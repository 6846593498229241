"""Atomic checkpoints of model, optimizer, epoch and every RNG state.

A checkpoint is written to a temporary file beside its target and renamed over
it, so an interrupted write (Ctrl-C, a full disk, a killed worker) never leaves
a half-written file where a good one was. Everything stored is tensors, numbers,
strings, lists and dicts, so ``torch.load(path, weights_only=True)`` reads it.

A :class:`CheckpointWriter` writes them on a thread of its own, from a copy of the state taken
when it is handed over, so training goes on while the file is serialized and written.
"""

from __future__ import annotations

import os
import random
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import torch

CHECKPOINT_NAME = "checkpoint.pt"
BEST_NAME = "best.pt"  # the best-validation epoch's model (and optimizer); no per-rank state
FINISH_TIMEOUT_S = 60.0  # how long a rank that ends at once waits for its checkpoint in flight


def atomic_torch_save(obj: Any, path: Path) -> None:
    """``torch.save`` to a temp file in the same directory, fsync, then rename.

    The object is serialized in memory first and written in one go: torch's own file writer
    reports a full disk as ``unexpected pos`` without an errno, a plain write says ENOSPC.

    Raises:
        OSError: with the path named (and, for a full disk, the free space), if the write fails;
            the previous file at ``path`` is left untouched and no temporary file is left.
    """
    atomic_write_bytes(serialized(obj), path)


def serialized(obj: Any) -> Any:
    """``torch.save(obj)`` into memory (a ``BytesIO``)."""
    import io

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer


def atomic_write_bytes(buffer: Any, path: Path) -> None:
    """Writes a :func:`serialized` object to a temp file beside ``path``, fsyncs it and renames it over ``path``.

    Raises:
        OSError: as :func:`atomic_torch_save`.
    """
    from graphdist.data.paths import write_error

    path = Path(path)
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
    path = Path(run_dir) / name
    atomic_torch_save(checkpoint_state(model, optimizer, epoch, extra), path)
    return path


def checkpoint_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, epoch: int,
                     extra: Optional[dict[str, Any]] = None,
                     optimizer_state: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """What :func:`save_checkpoint` writes: model, optimizer (``optimizer_state`` if given, e.g. a sharded
    optimizer's gathered state, else ``optimizer.state_dict()``), ``epoch``, this process's RNG states and
    ``extra`` (live tensors: :func:`snapshot` copies them for a write that outlives the step)."""
    return {"format": 1, "epoch": int(epoch), "model": model.state_dict(),
            "optimizer": optimizer.state_dict() if optimizer_state is None else optimizer_state,
            "rng": rng_state(), "extra": extra or {}}


def snapshot(obj: Any) -> Any:
    """A copy of ``obj`` (dicts, lists and tuples of tensors and values) that training can no longer change:
    tensors cloned (on the CPU), containers rebuilt.

    Example:
        >>> w = torch.zeros(2)
        >>> copy = snapshot({"w": w, "steps": [1, 2]})
        >>> _ = w.add_(1); copy["w"].tolist()
        [0.0, 0.0]
    """
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: snapshot(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(snapshot(v) for v in obj)
    return obj


class CheckpointWriter:
    """Writes checkpoints on a background thread, one at a time (:func:`atomic_torch_save`).

    :meth:`submit` returns once the state is copied; the file is serialized, written, fsynced and
    renamed into place on the writer's thread, then ``then()`` runs there (the run's status records
    the checkpoint). A second submit waits for the first write. A failed write (a full disk) leaves
    the previous checkpoint intact and is raised, as its one-line ``OSError``, by the next
    :meth:`submit` or :meth:`wait`. While a write is in flight, a process that ends at once (comm's peer
    watch) finishes it first (the ``before_exit`` plug-in hook).

    Example:
        >>> import tempfile
        >>> model = torch.nn.Linear(2, 1)
        >>> writer = CheckpointWriter()
        >>> path = Path(tempfile.mkdtemp()) / "checkpoint.pt"
        >>> writer.submit(checkpoint_state(model, torch.optim.SGD(model.parameters(), lr=0.1), 3), path)
        >>> writer.wait(); load_checkpoint(path)["epoch"]
        3
    """

    def __init__(self) -> None:
        self._thread: Optional[threading.Thread] = None
        self._error: Optional[BaseException] = None

    @property
    def busy(self) -> bool:
        """Whether a write is in flight."""
        return self._thread is not None and self._thread.is_alive()

    def submit(self, state: dict[str, Any], path: Path, then: Callable[[], None] = lambda: None) -> None:
        """Copies ``state`` (:func:`snapshot`) and writes it to ``path`` in the background.

        The thread serializes the copy, drops it, then writes the bytes: rank 0 holds the live state, the
        copy and its serialized bytes only while serializing.

        Raises:
            Exception: what the previous write raised (an ``OSError`` naming the path for a failed write;
                the checkpoint before it is intact).
        """
        self.wait()
        pending = [snapshot(state)]
        from graphdist import plugins

        def write() -> None:
            try:
                buffer = serialized(pending.pop())
                atomic_write_bytes(buffer, path)
                del buffer
                then()
            except BaseException as exc:  # noqa: BLE001 - raised on the training thread by wait()
                self._error = exc

        thread = threading.Thread(target=write, name="graphdist-checkpoint")
        thread.start()
        self._thread = thread
        plugins.install("before_exit", self._finish_quietly)

    def wait(self) -> None:
        """Returns when no write is in flight.

        Raises:
            Exception: what the last write raised (an ``OSError`` naming the path for a failed write).
        """
        thread = self._thread
        if thread is not None:
            thread.join()
            self._thread = None
            from graphdist import plugins

            if plugins.hook("before_exit") == self._finish_quietly:
                plugins.install("before_exit", None)
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _finish_quietly(self, timeout_s: float = FINISH_TIMEOUT_S) -> None:
        """The ``before_exit`` hook: gives the write in flight up to ``timeout_s`` to land (a hung file
        system must not keep a dying rank alive)."""
        thread = self._thread
        if thread is not None and thread.is_alive():
            thread.join(timeout_s)


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
