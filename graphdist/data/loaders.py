"""Dataset loaders: one entry point, ``load_graph``, for every input format graphdist reads.

Accepted inputs (the first that applies wins):

==============================  =====================================================
``Graph``                       returned as is
PyG ``Data``                    converted with ``Graph.from_pyg``
``"cora"``, ``"citeseer"``,     ``<name>.npz`` looked up in each ``GRAPHDIST_DATA``
``"pubmed"``                    directory, then in ``GRAPHDIST_CACHE``; if absent and
                                online, fetched with torch_geometric's ``Planetoid``
                                into the cache and converted once
``"typed-cora"``                cora as a typed graph: ``paper`` (x, y, split) and ``word``
                                (featureless), ``cites``, ``contains`` and ``in``
                                (``readers/typed_cora.py``)
``"ogbn-arxiv"``,                OGB's own folder (``ogbn_arxiv/``) in each ``GRAPHDIST_DATA``
``"ogbn-products"``,             directory, then in ``GRAPHDIST_CACHE``; if absent, OGB's zip
``"ogbn-papers100M"``           downloaded into the cache (``readers/ogb_names.py``); made
                                undirected, OGB's split, memory checked before reading
``"synthetic-<N>"``             ``synthetic(N)`` with the documented defaults (e.g.
                                ``synthetic-100k``, ``synthetic-1m``, ``synthetic-2500``);
                                from 2M nodes on generated out of core once into
                                ``GRAPHDIST_CACHE/graphs/<name>`` and memory-mapped
                                (``synthetic_disk.py``); ``-multilabel`` suffix: multi-label y
``*.npz`` file                  the graphdist format of ``datasets/README.md``: ``edge_index``,
                                dense ``x`` or CSR ``x_indptr/x_indices/x_data/x_shape``,
                                ``y``, masks
typed ``*.npz`` file            a typed graph: ``edge_index__<src>__<rel>__<dst>``,
                                ``x__<type>``, ``num_nodes__<type>``, ``y__<type>``,
                                ``<split>_mask__<type>`` (``readers/typed_npz.py``)
OGB node-property directory     ``raw/edge.csv.gz`` + ``num-node-list.csv.gz`` (+ ``node-feat``,
                                ``node-label``) or binary ``raw/data.npz`` + ``node-label.npz``;
                                ``split/<type>/{train,valid,test}.csv.gz``; no ``ogb`` import
heterogeneous OGB directory     ogbn-mag's ``raw/num-node-dict.csv.gz`` + ``raw/relations/``
                                ``<src>___<rel>___<dst>/edge.csv.gz`` (+ ``node-feat/<type>``,
                                ``node-label/<type>``), ``split/time/<type>``: a typed graph,
                                each relation's reverse added (``readers/ogb_hetero.py``)
generated graph directory       ``synthetic(N, out=DIR)``'s ``meta.json`` + ``.npy`` files, memory-mapped
saved PyG dataset directory     ``processed/*.pt`` of an ``InMemoryDataset``, or a Planetoid
                                ``raw/ind.<name>.*`` folder (best effort, offline)
edge list (``.csv``, ``.tsv``,  ``src,dst`` per line (comma, tab, space or ``;``), optional
``.txt``, ``.edges``, ``.gz``)  header, ``#`` comments; ``features=``/``labels=`` files
==============================  =====================================================

Environment:

* ``GRAPHDIST_DATA``: ``:``-separated read-only dataset directories (tests and CI point it
  at ``../shared/datasets``). graphdist never writes there.
* ``GRAPHDIST_CACHE``: where graphdist writes downloads and derived files (default
  ``~/.cache/graphdist``); nothing else is ever written.
* ``GRAPHDIST_OFFLINE=1``: never try the network.
* ``GRAPHDIST_OGB_URL``: where OGB's archives are downloaded from (a base URL; default OGB's own).

Memory: arrays are read one at a time and intermediates freed; a ``.npz`` member stored
uncompressed (``np.savez``, as ogbn-papers100M's ``data.npz``) is memory-mapped rather than
read; a ``.npy`` feature file is memory-mapped. A mapped ``x`` is scanned for NaN/inf once,
here, in chunks, and the ``Graph`` is built with ``validate_features=False``.

Example:
    >>> from graphdist.data import load_graph
    >>> g = load_graph("synthetic-2500")
    >>> g.num_nodes, g.num_features
    (2500, 100)
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union

import numpy as np
import torch

from graphdist.data.graph import Graph
# The readers and path rules live in their own modules; their public names are re-exported
# here because callers import them from graphdist.data.loaders.
from graphdist.data.paths import cache_dir, dataset_dirs, find_dataset
from graphdist.data.readers.common import PathLike
from graphdist.data.readers.edgelist import EDGE_LIST_SUFFIXES, load_edge_list  # noqa: F401 - re-exported
from graphdist.data.readers.npz import load_npz
from graphdist.data.readers.ogb import load_ogb
from graphdist.data.readers.ogb_names import OGB_DATASETS
from graphdist.data.readers.planetoid import PLANETOID_NAMES
from graphdist.data.readers.pyg import load_pyg_dataset
from graphdist.data.readers.registry import claim
from graphdist.data.readers.text import read_table
from graphdist.data.readers.typed_cora import TYPED_CORA

if TYPE_CHECKING:  # torch_geometric is imported lazily: spawned workers start fast.
    from torch_geometric.data import Data

KNOWN_NAMES = (*PLANETOID_NAMES, TYPED_CORA, *OGB_DATASETS)
_PATH_FORMATS = (
    "a .npz file in the graphdist format or its typed form (datasets/README.md), an OGB node-property directory "
    "(raw/edge.csv.gz or raw/data.npz) or a heterogeneous one (raw/num-node-dict.csv.gz, ogbn-mag), "
    "a saved PyG dataset directory (processed/*.pt), "
    "a generated graph directory (synthetic(N, out=DIR)), "
    "or an edge-list file (.csv/.tsv/.txt/.edges/.el, optionally .gz)"
)
ACCEPTED_FORMATS = (
    f"a dataset name ({', '.join(KNOWN_NAMES)}, synthetic-<N> such as synthetic-100k, "
    f"synthetic-hetero-<N>), {_PATH_FORMATS}, "
    "or a torch_geometric Data object"
)


def load_graph(
    name_or_path: Union[PathLike, "Data", Graph],
    *,
    features: Optional[Union[PathLike, np.ndarray, torch.Tensor]] = None,
    labels: Optional[Union[PathLike, np.ndarray, torch.Tensor]] = None,
    num_nodes: Optional[int] = None,
    split: Optional[str] = None,
    add_inverse_edge: Optional[bool] = None,
    download: bool = True,
) -> Graph:
    """Loads a graph from a dataset name, a file or directory, or a PyG ``Data`` object.

    Names take precedence over same-named paths in the working directory; write
    ``./cora`` to mean the path. Undirected datasets keep both directions as stored.

    Args:
        name_or_path: what to load (see the module docstring for the formats).
        features: edge lists only: a feature matrix, or its file (``.npy`` is memory-mapped;
            ``.npz`` with one array or key ``x``; text with one row per node).
        labels: edge lists only: labels, or their file (``.npy``, ``.npz`` or one per line).
        num_nodes: edge lists only: node count (default: from the features or labels,
            else the largest id + 1).
        split: OGB only: the ``split/<split>`` folder to use when there are several
            (default for the OGB names: OGB's own split; for a heterogeneous folder: ``time``).
        add_inverse_edge: OGB folders only: add the reverse of every edge. Default: ogb's own
            flag for the known datasets (products, proteins: True), else False; True for a
            heterogeneous folder (ogbn-mag: ``rev_<rel>`` relations). The OGB names are always
            undirected.
        download: for a named Planetoid or OGB dataset missing locally, try to download it
            into the cache (default True; ``GRAPHDIST_OFFLINE=1`` disables it).

    Returns:
        The validated ``Graph``.

    Raises:
        ValueError: an unknown name, an unrecognised file or directory, or malformed
            contents (the message names the file and the field).
        FileNotFoundError: a path or a named dataset that does not exist (the message
            says where it looked and how to point elsewhere).
        NotEnoughMemory: (a ``ValueError``) an OGB name whose estimated memory exceeds what is
            available, refused before reading.

    Example:
        >>> g = load_graph("synthetic-2k")
        >>> g.num_nodes
        2000
    """
    source = name_or_path
    edge_list_args = {"features": features, "labels": labels, "num_nodes": num_nodes}
    ogb_args = {"split": split, "add_inverse_edge": add_inverse_edge}
    if isinstance(source, Graph):
        _warn_ignored("a Graph", **edge_list_args, **ogb_args)
        return source
    if _is_from_pyg(source):
        if type(source).__name__ != "Data":
            raise ValueError(f"name_or_path: expected a homogeneous torch_geometric Data (got {type(source).__name__})")
        _warn_ignored("a PyG Data object", **edge_list_args, **ogb_args)
        return Graph.from_pyg(source, name=str(getattr(source, "name", None) or "pyg"))
    if not isinstance(source, (str, os.PathLike)):
        raise ValueError(f"name_or_path: expected a str, path, Graph or torch_geometric Data (got {type(source).__name__})")

    text = os.fspath(source)
    reader, target = claim(text, is_name=isinstance(source, str))
    if reader is not None:
        given = {**edge_list_args, **ogb_args}
        _warn_ignored(reader.what(target), **{k: v for k, v in given.items() if k not in reader.accepts})
        args = {k: v for k, v in given.items() if k in reader.accepts and v is not None}
        return reader.read(target, **args, **({"download": download} if reader.named else {}))
    path = Path(text).expanduser()
    if path.is_dir():
        raise ValueError(f"{path}: expected {ACCEPTED_FORMATS} (got a directory with none of raw/edge.csv.gz, "
                         f"raw/data.npz, raw/num-node-dict.csv.gz, processed/*.pt)")
    if path.is_file():
        raise ValueError(f"{path}: expected one of {ACCEPTED_FORMATS} (got an unrecognised file type {path.suffix!r})")
    if isinstance(source, str) and os.sep not in text and not Path(text).suffix:
        raise ValueError(
            f"Unknown dataset {text!r}: expected a known name ({', '.join(KNOWN_NAMES)}, or synthetic-<N> such "
            f"as synthetic-100k, synthetic-1m, synthetic-2500; synthetic-hetero-<N> for a typed graph) or an "
            f"existing path: {_PATH_FORMATS}"
        )
    raise FileNotFoundError(f"{path}: no such file or directory (expected {ACCEPTED_FORMATS})")


def source_key(name_or_path: str) -> str:
    """A short key of what ``load_graph(name_or_path)`` would read, for caches derived from it.

    The reader that claims the source keys it (``graphdist.data.readers.registry``): a generated
    graph by its name (``gen``); a file or directory by its resolved path and every file's size and
    modification time (cheap: nothing is read), so a different graph saved under the same name gets
    a different key. A named dataset not present yet, or nothing a reader claims: ``missing``.

    Example:
        >>> source_key("synthetic-2k")
        'gen'
    """
    reader, target = claim(name_or_path)
    if reader is None:
        return "missing"  # load_graph says what is wrong with the name
    return reader.key(target)


def _is_from_pyg(obj: Any) -> bool:
    # Checked by module name, so that no torch_geometric import happens for paths and names.
    return (type(obj).__module__ or "").startswith("torch_geometric")


def _warn_ignored(what: str, **given: Any) -> None:
    """A legal but pointless argument: say it is ignored, and why, rather than drop it silently."""
    ignored = sorted(k for k, v in given.items() if v is not None)
    if ignored:
        warnings.warn(f"{', '.join(ignored)} ignored: they apply to edge lists (features, labels, num_nodes) "
                      f"or OGB directories (split, add_inverse_edge), not to {what}", stacklevel=3)


__all__ = [
    "ACCEPTED_FORMATS",
    "KNOWN_NAMES",
    "cache_dir",
    "dataset_dirs",
    "find_dataset",
    "load_edge_list",
    "load_graph",
    "load_npz",
    "load_ogb",
    "load_pyg_dataset",
    "read_table",
    "source_key",
]
