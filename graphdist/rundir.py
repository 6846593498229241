"""``RunDir``: a run directory named once and handed where its path travelled.

Its files are named here (``graphdist/runlog.py`` lists them and writes them: rank 0 only);
the launcher, the loop, the checkpoints and the profiler cache take a ``RunDir`` instead of a
path string and read or write through it. A ``RunDir`` is ``os.PathLike`` (``Path(run)`` is
its path) and pickles as its path, so spawned workers receive it as it is.

Example:
    >>> import tempfile
    >>> run = RunDir.at(tempfile.mkdtemp())
    >>> run.append_metrics({"epoch": 1, "loss": 0.5}); [r["epoch"] for r in run.read_metrics()]
    [1]
    >>> run.write_status(status="running")["status"], run.checkpoint.name
    ('running', 'checkpoint.pt')
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ContextManager, Optional, Union

from graphdist import runlog


@dataclass(frozen=True)
class RunDir(os.PathLike):
    """One run's directory: its files by name, and what the run reads and writes there.

    Attributes:
        path: the directory (absolute where the launcher named it).
    """

    path: Path

    @classmethod
    def at(cls, where: Union["RunDir", str, os.PathLike]) -> "RunDir":
        """``where`` as a ``RunDir`` (one already is returned as it is)."""
        return where if isinstance(where, RunDir) else cls(Path(where))

    def __fspath__(self) -> str:
        return str(self.path)

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    def __str__(self) -> str:
        return str(self.path)

    # ------------------------------------------------------------- its files

    @property
    def checkpoint(self) -> Path:
        """``checkpoint.pt``: the last completed epoch."""
        from graphdist.checkpoint import CHECKPOINT_NAME

        return self.path / CHECKPOINT_NAME

    @property
    def config_file(self) -> Path:
        return self.path / runlog.CONFIG_NAME

    def exists(self) -> bool:
        return self.path.exists()

    # ------------------------------------------------------- reads and writes

    def write_config(self, config: dict[str, Any]) -> None:
        runlog.write_config(self.path, config)

    def read_status(self) -> dict[str, Any]:
        return runlog.read_status(self.path)

    def write_status(self, **fields: Any) -> dict[str, Any]:
        return runlog.write_status(self.path, **fields)

    def read_metrics(self) -> list[dict[str, Any]]:
        return runlog.read_metrics(self.path)

    def append_metrics(self, record: dict[str, Any]) -> None:
        runlog.append_metrics(self.path, record)

    def truncate_metrics(self, epochs: int) -> None:
        runlog.truncate_metrics(self.path, epochs)

    def write_text(self, name: str, text: str, what: str) -> Path:
        """Writes the file ``name`` here atomically (``runlog.write_text_atomic``); returns its path."""
        runlog.write_text_atomic(self.path / name, text, what)
        return self.path / name

    def read_text(self, name: str) -> Optional[str]:
        """The file ``name`` here, or None when it is absent."""
        path = self.path / name
        return path.read_text() if path.exists() else None

    def recorded_run(self) -> str:
        return runlog.recorded_run(self.path)

    def claim_for_new_run(self, overwrite: bool) -> Optional[Path]:
        return runlog.claim_for_new_run(self.path, overwrite)

    def locked(self, flag: str = "--run-dir") -> ContextManager[Path]:
        return runlog.locked(self.path, flag)

    def plot(self, history: Optional[list[dict[str, Any]]] = None, title: str = "") -> list[Path]:
        return runlog.plot_run(self.path, history, title)


__all__ = ["RunDir"]
