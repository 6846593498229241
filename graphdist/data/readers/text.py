"""Reads numeric text tables (plain or ``.gz``): the chunked, memory-bounded parser behind ``read_table``.

Edge lists, OGB's ``.csv.gz`` files and text feature or label files all go through it.
"""

from __future__ import annotations

import gzip
import re
import warnings
from pathlib import Path
from typing import Any, Iterator, Optional

import numpy as np

from graphdist.data.readers.common import PathLike

# Bytes of text parsed per chunk: bounds the temporary memory of the text parser.
_TEXT_CHUNK = 64 << 20
# Whitespace and the usual CSV separators all become spaces before numpy parses the text.
_SEPARATORS = bytes.maketrans(b",;\t\r\n", b"     ")
_COMMENT_LINES = re.compile(rb"(?m)^[ \t]*#[^\n]*$")


def read_table(
    path: PathLike,
    dtype: type = np.float64,
    columns: Optional[int] = None,
    allow_header: bool = False,
) -> np.ndarray:
    """Parses a numeric text table (``.gz`` or plain) into a ``[rows, columns]`` array.

    Fast and memory-bounded: the text is read in 64 MiB chunks cut at line ends,
    separators (comma, tab, space, semicolon) become spaces and numpy's C parser
    reads each chunk. ``#`` comment lines are skipped.

    Args:
        path: the file.
        dtype: numpy dtype of the result (default float64).
        columns: expected column count (default: that of the first data line).
        allow_header: skip a first data line that is not numeric (default False).

    Raises:
        ValueError: a non-numeric value or a ragged row, naming the file.

    Example:
        >>> import pathlib, tempfile
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "t.csv"
        >>> _ = p.write_text("# c\\n1,2\\n3,4\\n")
        >>> read_table(p, np.int64).tolist()
        [[1, 2], [3, 4]]
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    parts: list[np.ndarray] = []
    ncols = columns
    seen_first_line = False
    header_checked = not allow_header
    for chunk in _text_chunks(path):
        if b"#" in chunk:
            chunk = _COMMENT_LINES.sub(b"", chunk)
        if not seen_first_line:
            # The first data line decides the header question and the column count.
            chunk = chunk.lstrip()
            if not header_checked and chunk:
                first_line = chunk.split(b"\n", 1)[0]
                header_checked = True
                if not _is_numeric_line(first_line):
                    chunk = chunk[len(first_line) :].lstrip()
            if not chunk:
                continue
            found = len(chunk.split(b"\n", 1)[0].translate(_SEPARATORS).split())
            if ncols is None:
                ncols = found
            elif found != ncols:
                raise ValueError(f"{path}: expected {ncols} columns per line (got {found} in the first data line)")
            seen_first_line = True
        values = _parse_numbers(chunk, dtype, path)
        if values.size % ncols:
            raise ValueError(f"{path}: expected {ncols} columns on every line (got a ragged row)")
        parts.append(values)
    if not parts or not ncols:
        return np.zeros((0, columns or 0), dtype=dtype)
    values = parts[0] if len(parts) == 1 else np.concatenate(parts)
    return values.reshape(-1, ncols)


def _text_chunks(path: Path) -> Iterator[bytes]:
    """The file's bytes in ~64 MiB pieces, each ending at a line break.

    Files above 64 MiB on disk show a progress bar (in bytes read from disk; tqdm hides
    it when stderr is not a terminal).
    """
    from tqdm import tqdm

    size = path.stat().st_size
    with open(path, "rb") as raw, tqdm(total=size, unit="B", unit_scale=True, desc=f"reading {path.name}",
                                        disable=None if size > _TEXT_CHUNK else True, leave=False) as bar:
        reader: Any = gzip.GzipFile(fileobj=raw) if path.suffix == ".gz" else raw
        carry = b""
        while True:
            block = reader.read(_TEXT_CHUNK)
            bar.update(raw.tell() - bar.n)
            if not block:
                break
            block = carry + block
            cut = block.rfind(b"\n")
            if cut < 0:
                carry = block
                continue
            carry = block[cut + 1 :]
            yield block[: cut + 1]
        if carry:
            yield carry


def _is_numeric_line(line: bytes) -> bool:
    try:
        [float(tok) for tok in line.translate(_SEPARATORS).split()]
    except ValueError:
        return False
    return True


def _parse_numbers(chunk: bytes, dtype: type, path: Path) -> np.ndarray:
    text = chunk.translate(_SEPARATORS)
    if not text.strip():
        return np.zeros(0, dtype=dtype)
    # numpy reports a half-parsed string with a DeprecationWarning (older releases) or a
    # ValueError (2.x); both mean a token that is not a number.
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        try:
            return np.fromstring(text, dtype=dtype, sep=" ")
        except (ValueError, DeprecationWarning):
            pass
    bad = next((tok for tok in text.split() if not _parses(tok, dtype)), b"?")
    kind = "integers" if np.issubdtype(np.dtype(dtype), np.integer) else "numbers"
    raise ValueError(f"{path}: expected {kind} separated by commas, tabs or spaces (got {bad.decode(errors='replace')!r})")


def _parses(token: bytes, dtype: type) -> bool:
    try:
        (int if np.issubdtype(np.dtype(dtype), np.integer) else float)(token)
    except ValueError:
        return False
    return True
