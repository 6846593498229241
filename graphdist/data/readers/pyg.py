"""Reads saved torch_geometric dataset directories offline (best effort).

An ``InMemoryDataset``'s ``processed/*.pt`` holding one graph, or a Planetoid folder with
only ``raw/ind.<name>.*``. torch_geometric is imported only when such a directory is read.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from graphdist.data.graph import Graph
from graphdist.data.readers.common import PathLike
from graphdist.data.readers.planetoid import _planetoid_raw_name, _process_planetoid_raw

if TYPE_CHECKING:  # torch_geometric is imported lazily: spawned workers start fast.
    from torch_geometric.data import Data


def _pyg_processed_files(path: Path) -> list[Path]:
    # PyG writes pre_transform.pt / pre_filter.pt next to the data; they hold no graph.
    found: list[Path] = []
    for folder in (path / "processed", *(p / "processed" for p in sorted(path.glob("*")) if p.is_dir())):
        if folder.is_dir():
            found += [p for p in sorted(folder.glob("*.pt")) if p.name not in ("pre_transform.pt", "pre_filter.pt")]
        if found:
            break
    return found


def load_pyg_dataset(path: PathLike) -> Graph:
    """Best effort: opens a saved torch_geometric dataset directory offline.

    Handles an ``InMemoryDataset``'s ``processed/*.pt`` (one graph) and a Planetoid
    folder holding only ``raw/ind.<name>.*`` (processed in the cache, since graphdist
    writes nowhere else).

    Raises:
        ValueError: when torch_geometric cannot open it (the cause is in the message).

    Example:
        >>> import pathlib, tempfile, torch
        >>> from torch_geometric.data import Data, InMemoryDataset
        >>> processed = pathlib.Path(tempfile.mkdtemp()) / "Tiny" / "processed"
        >>> processed.mkdir(parents=True)
        >>> InMemoryDataset.save([Data(edge_index=torch.tensor([[0, 1], [1, 0]]), num_nodes=2)], str(processed / "data.pt"))
        >>> load_pyg_dataset(processed.parent).num_edges
        2
    """
    root = Path(path)
    processed = _pyg_processed_files(root)
    try:
        if processed:
            data = _read_pyg_processed(processed[0])
        else:
            name = _planetoid_raw_name(root)
            if name is None:
                raise ValueError("no processed/*.pt and no raw/ind.<name>.graph")
            data = _process_planetoid_raw(root, name)
    except ValueError as exc:
        raise ValueError(f"{root}: expected a saved PyG dataset that torch_geometric can open offline ({exc})") from exc
    except Exception as exc:  # noqa: BLE001 - PyG raises many kinds; report the cause
        raise ValueError(f"{root}: torch_geometric could not open this directory offline "
                         f"({type(exc).__name__}: {exc})") from exc
    try:
        return Graph.from_pyg(data, name=root.name.lower())
    except ValueError as exc:
        raise ValueError(f"{root}: {exc}") from exc


def _read_pyg_processed(file: Path) -> "Data":
    # Mirrors InMemoryDataset.load: (data or its dict, slices[, sizes][, data_cls]).
    from torch_geometric.data import Data
    from torch_geometric.io import fs

    out = fs.torch_load(str(file))
    if not isinstance(out, tuple) or len(out) not in (2, 3, 4):
        raise ValueError(f"{file.name} is not an InMemoryDataset file (got {type(out).__name__})")
    data, slices = out[0], out[1]
    data_cls = out[-1] if len(out) >= 3 and isinstance(out[-1], type) else Data
    if isinstance(data, dict):
        data = data_cls.from_dict(data)
    if not hasattr(data, "edge_index") or getattr(data, "edge_index", None) is None:
        raise ValueError(f"{file.name} holds a {type(data).__name__} without edge_index (heterogeneous?)")
    if isinstance(slices, dict) and "edge_index" in slices and len(slices["edge_index"]) > 2:
        raise ValueError(f"{file.name} holds {len(slices['edge_index']) - 1} graphs; expected one node-property graph")
    return data
