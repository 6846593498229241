"""METIS k-way partitioning with multi-constraint balance (nodes, train nodes, edges).

``metis`` symmetrises the graph, balances the chosen constraints through METIS vertex weights
and, when train nodes are balanced, runs the train-balance refinement of
``partition.methods.refine``. ``run_metis`` is the pymetis call the SuperTMA method shares;
pymetis is imported inside it, so importing this module does not load it.
"""

from __future__ import annotations

import logging
from typing import Any, Optional, Sequence, Union

import numpy as np

from graphdist.data.graph import Graph
from partition.csr import cut_edges, symmetric_csr
from partition.methods import _check_parts
from partition.methods.refine import MAX_CUT_GROWTH, TRAIN_TOLERANCE, refine_train_balance

logger = logging.getLogger(__name__)

__all__ = ["BALANCE_NAMES", "DEFAULT_BALANCE", "metis", "run_metis", "validate_balance"]

BALANCE_NAMES = ("nodes", "train", "edges")
DEFAULT_BALANCE = BALANCE_NAMES


def metis(
    graph: Graph,
    num_parts: int,
    seed: int = 0,
    balance: Sequence[str] = DEFAULT_BALANCE,
    refine: bool = True,
    info: Optional[dict[str, Any]] = None,
) -> np.ndarray:
    """METIS k-way partition with multi-constraint balance and train-balance refinement.

    Args:
        graph: the graph (directed graphs are symmetrised for METIS).
        num_parts: number of parts, >= 1.
        seed: METIS's random seed (default 0).
        balance: constraints out of ``("nodes", "train", "edges")`` (default all three);
            ``train`` needs ``graph.train_mask`` and also enables the refinement pass.
        refine: run the train-balance refinement when ``train`` is balanced (default True).
        info: if given, filled with ``metis_cut`` and the refinement report.

    Returns:
        int64 ``[num_nodes]`` part of every node.

    Example:
        >>> from graphdist.testing import tiny_graph
        >>> metis(tiny_graph(), 2, balance=("nodes",)).tolist()  # the two rings
        [0, 0, 0, 0, 0, 1, 1, 1, 1, 1]
    """
    _check_parts(graph, num_parts)
    balance = validate_balance(balance)
    xadj, adjncy = symmetric_csr(graph)
    train = _train_mask(graph) if "train" in balance else None
    weights = _vertex_weights(xadj, balance, train)
    parts = run_metis(xadj, adjncy, num_parts, seed, weights)
    if refine and train is not None and num_parts > 1:
        parts, report = refine_train_balance(xadj, adjncy, parts, train, num_parts)
        if info is not None:
            info["refine"] = report.__dict__
        if not report.balanced:
            logger.warning(
                "train nodes per part %s are not within %.0f%% of the mean: the refinement stopped at the "
                "edge-cut budget (+%.0f%% over METIS); use --balance without train or another method",
                report.train_after, TRAIN_TOLERANCE * 100, MAX_CUT_GROWTH * 100,
            )
    if info is not None:
        info["edge_cut"] = cut_edges(xadj, adjncy, parts) / max(adjncy.size, 1)
    return parts


def run_metis(
    xadj: np.ndarray,
    adjncy: np.ndarray,
    num_parts: int,
    seed: int,
    weights: Optional[np.ndarray] = None,
    recursive: Optional[bool] = None,
) -> np.ndarray:
    """pymetis on a symmetric loop-free CSR; ``weights`` is ``[n, ncon]`` int or None.

    ``recursive`` None keeps pymetis's choice (bisection up to 8 parts, k-way above).
    """
    import pymetis  # heavy C extension: only the METIS-based methods need it

    n = xadj.size - 1
    if num_parts == 1 or n == 0:
        return np.zeros(n, dtype=np.int64)
    index = pymetis.zero_copy_dtype()  # arrays already of this dtype are passed without a copy
    options = pymetis.Options()
    options.seed = int(seed)
    vweights = None if weights is None else np.ascontiguousarray(weights, dtype=index).reshape(-1)
    result = pymetis.part_graph(
        num_parts,
        pymetis.CSRAdjacency(xadj.astype(index, copy=False), adjncy.astype(index, copy=False)),
        vweights=vweights,
        options=options,
        recursive=recursive,
    )
    return np.array(result.vertex_part, dtype=np.int64)


def validate_balance(balance: Union[str, Sequence[str]]) -> tuple[str, ...]:
    """Normalises ``"nodes,train"`` or a sequence to a tuple; raises on unknown names."""
    names = tuple(b.strip() for b in (balance.split(",") if isinstance(balance, str) else balance) if b.strip())
    unknown = [b for b in names if b not in BALANCE_NAMES]
    if unknown or not names:
        got = ",".join(names) or "nothing"
        raise ValueError(
            f"--balance: expected a non-empty subset of {','.join(BALANCE_NAMES)} (got {got}), "
            "e.g. --balance nodes,train"
        )
    return tuple(dict.fromkeys(names))


def _vertex_weights(xadj: np.ndarray, balance: Sequence[str], train: Optional[np.ndarray]) -> Optional[np.ndarray]:
    """``[n, ncon]`` METIS vertex weights, or None for plain node balance."""
    columns = []
    n = xadj.size - 1
    for name in balance:
        if name == "nodes":
            columns.append(np.ones(n, dtype=np.int64))
        elif name == "train" and train is not None and train.any():
            columns.append(train.astype(np.int64))
        elif name == "edges":
            # Degree + 1: METIS rejects a constraint whose weights are all zero.
            columns.append(np.diff(xadj) + 1)
    if not columns or (len(columns) == 1 and balance[0] == "nodes"):
        return None
    return np.stack(columns, axis=1)


def _train_mask(graph: Graph) -> Optional[np.ndarray]:
    if graph.train_mask is None or not bool(graph.train_mask.any()):
        return None
    return graph.train_mask.numpy()
