"""Writes a partition directory for a part assignment made elsewhere (DistDGL, a user's own file).

``partition.api.partition`` runs one of graphdist's partitioners; this takes the part of every
node as given and writes the same checksummed directory (same ``write_partition_files``, same
staging in graphdist/data/staging.py), with ``method`` in ``meta.json`` naming where the assignment came from. The halo is
graphdist's own, built from the whole graph: every in-neighbour of an inner node is local.

Example:
    >>> import tempfile
    >>> from graphdist.testing import tiny_graph, tiny_partition
    >>> from partition.format import load_partition, read_meta
    >>> out = write_assigned(tiny_graph(), tiny_partition().numpy(), tempfile.mkdtemp() + "/tiny-2",
    ...                      method_label="distdgl")
    >>> read_meta(out)["method"], load_partition(out, 1).num_inner
    ('distdgl', 5)
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import numpy as np

from graphdist.data.graph import Graph
from partition.format import write_partition_files
from graphdist.data.staging import staged_directory

logger = logging.getLogger(__name__)


def write_assigned(
    graph: Graph,
    parts: Any,
    out: Union[str, os.PathLike],
    halo_hops: int = 1,
    method_label: str = "distdgl",
    force: bool = False,
    source: Optional[str] = None,
    *,
    num_parts: Optional[int] = None,
    meta_extra: Optional[dict[str, Any]] = None,
    command: Optional[Sequence[str]] = None,
) -> Path:
    """Writes the partition directory of ``graph`` with exactly the part assignment ``parts``.

    Args:
        graph: the whole graph; its node ids are the ones ``parts`` is indexed by, and become
            ``orig_ids.npy``'s values.
        parts: int ``[num_nodes]``, the part of every node.
        out: the output directory (staged in a hidden sibling, renamed into place when complete).
        halo_hops: halo depth, >= 1 (default 1).
        method_label: recorded as ``method`` in ``meta.json`` (default ``"distdgl"``).
        force: replace an existing partition directory at ``out`` (default False).
        source: a key of the input's content, recorded as ``source`` (default None).
        num_parts: number of parts (default ``max(parts) + 1``).
        meta_extra: more entries for ``meta.json`` (e.g. where the assignment came from).
        command: the command line to record (default ``sys.argv``).

    Returns:
        The partition directory.

    Raises:
        ValueError: ``parts`` of the wrong shape or type, ids outside ``[0, num_parts)``, an empty part,
            or a bad ``halo_hops``.
        FileExistsError: ``out`` exists and ``force`` is False.
    """
    num_parts = _check(graph, parts, num_parts, halo_hops)
    parts = np.asarray(parts).astype(np.int64, copy=False)
    extra: dict[str, Any] = {
        "command": shlex.join(list(command) if command is not None else list(sys.argv)),
        "args": {"num_parts": num_parts, "method": method_label, "halo_hops": halo_hops, "force": force,
                 "assigned": True},
        "method": method_label,
        "seed": None,  # the assignment was made elsewhere: no seed of ours reproduces it
        "balance": None,
        "method_info": {"assigned": True},
        "source": source,
    }
    extra.update(meta_extra or {})
    target = Path(out)
    with staged_directory(target, force=force) as tmp:
        write_partition_files(tmp, graph, parts, num_parts, halo_hops, meta_extra=extra)
    logger.info("wrote %s (%s, %d parts)", target, method_label, num_parts)
    return target


def _check(graph: Graph, parts: Any, num_parts: Optional[int], halo_hops: int) -> int:
    array = parts.numpy() if hasattr(parts, "numpy") else np.asarray(parts)
    n = graph.num_nodes
    if array.shape != (n,) or not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"parts: expected an integer array of shape [{n}], one part per node "
                         f"(got {array.dtype} {tuple(array.shape)})")
    if isinstance(halo_hops, bool) or not isinstance(halo_hops, (int, np.integer)) or halo_hops < 1:
        raise ValueError(f"halo_hops: expected an integer >= 1 (got {halo_hops!r})")
    count = int(num_parts) if num_parts is not None else (int(array.max()) + 1 if n else 1)
    if count < 1:
        raise ValueError(f"num_parts: expected an integer >= 1 (got {count})")
    if n and (int(array.min()) < 0 or int(array.max()) >= count):
        raise ValueError(f"parts: ids must lie in [0, {count}) (got {int(array.min())}..{int(array.max())})")
    empty = np.flatnonzero(np.bincount(array, minlength=count) == 0)
    if empty.size:
        raise ValueError(f"parts: part(s) {', '.join(map(str, empty[:8].tolist()))} hold no node; every part needs "
                         f"nodes to train on (use at most {count - empty.size} parts)")
    return count


__all__ = ["write_assigned"]
