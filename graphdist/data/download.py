"""Fetches a zip archive by URL and unpacks one folder of it into place, never leaving half a dataset.

The archive is streamed into a hidden work folder next to the destination (``.<name>.*.partial``),
its size checked against the expected one (a table's, else the server's ``Content-Length``),
unpacked there (zip's CRCs checked on the way), and the folder renamed into place in one step: a
crash or a truncated download leaves no folder under the destination's name, so a later run never
takes half a dataset for a whole one. ``urllib`` reads ``http(s)://`` and ``file://`` URLs alike
(tests serve archives from a temporary folder).

Progress: a tqdm bar when standard error is a terminal, else one log line per tenth.

Example:
    >>> import pathlib, tempfile, zipfile
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> with zipfile.ZipFile(root / "tiny.zip", "w") as zf:
    ...     zf.writestr("tiny/raw/a.txt", "1\\n")
    >>> out = fetch_zip_folder((root / "tiny.zip").as_uri(), root / "cache" / "tiny_folder", member="tiny")
    >>> (out / "raw" / "a.txt").read_text(), sorted(p.name for p in out.parent.iterdir())
    ('1\\n', ['tiny_folder'])
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path
from typing import Any, Optional, Sequence

from graphdist.data.paths import free_bytes, human_bytes

logger = logging.getLogger(__name__)

_CHUNK = 1 << 20  # bytes per read: a progress update per MiB costs nothing next to the network
_TIMEOUT_S = 60.0  # a stalled connection fails after this long instead of hanging the run


class DownloadError(OSError):
    """A download or unpack that failed; ``str()`` is the reason in words, fit to quote in a longer message."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "download failed"


def fetch_zip_folder(url: str, out: Path, member: str, expected_bytes: Optional[int] = None,
                     expect_any: Sequence[str] = (), timeout_s: float = _TIMEOUT_S) -> Path:
    """Downloads the zip at ``url`` and moves its folder ``member`` to ``out`` in one rename.

    Args:
        url: ``http(s)://`` or ``file://`` URL of the archive.
        out: the folder to create (its parent is created if missing); kept as is if another
            process made it meanwhile.
        member: the archive's top-level folder to keep (OGB's ``arxiv.zip`` holds ``arxiv/``).
        expected_bytes: the archive's size, when known; default: the server's ``Content-Length``.
        expect_any: paths inside ``member/`` of which at least one must be there (default: none asked).
        timeout_s: seconds a connection may stall before the download fails (default 60).

    Returns:
        ``out``.

    Raises:
        DownloadError: the URL could not be read, the archive is shorter or longer than expected,
            is no valid zip, lacks ``member/`` or all of ``expect_any``, or the disk is too small; nothing is left behind.
    """
    out = Path(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent))
    except OSError as exc:
        raise DownloadError(f"cannot write in {out.parent}: {_reason(exc)}") from exc
    try:
        archive = work / (url.rstrip("/").rsplit("/", 1)[-1] or "download.zip")
        _download(url, archive, expected_bytes, timeout_s)
        unpacked = _unzip(archive, work / "unpacked", member)
        if expect_any and not any((unpacked / p).is_file() for p in expect_any):
            raise DownloadError(f"{archive.name}'s {member}/ holds none of {', '.join(expect_any)}")
        try:
            os.rename(unpacked, out)  # the one step that makes the dataset visible
        except OSError:
            if not out.is_dir():
                raise
            logger.info("%s appeared meanwhile (another process); keeping it", out)
        return out
    except DownloadError:
        raise
    except OSError as exc:  # a full or failing disk while unpacking or renaming
        raise DownloadError(f"unpacking into {out.parent} failed: {_reason(exc)}") from exc
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _download(url: str, dest: Path, expected_bytes: Optional[int], timeout_s: float) -> None:
    request = urllib.request.Request(url, headers={"User-Agent": "graphdist"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response, open(dest, "wb") as fh:
            announced = _content_length(response)
            if expected_bytes is not None and announced is not None and announced != expected_bytes:
                raise DownloadError(f"the server announces {announced:,} bytes, expected {expected_bytes:,}")
            total = expected_bytes if expected_bytes is not None else announced
            _check_room(dest.parent, 2 * total if total else None, "the archive and its unpacked files")
            done = 0
            with _Progress(total, dest.name) as progress:
                while block := response.read(_CHUNK):
                    fh.write(block)
                    done += len(block)
                    progress.update(len(block))
    except DownloadError:
        raise
    except urllib.error.HTTPError as exc:
        raise DownloadError(f"HTTP {exc.code} {exc.reason}") from exc
    except urllib.error.URLError as exc:
        raise DownloadError(_reason(exc.reason)) from exc
    except (OSError, ValueError) as exc:  # timeouts, resets, a malformed URL
        raise DownloadError(_reason(exc)) from exc
    if total is not None and done != total:
        raise DownloadError(f"the download is truncated: {done:,} of {total:,} bytes arrived")


def _unzip(archive: Path, where: Path, member: str) -> Path:
    try:
        with zipfile.ZipFile(archive) as zf:
            names = zf.namelist()
            tops = sorted({n.split("/", 1)[0] for n in names})
            if not any(n.startswith(f"{member}/") for n in names):
                raise DownloadError(f"{archive.name} holds no folder {member}/ (its top level: {tops[:5]})")
            _check_room(where, sum(i.file_size for i in zf.infolist()), f"the unpacked {archive.name}")
            zf.extractall(where, members=[n for n in names if n.startswith(f"{member}/")])  # CRCs checked here
    except zipfile.BadZipFile as exc:
        raise DownloadError(f"{archive.name} is no valid zip archive ({exc}): truncated or corrupt") from exc
    archive.unlink()  # its space is needed more by the next dataset than by a copy nobody reads
    return where / member


def _check_room(where: Path, needed: Optional[int], what: str) -> None:
    free = free_bytes(where)
    if needed is not None and free is not None and needed > free:
        raise DownloadError(f"{what} need {human_bytes(needed)} of disk but {where} has {human_bytes(free)} free; "
                            "point GRAPHDIST_CACHE at a larger disk")


def _content_length(response: Any) -> Optional[int]:
    value = response.headers.get("Content-Length")
    return int(value) if value and value.strip().isdigit() else None


def _reason(exc: Any) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else str(exc.strerror)
    return f"{type(exc).__name__}: {exc}" if isinstance(exc, BaseException) else str(exc)


class _Progress:
    """A tqdm bar on a terminal; elsewhere (CI, a log file) one log line each time another tenth arrives."""

    def __init__(self, total: Optional[int], what: str) -> None:
        self.total, self.what, self.done, self.logged = total, what, 0, 0
        self.started = time.monotonic()
        self.bar: Any = None
        if sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=f"downloading {what}",
                            leave=False)

    def __enter__(self) -> "_Progress":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.bar is not None:
            self.bar.close()

    def update(self, n: int) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
            return
        tenth = self.done * 10 // self.total if self.total else self.done // (100 << 20)  # unknown size: per 100 MiB
        if tenth > self.logged:
            self.logged = tenth
            rate = self.done / max(time.monotonic() - self.started, 1e-6)
            of = f" of {human_bytes(self.total)} ({100 * self.done // self.total}%)" if self.total else ""
            logger.info("downloading %s: %s%s | %s/s", self.what, human_bytes(self.done), of, human_bytes(rate))


__all__ = ["DownloadError", "fetch_zip_folder"]
