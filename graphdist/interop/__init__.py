"""Interoperability with other GNN systems: their graphs and partitions in, graphdist's out.

DGL / DistDGL: ``dgl_export.py`` (a plain script, run with a python that has dgl) writes plain
arrays; ``graphdist.interop.dgl`` reads them into a `Graph` or a partition directory that keeps
DistDGL's part of every node, so a DistDGL user moves over without re-partitioning.
``graphdist import-dgl`` is the command; ``exporter_usage()`` prints both steps.

Example:
    >>> from graphdist.interop import exporter_path
    >>> exporter_path().name
    'dgl_export.py'
"""

from __future__ import annotations

from graphdist._lazy import lazy_exports

# public name -> module that defines it; imported on first use (numpy, torch and the partition writer)
_LAZY = {
    name: "graphdist.interop.dgl"
    for name in ("DglExport", "exporter_path", "exporter_usage", "import_dgl_partitions", "load_dgl_export",
                 "print_exporter_usage", "read_dgl_export", "read_manifest", "write_npz")
}

__all__ = sorted(_LAZY)
__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
