"""``PartitionDir``: a partition directory opened once per process, passed where its path travelled.

Its ``meta.json`` is read and checked once (``read_meta``); the checksum of its contents, its
parts, its edge counts between parts and its whole structure come from that one read. It is a path
too (``os.fspath``), so code that takes a directory takes the handle.

Example:
    >>> import tempfile
    >>> from graphdist.testing import tiny_graph
    >>> from partition.api import partition
    >>> parts = PartitionDir(partition(tiny_graph(), 2, method="random", out=tempfile.mkdtemp() + "/p"))
    >>> parts.num_parts, parts.load([0, 1]).num_halo, len(parts.checksum)
    (2, 0, 64)
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any, Optional, Sequence

from partition.format import PathLike, content_checksum, load_partition, part_files, read_meta
from partition.merge import load_parts
from partition.part import Partition


class PartitionDir(os.PathLike):
    """A partition directory: its path and its checked ``meta.json``, read once.

    Raises (on construction):
        PartitionFormatError: a missing or unreadable ``meta.json``, or another format version.
    """

    def __init__(self, path: PathLike, meta: Optional[dict[str, Any]] = None) -> None:
        self.path = Path(os.fspath(path))
        self.meta = meta if meta is not None else read_meta(self.path)

    def __fspath__(self) -> str:
        return str(self.path)

    def __repr__(self) -> str:
        return f"PartitionDir({str(self.path)!r}, {self.num_parts} parts)"

    def __reduce__(self) -> tuple[Any, ...]:
        return (PartitionDir, (self.path, self.meta))  # to a worker with the meta already read

    @property
    def num_parts(self) -> int:
        return int(self.meta["num_parts"])

    @functools.cached_property
    def checksum(self) -> str:
        """The contents' checksum (``partition.format.content_checksum``): what a resumed run must train on."""
        return content_checksum(self.meta)

    def part(self, part_id: int, verify: bool = True) -> Partition:
        """Part ``part_id``, memory-mapped (``partition.format.load_partition``)."""
        return load_partition(self.path, part_id, verify=verify, meta=self.meta)

    def load(self, part_ids: Sequence[int], verify: bool = True) -> Partition:
        """The parts ``part_ids`` as one ``Partition`` (``partition.merge.load_parts``)."""
        return load_parts(self.path, part_ids, verify=verify, meta=self.meta)

    def missing(self, part_ids: Sequence[int]) -> list[tuple[int, Path]]:
        """``(part, file)`` for each file of ``part_ids`` not on this machine (a host that was never sent them).

        Example:
            >>> import tempfile
            >>> from graphdist.testing import tiny_graph
            >>> from partition.api import partition
            >>> PartitionDir(partition(tiny_graph(), 2, method="random", out=tempfile.mkdtemp() + "/p")).missing([0, 1])
            []
        """
        return [(int(p), self.path / name) for p in part_ids for name in part_files(self.meta, int(p))
                if not (self.path / name).exists()]

    def part_edges(self) -> list[list[int]]:
        """Edges between every two parts (``partition.views.part_edges``)."""
        from partition.views import part_edges

        return part_edges(self.path)


def opened(partitions: "PartitionDir | PathLike") -> PartitionDir:
    """``partitions`` as a handle: itself, or the directory it names opened."""
    return partitions if isinstance(partitions, PartitionDir) else PartitionDir(partitions)


__all__ = ["PartitionDir", "opened"]
