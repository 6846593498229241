"""Reads the named Planetoid datasets (cora, citeseer, pubmed): local ``.npz``, download, raw files.

A name is looked up as ``<name>.npz`` in the dataset directories and the cache; if absent
and online, torch_geometric's ``Planetoid`` fetches it into the cache, converted once. A
local Planetoid ``raw/ind.<name>.*`` folder is processed offline in the cache.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import numpy as np

from graphdist.data.graph import MASK_NAMES, Graph
from graphdist.data.paths import cache_dir, dataset_dirs, find_dataset
from graphdist.data.readers.common import _atomic_savez
from graphdist.data.readers.npz import load_npz

if TYPE_CHECKING:  # torch_geometric is imported lazily: spawned workers start fast.
    from torch_geometric.data import Data

logger = logging.getLogger(__name__)

#: Named real datasets and their torch_geometric ``Planetoid`` names.
PLANETOID_NAMES = {"cora": "Cora", "citeseer": "CiteSeer", "pubmed": "PubMed"}
# A download probe must answer within this many seconds; no network means a fast, clear error.
_PROBE_TIMEOUT_S = 3.0
_DOWNLOAD_TIMEOUT_S = 60.0
_DOWNLOAD_HOST = ("raw.githubusercontent.com", 443)  # where Planetoid's files live


def _load_named(name: str, download: bool) -> Graph:
    path = find_dataset(name)
    if path is None:
        path = _fetch_planetoid(name, allowed=download)
    graph = load_npz(path)
    graph.name = name
    return graph


def _not_found_message(name: str, reason: str) -> str:
    searched = [str(d) for d in dataset_dirs()]
    where = f"GRAPHDIST_DATA ({', '.join(searched)})" if searched else "GRAPHDIST_DATA (unset)"
    return (
        f"Dataset {name!r} not found: looked for {name}.npz in {where} and in the cache "
        f"GRAPHDIST_CACHE ({cache_dir()}), and {reason}. Set GRAPHDIST_DATA to a folder holding "
        f"{name}.npz (e.g. export GRAPHDIST_DATA=/path/to/shared/datasets), or run once with "
        f"network access to download it into the cache."
    )


def _fetch_planetoid(name: str, allowed: bool) -> Path:
    """Downloads ``name`` with PyG's Planetoid into the cache and converts it to ``<name>.npz``."""
    if not allowed or os.environ.get("GRAPHDIST_OFFLINE", "").lower() in ("1", "true", "yes"):
        raise FileNotFoundError(_not_found_message(name, "downloading is disabled (download=False or GRAPHDIST_OFFLINE)"))
    if not _network_reachable(*_DOWNLOAD_HOST, timeout=_PROBE_TIMEOUT_S):
        raise FileNotFoundError(
            _not_found_message(name, f"the network is unreachable ({_DOWNLOAD_HOST[0]} did not answer in "
                                     f"{_PROBE_TIMEOUT_S:.0f} s), so it could not be downloaded")
        )
    cache = cache_dir(create=True)
    try:
        data = _download_planetoid(name, cache / "pyg")
    except Exception as exc:  # noqa: BLE001 - any failure here means "not available"; say why
        raise FileNotFoundError(_not_found_message(name, f"downloading it failed ({type(exc).__name__}: {exc})")) from exc
    out = cache / f"{name}.npz"
    arrays: dict[str, np.ndarray] = {"edge_index": data.edge_index.numpy(), "x": data.x.float().numpy(),
                                     "y": data.y.numpy()}
    for mask in MASK_NAMES:
        arrays[mask] = getattr(data, mask).numpy()
    _atomic_savez(out, arrays)
    logger.info("downloaded %s into %s", name, out)
    return out


def _download_planetoid(name: str, root: Path) -> "Data":
    # Sockets without a timeout could hang a half-open connection forever; bound every read.
    from torch_geometric.datasets import Planetoid

    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(_DOWNLOAD_TIMEOUT_S)
    try:
        return Planetoid(str(root), PLANETOID_NAMES[name])[0]
    finally:
        socket.setdefaulttimeout(previous)


def _network_reachable(host: str, port: int, timeout: float) -> bool:
    """True if a TCP connection to ``host:port`` opens within ``timeout`` seconds.

    Runs in a daemon thread because name resolution (getaddrinfo) ignores socket
    timeouts and can block for much longer on a machine without DNS.
    """
    result: list[bool] = []

    def probe() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                result.append(True)
        except OSError:
            result.append(False)

    thread = threading.Thread(target=probe, name="graphdist-net-probe", daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(result and result[0])


# ------------------------------------------------------------------ local raw folders
def _planetoid_raw_name(path: Path) -> Optional[str]:
    for graph_file in sorted((path / "raw").glob("ind.*.graph")):
        name = graph_file.name.split(".")[1].lower()
        if name in PLANETOID_NAMES:
            return name
    return None


def _process_planetoid_raw(root: Path, name: str) -> "Data":
    # Planetoid writes processed/ next to raw/; the user's folder may be read-only and
    # graphdist writes only into its cache, so the raw files are processed in a copy there,
    # keyed by the source path so two different folders never share a result.
    import hashlib
    import shutil

    from torch_geometric.datasets import Planetoid

    key = hashlib.sha1(str(root.resolve()).encode()).hexdigest()[:12]
    work = cache_dir(create=True) / "pyg-local" / key
    raw = work / PLANETOID_NAMES[name] / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for file in (root / "raw").glob("ind.*"):
        target = raw / file.name
        if not target.exists():
            shutil.copyfile(file, target)
    return Planetoid(str(work), PLANETOID_NAMES[name])[0]
