"""What a person reads while graphdist works: the log's levels and prefixes, the start banner, progress, the closing table.

The default console is short: rank 0 prints a banner, progress, one line per epoch and a closing
table; the other ranks print only warnings and errors. ``--verbose`` (or ``GRAPHDIST_LOG=debug``)
adds the diagnostics: the resolved config, the sync wiring, the topology and plan, bound cores,
each part's cache. ``config.yaml`` in the run directory always holds the full config.

Progress is a ``tqdm`` bar per epoch when standard error is a terminal, and one log line every
``--log-interval`` steps when it is not (CI, a log file). While a bar is drawn, log records go
through ``tqdm.write`` so the two never interleave.

This module imports nothing else of graphdist's but the run log's stdout handler: the CLI, the
launcher and the trainers all use it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import Any, Iterator, Mapping, Optional, Sequence, TextIO

LOG_ENV = "GRAPHDIST_LOG"  # "debug": what --verbose shows; "warning": only warnings and errors
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def log_level(verbose: bool = False) -> int:
    """The console's level: DEBUG with ``--verbose``, else ``GRAPHDIST_LOG``'s, else INFO.

    Example:
        >>> log_level(verbose=True) == logging.DEBUG
        True
    """
    if verbose:
        return logging.DEBUG
    name = os.environ.get(LOG_ENV, "").strip().lower()
    if name and name not in _LEVELS:
        raise ValueError(f"{LOG_ENV} must be one of {', '.join(_LEVELS)} (got {name!r})")
    return _LEVELS.get(name, logging.INFO)


def draws_bars(stream: Optional[TextIO] = None) -> bool:
    """Whether progress is drawn as bars: ``stream`` (default standard error) is a terminal that can draw them."""
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty()) and os.environ.get("TERM", "") != "dumb"
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


class RankFormatter(logging.Formatter):
    """Rank 0's information as it is; warnings, errors, other ranks' lines and every line under
    ``--verbose`` with ``[rank k]`` in front, so a multi-process log still says who spoke.

    Example:
        >>> record = logging.LogRecord("graphdist", logging.WARNING, "", 0, "slow link", None, None)
        >>> RankFormatter(0).format(record)
        '[rank 0] warning: slow link'
    """

    def __init__(self, rank: Optional[int], verbose: bool = False) -> None:
        super().__init__("%(message)s")
        self.rank = rank
        self.verbose = verbose

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if record.levelno >= logging.WARNING:
            text = f"{record.levelname.lower()}: {text}"
        elif not (self.verbose or (self.rank or 0) != 0):
            return text
        return text if self.rank is None else f"[rank {self.rank}] {text}"


LOGGERS = ("graphdist", "partition", "sampling", "placement")  # the project's loggers: the console is theirs


def setup_logging(rank: Optional[int] = None, verbose: bool = False) -> None:
    """The console's logging. The launcher (``rank=None``): the root logger writes what the project's
    loggers pass at the console's level (other libraries': warnings only). A worker: the ``graphdist``
    logger writes, rank 0 at the console's level, the other ranks warnings only unless verbose."""
    from graphdist.runlog import StdoutHandler

    level = log_level(verbose)
    verbose = level <= logging.DEBUG
    handler = StdoutHandler()
    handler.setFormatter(RankFormatter(rank, verbose))
    if rank is None:
        root = logging.getLogger()
        # Replaces an earlier call's handler only: a caller's own (a log file, pytest's capture) stay.
        root.handlers[:] = [h for h in root.handlers if not isinstance(h, StdoutHandler)] + [handler]
        root.setLevel(logging.WARNING)
        for name in LOGGERS:
            logging.getLogger(name).setLevel(level)
        return
    log = logging.getLogger("graphdist")
    log.handlers[:] = [handler]
    log.setLevel(level if rank == 0 or verbose else max(level, logging.WARNING))
    log.propagate = False


@contextlib.contextmanager
def logging_restored() -> Iterator[None]:
    """Gives the root and the project's loggers back as they were: the CLI or a worker run in its caller's
    process (a notebook, a test) leaves no handler behind."""
    loggers = [logging.getLogger(), *map(logging.getLogger, LOGGERS)]
    saved = [(log, log.handlers[:], log.level, log.propagate) for log in loggers]
    try:
        yield
    finally:
        for log, handlers, level, propagate in saved:
            log.handlers[:] = handlers
            log.setLevel(level)
            log.propagate = propagate


