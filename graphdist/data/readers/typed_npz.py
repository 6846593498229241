"""The typed ``.npz``: a heterogeneous graph in one archive, read by ``load_graph``, written by :func:`save_typed_npz`.

Keys (``<t>`` a node type; names hold no ``__``, the separator):

==========================================  ===============  ===============================================
key                                         dtype, shape     meaning
==========================================  ===============  ===============================================
``edge_index__<src>__<rel>__<dst>``         int ``[2, E]``   one relation's (source, destination) ids, each
                                                             within its type; at least one relation
``x__<t>``                                  float            features of type ``t``; absent: featureless
                                            ``[N_t, F_t]``
``num_nodes__<t>``                          int scalar       ``N_t``; required for a featureless type,
                                                             optional beside ``x__<t>`` (then equal)
``y__<t>``                                  int ``[N_t]``    labels (``-1`` unlabelled); on one type at
                                                             most, the target
``{train,val,test}_mask__<t>``              bool ``[N_t]``   the target type's split
==========================================  ===============  ===============================================

Integer keys may have any integer width (read as int64), ``x__`` any float width (held as float32).
An archive holding any of these keys is typed, and then every key must be one of them: a
homogeneous ``edge_index``, ``x``, ``y`` or mask beside them is an error, as is any other key
(a misspelt key would otherwise drop its data in silence).

Order: the node types' id ranges are the target type's first (the labelled ids are ``0..N_target-1``),
then the other types in the order of their first ``x__`` or ``num_nodes__`` key in the archive
(``np.savez`` keeps its keywords' order); the relations in the order of their ``edge_index__`` keys.
Type names are not sorted. :func:`save_typed_npz` writes in the schema's order, so a graph whose
target type is first (or that has no target) reads back equal; any other comes back with its target
type moved to the front.

Example:
    >>> import pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "tiny.npz"
    >>> np.savez(path, x__paper=np.ones((3, 2), np.float32), y__paper=np.array([0, 1, 0]),
    ...          num_nodes__author=np.array(2), edge_index__author__writes__paper=np.array([[0, 1], [2, 2]]))
    >>> g = load_typed_npz(path)
    >>> g.schema.describe(), g.schema.target
    ('2 node types (paper 3, author 2*), 1 relations; * featureless', 'paper')
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Optional

import numpy as np

from graphdist.data.graph import MASK_NAMES, Graph
from graphdist.data.hetero import SEP, Relation, typed_graph
from graphdist.data.readers.common import PathLike, _atomic_savez, _check_finite, _npz_member_memmap, open_npz

# The fields of a typed key, ``<field>__<type or relation>``.
TYPED_FIELDS = ("edge_index", "x", "num_nodes", "y", *MASK_NAMES)
# What the homogeneous format (readers/npz.py) stores: never beside typed keys.
_HOMOGENEOUS_KEYS = ("edge_index", "x", "y", *MASK_NAMES, "x_indptr", "x_indices", "x_data", "x_shape")
_LAYOUT = "edge_index__<src>__<rel>__<dst>, x__<type>, num_nodes__<type>, y__<type>, <train|val|test>_mask__<type>"


def is_typed_npz(keys: Iterable[str]) -> bool:
    """Whether an archive with these keys is a typed one: any key is ``<field>__<name>``.

    Example:
        >>> is_typed_npz(["x__paper", "edge_index__paper__cites__paper"]), is_typed_npz(["x", "edge_index"])
        (True, False)
    """
    return any(_split(key) is not None for key in keys)


def _split(key: str) -> Optional[tuple[str, str]]:
    field, sep, rest = key.partition(SEP)
    return (field, rest) if sep and field in TYPED_FIELDS else None


def load_typed_npz(path: PathLike, name: Optional[str] = None) -> Graph:
    """Reads a typed ``.npz`` (the module docstring lists its keys) into a typed ``Graph``.

    ``load_graph(path)`` and ``load_npz(path)`` come here when the archive's keys are typed.

    Args:
        path: the archive.
        name: the graph's name (default: the file's stem).

    Returns:
        A typed ``Graph`` (``graphdist.data.hetero``): target type first, the type of ``y__``.

    Raises:
        ValueError: one line naming the file and the key: an unknown or homogeneous key beside typed
            ones, a relation or label naming an undeclared type, ``y__`` on two types, a mask off the
            target type or of the wrong length, a wrong dtype or shape, ids out of their type's range.
        FileNotFoundError: no such file.
    """
    path = Path(path)
    archive = open_npz(path)
    with archive:
        keys = list(archive.files)

        def read(key: str) -> np.ndarray:
            mapped = _npz_member_memmap(path, key)  # a large x or edge_index stored uncompressed: mapped, not read
            return mapped if mapped is not None else archive[key]

        layout = _Layout.parse(path, keys)
        counts, x = {}, {}
        for t in layout.types:
            counts[t], x[t] = _count_and_features(path, t, layout, read)
        target = layout.target
        y = masks = None
        if target is not None:
            key = layout.y[target]
            y = _typed_array(path, key, read(key), "integer", (counts[target],), "labels")
            masks = {}
            for (field, _), mkey in layout.masks.items():
                masks[field] = _typed_array(path, mkey, read(mkey), "bool", (counts[target],), "mask")
        edges = {}
        for key, rel in layout.relations.items():
            edges[rel.key] = _relation_edges(path, key, rel, read(key), counts)
    for t, feats in x.items():
        if feats is not None:
            _check_finite(feats, path, f"x__{t}")
    order = ([target] if target is not None else []) + [t for t in layout.types if t != target]
    try:
        return typed_graph({t: counts[t] for t in order}, edges, x={t: f for t, f in x.items() if f is not None},
                           y=y, masks=masks, target=target, name=name or path.stem)
    except ValueError as exc:  # checked above key by key; whatever is left still names the file
        raise ValueError(f"{path}: {exc}") from exc


class _Layout:
    """Which key holds what, checked against each other before any array is read."""

    def __init__(self) -> None:
        self.types: list[str] = []  # declared (x__ or num_nodes__), in the order of their first key
        self.x: dict[str, str] = {}
        self.num_nodes: dict[str, str] = {}
        self.y: dict[str, str] = {}
        self.masks: dict[tuple[str, str], str] = {}
        self.relations: dict[str, Relation] = {}

    @property
    def target(self) -> Optional[str]:
        return next(iter(self.y), None)

    @classmethod
    def parse(cls, path: Path, keys: list[str]) -> "_Layout":
        out = cls()
        typed = next((k for k in keys if _split(k) is not None), None)
        for key in keys:
            parsed = _split(key)
            if parsed is None:
                if key in _HOMOGENEOUS_KEYS:
                    raise ValueError(f"{path}: {key}: a homogeneous key beside typed keys such as {typed!r}: "
                                     "expected one layout per file, typed or homogeneous (datasets/README.md)")
                raise ValueError(f"{path}: {key}: expected a typed key ({_LAYOUT}) (got {key!r})")
            field, rest = parsed
            if field == "edge_index":
                parts = rest.split(SEP)
                if len(parts) != 3 or not all(parts):
                    raise ValueError(f"{path}: {key}: expected edge_index__<src>__<rel>__<dst>, three names without "
                                     f"'{SEP}' (got {len(parts)} parts {parts})")
                out.relations[key] = Relation(*parts)
                continue
            if not rest or SEP in rest:
                raise ValueError(f"{path}: {key}: expected {field}__<type>, a type name without '{SEP}' (got {rest!r})")
            if field in ("x", "num_nodes"):
                (out.x if field == "x" else out.num_nodes)[rest] = key
                if rest not in out.types:
                    out.types.append(rest)
            elif field == "y":
                out.y[rest] = key
            else:
                out.masks[(field, rest)] = key
        out._check(path, keys)
        return out

    def _check(self, path: Path, keys: list[str]) -> None:
        declare = "declare it with x__{t} (features) or num_nodes__{t} (featureless)"
        if not self.relations:
            raise ValueError(f"{path}: expected at least one edge_index__<src>__<rel>__<dst> key (got keys {keys})")
        for key, rel in self.relations.items():
            for end in (rel.src, rel.dst):
                if end not in self.types:
                    raise ValueError(f"{path}: {key}: node type {end!r} is not declared (types: {self.types}); "
                                     + declare.format(t=end))
        if len(self.y) > 1:
            raise ValueError(f"{path}: {', '.join(self.y.values())}: expected y__ on one node type, the target "
                             f"(got {len(self.y)})")
        for t, key in self.y.items():
            if t not in self.types:
                raise ValueError(f"{path}: {key}: node type {t!r} is not declared (types: {self.types}); "
                                 + declare.format(t=t))
        for (field, t), key in self.masks.items():
            if t != self.target:
                want = f"{field}__{self.target}, on the type with y__" if self.target else f"y__{t} beside it"
                raise ValueError(f"{path}: {key}: a mask belongs to the labelled (target) type: expected {want} "
                                 f"(got a mask on {t!r})")


def _count_and_features(path: Path, t: str, layout: _Layout, read: Any) -> tuple[int, Optional[np.ndarray]]:
    feats = None
    if t in layout.x:
        key = layout.x[t]
        feats = read(key)
        if not np.issubdtype(feats.dtype, np.floating) or feats.ndim != 2:
            raise ValueError(f"{path}: {key}: expected float [N_{t}, F] features "
                             f"(got {feats.dtype} {list(feats.shape)})")
    count = None
    if t in layout.num_nodes:
        key = layout.num_nodes[t]
        value = np.asarray(read(key))
        if not np.issubdtype(value.dtype, np.integer) or value.size != 1 or int(value.reshape(-1)[0]) < 0:
            raise ValueError(f"{path}: {key}: expected an integer scalar >= 0 (got {value.dtype} {list(value.shape)}"
                             f"{' = ' + str(value.reshape(-1)[0]) if value.size == 1 else ''})")
        count = int(value.reshape(-1)[0])
        if feats is not None and feats.shape[0] != count:
            raise ValueError(f"{path}: {key}: expected {feats.shape[0]}, the rows of x__{t} (got {count})")
    return (count if count is not None else int(feats.shape[0])), feats


def _typed_array(path: Path, key: str, value: np.ndarray, kind: str, shape: tuple[int, ...], what: str) -> np.ndarray:
    ok = value.dtype == np.bool_ if kind == "bool" else np.issubdtype(value.dtype, np.integer)
    if not ok or tuple(value.shape) != shape:
        raise ValueError(f"{path}: {key}: expected {kind} {what} of shape {list(shape)}, one per node of its type "
                         f"(got {value.dtype} {list(value.shape)})")
    return value.astype(np.int64, copy=False) if kind == "integer" else value


def _relation_edges(path: Path, key: str, rel: Relation, value: np.ndarray, counts: dict[str, int]) -> np.ndarray:
    if not np.issubdtype(value.dtype, np.integer) or value.ndim != 2 or value.shape[0] != 2:
        raise ValueError(f"{path}: {key}: expected integer ids of shape [2, E] (got {value.dtype} {list(value.shape)})")
    for row, end in ((0, rel.src), (1, rel.dst)):
        if value.shape[1]:
            lo, hi = int(value[row].min()), int(value[row].max())
            if lo < 0 or hi >= counts[end]:
                raise ValueError(f"{path}: {key}: {'source' if row == 0 else 'destination'} ids are {end} ids, "
                                 f"expected in [0, {counts[end]}) (got {lo if lo < 0 else hi})")
    return value


def typed_arrays(graph: Graph) -> dict[str, np.ndarray]:
    """The typed ``.npz`` keys of a typed graph, in the schema's order (what :func:`save_typed_npz` writes).

    Raises:
        ValueError: ``graph`` has no schema.

    Example:
        >>> from graphdist.data.hetero import typed_graph
        >>> g = typed_graph({"p": 2, "w": 3}, {("w", "in", "p"): [[0, 2], [1, 1]]},
        ...                 x={"p": np.ones((2, 4), np.float32)})
        >>> list(typed_arrays(g))
        ['num_nodes__p', 'x__p', 'num_nodes__w', 'edge_index__w__in__p']
    """
    s = graph.schema
    if s is None or graph.edge_type is None:
        raise ValueError(f"graph: expected a typed graph (schema and edge_type) (got {graph.name!r} without node "
                         "types); save a homogeneous graph with edge_index, x, y and masks (datasets/README.md)")
    out: dict[str, np.ndarray] = {}
    for i, t in enumerate(s.node_types):
        lo, hi = s.offsets[i], s.offsets[i + 1]
        out[f"num_nodes__{t}"] = np.asarray(hi - lo, dtype=np.int64)
        if s.widths[i]:
            out[f"x__{t}"] = np.ascontiguousarray(graph.x[lo:hi, : s.widths[i]].numpy(), dtype=np.float32)
        if t == s.target:
            if graph.y is not None:
                out[f"y__{t}"] = graph.y[lo:hi].numpy().astype(np.int64, copy=False)
            for field in MASK_NAMES:
                mask = getattr(graph, field)
                if mask is not None:
                    out[f"{field}__{t}"] = mask[lo:hi].numpy()
    dst = graph.dst_of_edges().numpy()
    src = graph.indices.numpy().astype(np.int64, copy=False)
    rel = graph.edge_type.numpy()
    for r_id, r in enumerate(s.relations):
        pick = rel == r_id
        src_off, dst_off = s.offsets[s.type_id(r.src)], s.offsets[s.type_id(r.dst)]
        out[f"edge_index__{r.key}"] = np.stack([src[pick] - src_off, dst[pick] - dst_off])
    return out


def save_typed_npz(graph: Graph, path: PathLike) -> Path:
    """Writes a typed graph as a typed ``.npz``, the inverse of :func:`load_typed_npz`.

    Every type gets ``num_nodes__<t>`` (the order of the types in the file), typed features ``x__<t>``
    (their own width, not the padded table's), the target's ``y__``/masks, and one ``edge_index__`` per
    relation. Stored uncompressed, so that a large ``x__<t>`` is memory-mapped when read; written aside
    and renamed, so an interrupted write leaves no truncated file.

    Args:
        graph: a typed graph (``graph.schema`` set).
        path: the file to write, as given (no ``.npz`` is appended).

    Returns:
        ``path``.

    Raises:
        ValueError: ``graph`` is not typed.

    Example:
        >>> import pathlib, tempfile
        >>> from graphdist.data.hetero import typed_graph
        >>> g = typed_graph({"a": 2, "b": 1}, {("b", "r", "a"): [[0, 0], [0, 1]]}, x={"a": np.ones((2, 3), np.float32)})
        >>> back = load_typed_npz(save_typed_npz(g, pathlib.Path(tempfile.mkdtemp()) / "g.npz"))
        >>> back.schema == g.schema, back.indices.tolist() == g.indices.tolist()
        (True, True)
    """
    path = Path(path)
    _atomic_savez(path, typed_arrays(graph))
    return path


__all__ = ["TYPED_FIELDS", "is_typed_npz", "load_typed_npz", "save_typed_npz", "typed_arrays"]
