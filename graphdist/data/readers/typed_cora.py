"""``typed-cora``: cora as a typed graph of papers and the words they contain.

Built from the shared ``cora.npz`` (found and read as ``load_graph("cora")`` finds and reads it):

- node types ``paper`` (2,708: cora's bag-of-words rows as features, its labels and split; the
  target) and ``word`` (1,433: one per bag-of-words column, featureless);
- ``paper__cites__paper``: cora's citations as stored. Cora stores each citation in both directions,
  so its reverse is itself: one relation, not a ``rev_cites`` copy of it;
- ``paper__contains__word``: an edge wherever a paper's feature is non-zero, and its reverse
  ``word__in__paper``.

It is small enough to build on every load (nothing is cached); its cache key is derived from
cora's (``typed_cora_key``), so a changed ``cora.npz`` changes it.
"""

from __future__ import annotations

import hashlib

import torch

from graphdist.data.graph import MASK_NAMES, Graph
from graphdist.data.hetero import typed_graph

#: The dataset name ``load_graph`` knows.
TYPED_CORA = "typed-cora"


def typed_cora(graph: Graph, name: str = TYPED_CORA) -> Graph:
    """The typed paper/word graph of a homogeneous bag-of-words graph (cora's layout).

    Args:
        graph: a graph whose ``x`` columns are words (non-zero: the paper contains the word).
        name: the typed graph's name.

    Returns:
        A typed ``Graph``: ``paper`` (target, ``graph``'s x, y and masks) then ``word``
        (featureless); relations ``paper__cites__paper``, ``paper__contains__word``, ``word__in__paper``.

    Raises:
        ValueError: ``graph`` has no features.

    Example:
        >>> g = Graph.from_edge_index([[0, 1], [1, 0]], x=torch.tensor([[1.0, 0, 2], [0, 0, 1]]), num_nodes=2)
        >>> t = typed_cora(g)
        >>> t.schema.describe()
        '2 node types (paper 2, word 3*), 3 relations; * featureless'
        >>> [int((t.edge_type == r).sum()) for r in range(3)]  # cites, contains, in
        [2, 3, 3]
    """
    if graph.x is None:
        raise ValueError(f"{graph.name}: expected bag-of-words features x (got none): the words are its columns")
    papers, words = graph.x.shape
    # Chunked over papers: one boolean [chunk, words] at a time, not a copy of x.
    rows, cols = [], []
    for start in range(0, papers, 1 << 14):
        r, c = torch.nonzero(graph.x[start:start + (1 << 14)] != 0, as_tuple=True)
        rows.append(r + start)
        cols.append(c)
    contains = torch.stack([torch.cat(rows), torch.cat(cols)])
    cites = torch.stack([graph.indices.to(torch.int64), graph.dst_of_edges()])
    masks = {field: getattr(graph, field) for field in MASK_NAMES}
    return typed_graph(
        {"paper": papers, "word": words},
        {("paper", "cites", "paper"): cites, ("paper", "contains", "word"): contains,
         ("word", "in", "paper"): contains.flip(0)},
        x={"paper": graph.x}, y=graph.y, masks=masks, target="paper" if graph.y is not None else None, name=name,
    )


def load_typed_cora(name: str = TYPED_CORA, download: bool = True) -> Graph:
    """``typed-cora``: :func:`typed_cora` of cora, found (or downloaded) as ``load_graph("cora")`` does.

    Raises:
        FileNotFoundError: cora is nowhere (the message says where it looked).
    """
    # The planetoid reader that load_graph("cora") calls, called directly: going through
    # load_graph would make this module and the loaders import each other.
    from graphdist.data.readers.planetoid import _load_named

    return typed_cora(_load_named("cora", download=download), name=name)


def typed_cora_key(cora_key: str) -> str:
    """The cache key of ``typed-cora`` given cora's: ``missing`` stays ``missing``, any other is rehashed.

    Example:
        >>> typed_cora_key("missing"), len(typed_cora_key("0123456789ab"))
        ('missing', 12)
    """
    if cora_key == "missing":
        return cora_key
    return hashlib.sha256(f"{TYPED_CORA}:{cora_key}".encode()).hexdigest()[:12]


__all__ = ["TYPED_CORA", "load_typed_cora", "typed_cora", "typed_cora_key"]