# ------------------------------------------------------------------ banner


def shown_path(path: Any) -> str:
    """``path`` relative to the working directory when it lies below it (shorter: what a user would type).

    Example:
        >>> shown_path(os.path.join(os.getcwd(), "runs", "x")) == os.path.join("runs", "x")
        True
    """
    text = str(path)
    try:
        rel = os.path.relpath(text)
    except ValueError:  # another drive
        return text
    return text if rel.startswith("..") else rel


def banner(title: str, rows: Sequence[tuple[str, str]]) -> str:
    """A title line and aligned ``name  value`` rows (empty values left out).

    Example:
        >>> print(banner("graphdist", [("data", "cora"), ("run", "runs/x"), ("skipped", "")]))
        graphdist
          data  cora
          run   runs/x
    """
    shown = [(k, v) for k, v in rows if v]
    width = max((len(k) for k, _ in shown), default=0)
    return "\n".join([title, *(f"  {k:<{width}}  {v}" for k, v in shown)])


# ---------------------------------------------------------------- progress


class EpochProgress:
    """One epoch's progress: a bar on a terminal, else a log line every log interval.

    ``advance(step)`` runs every step and reads nothing from the device; ``report`` runs every
    ``--log-interval`` steps with the numbers the step loop has read by then.

    Example:
        >>> lines = []
        >>> with EpochProgress(3, total=40, bars=False, log=lines.append) as progress:
        ...     progress.advance(20)
        ...     progress.report(20, "epoch 3 step 20/40 | loss 0.5000", loss=0.5, seeds_per_s=1000.0)
        >>> lines
        ['epoch 3 step 20/40 | loss 0.5000']
    """

    def __init__(self, epoch: int, total: int, bars: bool, log: Any, desc: Optional[str] = None) -> None:
        self.log = log
        self.bar = None
        if bars:
            from tqdm.auto import tqdm

            # leave=False: the epoch line that follows is the lasting record of the epoch.
            self.bar = tqdm(total=total or None, desc=desc or f"epoch {epoch}", unit="step", leave=False,
                            file=sys.stderr, dynamic_ncols=True, mininterval=0.25, smoothing=0.1)

    def advance(self, step: int) -> None:
        if self.bar is not None and step > self.bar.n:
            self.bar.update(step - self.bar.n)

    def report(self, step: int, line: str, loss: Optional[float] = None,
               seeds_per_s: Optional[float] = None) -> None:
        if self.bar is None:
            self.log(line)
            return
        self.advance(step)
        shown = []
        if loss is not None:
            shown.append(f"loss {loss:.4f}")
        if seeds_per_s is not None:
            shown.append(f"{seeds_per_s:,.0f} seeds/s")
        self.bar.set_postfix_str(" | ".join(shown), refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self) -> "EpochProgress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


@contextlib.contextmanager
def bars_and_logs(bars: bool) -> Iterator[None]:
    """While bars are drawn, a worker's ``graphdist`` logger writes through ``tqdm.write`` (no line cuts a bar)."""
    if not bars:
        yield
        return
    from tqdm.contrib.logging import logging_redirect_tqdm

    with logging_redirect_tqdm(loggers=[logging.getLogger("graphdist")]):
        yield


# ------------------------------------------------------------ closing table


def _seconds(s: float) -> str:
    """``42.0 s``, ``3 min 05 s``, ``2 h 03 min``.

    Example:
        >>> _seconds(42.04), _seconds(185), _seconds(7380)
        ('42.0 s', '3 min 05 s', '2 h 03 min')
    """
    if s < 60:
        return f"{s:.1f} s"
    if s < 3600:
        return f"{int(s // 60)} min {int(s % 60):02d} s"
    return f"{int(s // 3600)} h {int(s % 3600 // 60):02d} min"


