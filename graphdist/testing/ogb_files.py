"""A tiny ogbn-mag folder as OGB's ``mag.zip`` lays it out, for tests of the heterogeneous OGB reader
(``graphdist/data/readers/ogb_hetero.py``) and of training on what it reads.

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> write_mag(Path(tempfile.mkdtemp()) / "ogbn_mag").shape
    (5, 3)
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

__all__ = ["MAG_EDGES", "write_gz", "write_mag"]


def write_gz(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(text.encode()))


def rows(array) -> str:
    return "".join(",".join(str(v) for v in row) + "\n" for row in np.asarray(array).reshape(len(array), -1))


MAG_EDGES = {  # ogbn-mag's four relations, in ogb's (sorted) order
    ("author", "affiliated_with", "institution"): [[0, 1, 3], [1, 0, 1]],
    ("author", "writes", "paper"): [[0, 0, 1, 2, 3], [0, 1, 1, 4, 3]],
    ("paper", "cites", "paper"): [[0, 1, 2, 4, 1], [1, 2, 0, 3, 0]],  # 0->1 and 1->0: one pair twice
    ("paper", "has_topic", "field_of_study"): [[0, 2, 4], [0, 1, 1]],
}


def write_mag(root: Path) -> np.ndarray:
    """A 5-paper ogbn-mag as ogb's mag.zip lays it out; returns the paper features."""
    raw = root / "raw"
    write_gz(raw / "num-node-dict.csv.gz", "author,field_of_study,institution,paper\n4,2,2,5\n")
    write_gz(raw / "triplet-type-list.csv.gz", "".join(",".join(t) + "\n" for t in MAG_EDGES))
    for r_id, (triplet, (src, dst)) in enumerate(MAG_EDGES.items()):
        folder = raw / "relations" / "___".join(triplet)
        write_gz(folder / "edge.csv.gz", rows(np.array([src, dst]).T))
        write_gz(folder / "num-edge-list.csv.gz", f"{len(src)}\n")
        write_gz(folder / "edge_reltype.csv.gz", f"{r_id}\n" * len(src))
    feats = np.arange(15, dtype=np.float32).reshape(5, 3) / 4
    write_gz(raw / "node-feat" / "paper" / "node-feat.csv.gz", rows(feats))
    write_gz(raw / "node-feat" / "paper" / "node_year.csv.gz", "2010\n" * 5)
    write_gz(raw / "nodetype-has-label.csv.gz", "author,field_of_study,institution,paper\nFalse,False,False,True\n")
    write_gz(raw / "node-label" / "paper" / "node-label.csv.gz", "3\n0\n2\n2\n1\n")
    split = root / "split" / "time"
    write_gz(split / "nodetype-has-split.csv.gz", "author,field_of_study,institution,paper\nFalse,False,False,True\n")
    for part, ids in (("train", "0\n1\n"), ("valid", "2\n"), ("test", "3\n4\n")):
        write_gz(split / "paper" / f"{part}.csv.gz", ids)
    return feats
