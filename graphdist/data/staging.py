"""Staged writing of a directory: a hidden, locked temporary sibling, renamed into place at the end.

The writer fills ``.<name>.tmp-<pid>-<rand>`` while holding an ``flock`` on it and renames it
to ``<name>`` last, so a run that raises leaves nothing and one that is killed leaves only a
hidden sibling, never something that looks complete. The kernel drops the lock when the writer
dies, which is how the next writer of the same ``<name>`` tells a dead writer's leftovers
(removed, or, for the previous directory moved aside mid-replace, put back) from a live one's.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from pathlib import Path
from typing import Iterator, Union

from graphdist.data.paths import write_error

PathLike = Union[str, os.PathLike]
META = "meta.json"  # what makes a directory one of ours: a partition directory, a generated graph


@contextlib.contextmanager
def staged_directory(out: PathLike, force: bool = False, what: str = "partition directory") -> Iterator[Path]:
    """Yields a fresh temporary sibling of ``out``; renames it to ``out`` if the block succeeds.

    Checks happen on entry, before any expensive work: ``out`` exists (and no
    ``force``), its parent cannot be created or written. On any exception (or
    KeyboardInterrupt) inside the block the temporary directory is removed.

    Args:
        out: the final directory.
        force: replace an existing directory of ours (one with ``meta.json``) or an empty one.
        what: what the directory is, in messages (default ``partition directory``).

    Raises:
        FileExistsError: ``out`` exists and ``force`` is False, or is not one of ours.
        PermissionError / OSError: the parent is not writable.

    Example:
        >>> import tempfile, pathlib
        >>> out = pathlib.Path(tempfile.mkdtemp()) / "p"
        >>> with staged_directory(out) as tmp:
        ...     _ = (tmp / "meta.json").write_text("{}")
        >>> sorted(p.name for p in out.iterdir())
        ['meta.json']
    """
    out = Path(out)
    _check_replaceable(out, force, what)
    out.parent.mkdir(parents=True, exist_ok=True)
    if not os.access(out.parent, os.W_OK | os.X_OK):
        raise PermissionError(f"--out: cannot write into {out.parent} (permission denied); choose another --out")
    clean_stale_siblings(out)
    _check_replaceable(out, force, what)  # a stale sibling may have been the previous ``out``, now restored
    token = f"{os.getpid()}-{secrets.token_hex(4)}"
    tmp = out.parent / f".{out.name}.tmp-{token}"
    with _held_directory(out.parent / f".{out.name}.new-{token}", tmp):
        try:
            yield tmp
            _commit(tmp, out, force, token, what)
        except BaseException as exc:
            error = None
            if isinstance(exc, OSError) and not isinstance(exc, (FileExistsError, PermissionError)):
                kept = "the previous one is intact" if out.exists() else "nothing was written"
                error = write_error(exc, out, what, kept)
            shutil.rmtree(tmp, ignore_errors=True)
            if error is not None:
                raise error from exc
            raise


@contextlib.contextmanager
def _held_directory(fresh: Path, final: Path) -> Iterator[None]:
    """Creates ``final`` holding an exclusive ``flock`` on it for the block.

    The directory is made under ``fresh`` and locked before it is renamed to ``final``, so a
    directory named ``.<out>.tmp-*`` is locked for as long as its writer lives: the kernel drops
    the lock when the writer dies (even by SIGKILL), which is how the next run tells a stale
    sibling from one that another process is still writing.
    """
    import fcntl

    fresh.mkdir()
    fd = os.open(fresh, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.replace(fresh, final)
        yield
    finally:
        os.close(fd)


def clean_stale_siblings(out: PathLike) -> list[Path]:
    """Removes the temporary siblings of ``out`` that a killed writer left; returns what it removed.

    A writer killed while writing leaves ``.<name>.tmp-*``; one killed between moving an
    existing ``out`` aside (``force``) and renaming its new directory in leaves
    ``.<name>.old-*`` and no ``out``: that previous directory is renamed back to ``out``.
    Siblings whose writer is alive (its lock is held) are left alone.

    Example:
        >>> import tempfile, pathlib
        >>> out = pathlib.Path(tempfile.mkdtemp()) / "p"
        >>> (out.parent / ".p.tmp-123-ab").mkdir()  # as a SIGKILLed writer leaves it
        >>> [p.name for p in clean_stale_siblings(out)]
        ['.p.tmp-123-ab']
    """
    out = Path(out)
    if not out.parent.is_dir():
        return []
    removed = []
    for kind in ("tmp", "new", "old"):
        for sibling in sorted(out.parent.glob(f".{out.name}.{kind}-*")):
            token = sibling.name[len(f".{out.name}.{kind}-"):]
            # an old directory is its writer's until that writer's tmp (same token) is unlocked
            holder = out.parent / f".{out.name}.tmp-{token}" if kind == "old" else sibling
            if not sibling.is_dir() or sibling.is_symlink() or not _is_stale(holder):
                continue
            if kind == "old" and not out.exists() and (sibling / META).exists():
                os.replace(sibling, out)  # the writer died before its new directory took the place
                continue
            shutil.rmtree(sibling, ignore_errors=True)
            removed.append(sibling)
    return removed


def _is_stale(tmp: Path) -> bool:
    """Whether no live process holds the lock on ``tmp`` (a missing ``tmp`` has no writer)."""
    import fcntl

    try:
        fd = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        return True
    except OSError:
        return False  # not ours to judge (permissions): leave it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def _check_replaceable(out: Path, force: bool, what: str = "partition directory") -> None:
    if not out.exists() and not out.is_symlink():
        return
    if not force:
        # the CLI checks --out itself first, in its own words: this is what the Python API reads
        raise FileExistsError(f"out={str(out)!r} already exists; train on it as it is, pass force=True to replace "
                              f"it, or choose another out=")
    # --force never deletes something that is not ours: a typo must not erase a home directory.
    if out.is_dir() and not out.is_symlink() and ((out / META).exists() or not any(out.iterdir())):
        return
    raise FileExistsError(
        f"out={str(out)!r} exists and is not a {what} (no {META}); refusing to replace it even with "
        f"force=True"
    )


def _commit(tmp: Path, out: Path, force: bool, token: str, what: str = "partition directory") -> None:
    """Renames ``tmp`` to ``out``; an existing ``out`` (force) is moved aside first, then removed."""
    old = None
    if out.exists():
        _check_replaceable(out, force, what)  # it may have appeared while we worked
        old = out.parent / f".{out.name}.old-{token}"  # the token ties it to tmp's lock
        os.replace(out, old)
    os.replace(tmp, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


__all__ = ["META", "clean_stale_siblings", "staged_directory"]