def _bytes(n: float) -> str:
    """``512 B``, ``1.5 KiB``, ``28.9 MiB``, ``1.2 GiB``."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{int(n)} B"


METRIC_KEYS = ("val_acc", "test_acc", "val_f1", "test_f1", "val_auc", "test_auc", "val_mrr", "test_mrr")


def _metrics(record: Mapping[str, Any]) -> str:
    """``val 97.05% | test 96.91%`` (F1, AUC and MRR as percentages of 1 too)."""
    shown = []
    for key in METRIC_KEYS:
        if record.get(key) is not None:
            split, metric = key.split("_", 1)
            shown.append(f"{split} {100 * record[key]:.2f}%" if metric == "acc"
                         else f"{split} {metric} {100 * record[key]:.2f}")
    return " | ".join(shown)


def closing_table(history: Sequence[Mapping[str, Any]], best: Mapping[str, Any], run_dir: Any,
                  wall_s: Optional[float] = None, tensorboard: bool = False, prog: str = "graphdist-train") -> str:
    """What a finished run did, for people: the best epoch, where the time went, the bytes sent,
    the run directory and what to run next. Times are rank 0's, summed over the epochs.

    Example:
        >>> h = [{"epoch": 1, "epoch_time_s": 2.0, "eval_time_s": 0.5, "time_compute_s": 1.2, "time_comm_s": 0.3,
        ...       "time_sample_s": 0.1, "val_acc": 0.8, "test_acc": 0.79, "bytes_sent": {"grad": 3 * 2**20}}]
        >>> print(closing_table(h, h[0], "runs/x", wall_s=9.0))
        done: 1 epoch in 9.0 s
          best epoch  1 | val 80.00% | test 79.00%
          time        train 2.0 s (compute 60%, sync wait 15%, sample wait 5%, other 20%), evaluation 0.5 s
          sent        3.0 MiB: grad 3.0 MiB
          run         runs/x
          next        graphdist-train --resume runs/x --epochs 2   (train on)
                      graphdist-train --predict runs/x   (predictions.npz of the best epoch's model)
    """
    epochs = len(history)
    train = sum(float(r.get("epoch_time_s") or 0.0) for r in history)
    evaluation = sum(float(r.get("eval_time_s") or 0.0) for r in history)
    parts = {name: sum(float(r.get(key) or 0.0) for r in history)
             for name, key in (("compute", "time_compute_s"), ("sync wait", "time_comm_s"),
                               ("sample wait", "time_sample_s"))}
    parts["other"] = max(0.0, train - sum(parts.values()))
    split = ", ".join(f"{name} {100 * t / train:.0f}%" for name, t in parts.items() if train > 0)
    sent: dict[str, float] = {}
    for r in history:
        for tag, n in (r.get("bytes_sent") or {}).items():
            sent[tag] = sent.get(tag, 0) + n
    by_purpose = ", ".join(f"{tag} {_bytes(n)}" for tag, n in sorted(sent.items(), key=lambda kv: -kv[1]) if n)
    last = int(history[-1]["epoch"]) if history else 0
    took = f" in {_seconds(wall_s)}" if wall_s is not None else ""
    rows = [
        ("best epoch", f"{best['epoch']} | {_metrics(best)}" if best and _metrics(best) else ""),
        ("time", f"train {_seconds(train)}" + (f" ({split})" if split else "")
         + (f", evaluation {_seconds(evaluation)}" if evaluation else "")),
        ("sent", f"{_bytes(sum(sent.values()))}" + (f": {by_purpose}" if by_purpose else "")),
        ("run", str(run_dir)),
        ("next", f"{prog} --resume {run_dir} --epochs {2 * last if last else 2}   (train on)"),
        ("", f"{prog} --predict {run_dir}   (predictions.npz of the "
             f"{'best' if best else 'last'} epoch's model)"),
    ]
    if tensorboard:
        rows.append(("", f"tensorboard --logdir {os.path.join(str(run_dir), 'tensorboard')}"))
    width = max(len(k) for k, _ in rows)
    lines = [f"done: {epochs} epoch{'s' if epochs != 1 else ''}{took}"]
    lines += [f"  {k:<{width}}  {v}" for k, v in rows if v]
    return "\n".join(lines)


__all__ = ["EpochProgress", "LOGGERS", "LOG_ENV", "RankFormatter", "banner", "bars_and_logs", "closing_table",
           "draws_bars", "log_level", "logging_restored", "setup_logging", "shown_path"]
