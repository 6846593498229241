"""The readers ``load_graph`` chooses among, each claiming what it can read by name or by content.

A reader says what it claims (a dataset name, or a file or directory by its suffix and contents),
how it reads it, which of ``load_graph``'s format arguments it reads (the others are warned about,
not dropped in silence), and how its source is keyed for caches (``source_key``): a generated
graph by its name, anything on disk by its path and files. The first reader, in ``READERS`` order,
that claims a source reads it; ``register_reader`` puts a user's first.

Example:
    >>> reader, target = claim("synthetic-2k")
    >>> reader.name, reader.key(target)
    ('synthetic', 'gen')
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

# load_graph's arguments that only some readers read
FORMAT_ARGS = ("features", "labels", "num_nodes", "split", "add_inverse_edge")


@dataclass(frozen=True)
class Reader:
    """One input format.

    Attributes:
        name: what the format is called in messages and tests.
        claims: ``claims(text, is_name)`` -> the target it reads (a name or a ``Path``), or None.
            ``is_name``: the source was a ``str`` (dataset names are looked up only for those).
        read: ``read(target, **args)`` -> ``Graph``; ``args`` are the ``accepts`` that were given.
        accepts: which of :data:`FORMAT_ARGS` it reads.
        key: ``key(target)`` -> the source's cache key (:func:`path_key` for what is on disk).
        what: ``what(target)`` -> the words a warning about an ignored argument ends with.
        named: it reads dataset names (``download=`` goes to it: a missing one may be fetched).
    """

    name: str
    claims: Callable[[str, bool], Any]
    read: Callable[..., Any]
    accepts: frozenset[str] = field(default_factory=frozenset)
    key: Callable[[Any], str] = lambda target: path_key(target)
    what: Callable[[Any], str] = str
    named: bool = False


def path_key(path: Path) -> str:
    """A short key of what is at ``path``: its resolved path and each file's size and modification time
    (cheap: nothing is read), so another graph saved under the same name gets another key."""
    path = Path(path).resolve()
    if not path.exists():
        return "missing"
    files = sorted(f for f in path.rglob("*") if f.is_file()) if path.is_dir() else [path]
    digest = hashlib.sha256(str(path).encode())
    for f in files:
        st = f.stat()
        digest.update(f"{f.relative_to(path) if path.is_dir() else f.name}:{st.st_size}:{st.st_mtime_ns};".encode())
    return digest.hexdigest()[:12]


# ---------------------------------------------------------------- the readers


def _planetoid(text: str, is_name: bool) -> Optional[str]:
    from graphdist.data.readers.planetoid import PLANETOID_NAMES

    key = text.strip().lower()
    return key if is_name and key in PLANETOID_NAMES else None


def _read_planetoid(name: str, download: bool = True) -> Any:
    from graphdist.data.readers.planetoid import _load_named

    return _load_named(name, download=download)


def _planetoid_key(name: str) -> str:
    from graphdist.data.paths import find_dataset

    found = find_dataset(name)
    return "missing" if found is None else path_key(found)


def _typed_cora(text: str, is_name: bool) -> Optional[str]:
    from graphdist.data.readers.typed_cora import TYPED_CORA

    return TYPED_CORA if is_name and text.strip().lower() == TYPED_CORA else None


def _read_typed_cora(name: str, download: bool = True) -> Any:
    from graphdist.data.readers.typed_cora import load_typed_cora

    return load_typed_cora(name, download=download)


def _typed_cora_key(name: str) -> str:
    from graphdist.data.readers.typed_cora import typed_cora_key

    return typed_cora_key(_planetoid_key("cora"))  # built from cora: changes when cora.npz does


def _ogb_name(text: str, is_name: bool) -> Optional[str]:
    from graphdist.data.readers.ogb_names import ogb_dataset

    spec = ogb_dataset(text) if is_name else None
    return spec.name if spec is not None else None


def _read_ogb_name(name: str, download: bool = True, split: Optional[str] = None) -> Any:
    from graphdist.data.readers.ogb_names import load_ogb_named

    return load_ogb_named(name, download=download, split=split)


def _ogb_name_key(name: str) -> str:
    from graphdist.data.readers.ogb_names import find_ogb

    found = find_ogb(name)
    return "missing" if found is None else path_key(found)


def _synthetic(text: str, is_name: bool) -> Optional[str]:
    from graphdist.data.synthetic import parse_synthetic_name

    key = text.strip().lower()
    return key if is_name and parse_synthetic_name(key) is not None else None


def _read_synthetic(name: str, download: bool = True) -> Any:
    from graphdist.data.paths import cache_dir
    from graphdist.data.synthetic import MULTILABEL_SUFFIX, parse_synthetic_name, synthetic
    from graphdist.data.synthetic_disk import OUT_OF_CORE_NODES

    size = parse_synthetic_name(name)
    if size >= OUT_OF_CORE_NODES and not name.endswith(MULTILABEL_SUFFIX):
        # Too large for memory on a small machine: generated once into the cache, memory-mapped.
        return synthetic(size, name=name, out=cache_dir() / "graphs" / name)
    return synthetic(size, name=name, multilabel=name.endswith(MULTILABEL_SUFFIX))


def _synthetic_hetero(text: str, is_name: bool) -> Optional[str]:
    from graphdist.data.synthetic_hetero import parse_hetero_name

    key = text.strip().lower()
    return key if is_name and parse_hetero_name(key) is not None else None


def _hetero_version_key() -> str:
    from graphdist.data.synthetic_hetero import GENERATOR_VERSION

    return f"gen-v{GENERATOR_VERSION}"


def _read_synthetic_hetero(name: str, download: bool = True) -> Any:
    from graphdist.data.paths import cache_dir
    from graphdist.data.synthetic_disk import OUT_OF_CORE_NODES
    from graphdist.data.synthetic_hetero import parse_hetero_name, synthetic_hetero, synthetic_hetero_to_disk

    size = parse_hetero_name(name)
    if size >= OUT_OF_CORE_NODES:
        # Generated once (in memory, a few GiB at 3M) into the cache, then memory-mapped on every load.
        return synthetic_hetero_to_disk(size, cache_dir() / "graphs" / name, name=name)
    return synthetic_hetero(size, name=name)


def _directory(test: Callable[[Path], bool]) -> Callable[[str, bool], Optional[Path]]:
    def claims(text: str, is_name: bool) -> Optional[Path]:
        path = Path(text).expanduser()
        return path if path.is_dir() and test(path) else None

    return claims


def _generated(path: Path) -> bool:
    return (path / "meta.json").is_file() and (path / "indices.npy").is_file()  # synthetic(N, out=path)


def _ogb(path: Path) -> bool:
    from graphdist.data.readers.ogb import is_ogb_directory

    return is_ogb_directory(path)


def _ogb_heterogeneous(path: Path) -> bool:
    from graphdist.data.readers.ogb_hetero import is_ogb_hetero_directory

    return is_ogb_hetero_directory(path)


def _pyg(path: Path) -> bool:
    from graphdist.data.readers.planetoid import _planetoid_raw_name
    from graphdist.data.readers.pyg import _pyg_processed_files

    return bool(_pyg_processed_files(path) or _planetoid_raw_name(path))


def _file(test: Callable[[list[str]], bool]) -> Callable[[str, bool], Optional[Path]]:
    def claims(text: str, is_name: bool) -> Optional[Path]:
        path = Path(text).expanduser()
        return path if path.is_file() and test([s.lower() for s in path.suffixes]) else None

    return claims


def _npz(suffixes: list[str]) -> bool:
    return bool(suffixes) and suffixes[-1] == ".npz"


def _edge_list(suffixes: list[str]) -> bool:
    from graphdist.data.readers.edgelist import EDGE_LIST_SUFFIXES

    base = suffixes[-2] if len(suffixes) >= 2 and suffixes[-1] == ".gz" else (suffixes[-1] if suffixes else "")
    return base in EDGE_LIST_SUFFIXES


def _lazy(module: str, function: str) -> Callable[..., Any]:
    def read(target: Any, **args: Any) -> Any:
        import importlib

        return getattr(importlib.import_module(module), function)(target, **args)

    return read


# In claiming order: names first (a name beats a same-named path in the working directory), then
# directories by their contents, then files by their suffixes.
READERS: list[Reader] = [
    Reader("planetoid", _planetoid, _read_planetoid, key=_planetoid_key, what=lambda name: f"dataset {name!r}",
           named=True),
    Reader("typed cora", _typed_cora, _read_typed_cora, key=_typed_cora_key, what=lambda name: f"dataset {name!r}",
           named=True),
    # ogbn-arxiv & co.: always undirected, so add_inverse_edge is not theirs (a folder path takes it)
    Reader("OGB name", _ogb_name, _read_ogb_name, accepts=frozenset({"split"}), key=_ogb_name_key,
           what=lambda name: f"dataset {name!r}", named=True),
    # before "synthetic": its names start the same way (synthetic-hetero-100k)
    # keyed by the generator's version: partitions cached from an older generator's draws are not reused
    Reader("synthetic hetero", _synthetic_hetero, _read_synthetic_hetero, key=lambda name: _hetero_version_key(),
           what=lambda name: f"dataset {name!r}", named=True),
    Reader("synthetic", _synthetic, _read_synthetic, key=lambda name: "gen", what=lambda name: f"dataset {name!r}",
           named=True),
    Reader("generated directory", _directory(_generated),
           _lazy("graphdist.data.synthetic_disk", "load_generated"), what=lambda p: f"directory {p}"),
    Reader("OGB directory", _directory(_ogb), _lazy("graphdist.data.readers.ogb", "load_ogb"),
           accepts=frozenset({"split", "add_inverse_edge"}), what=lambda p: f"directory {p}"),
    Reader("heterogeneous OGB directory", _directory(_ogb_heterogeneous),
           _lazy("graphdist.data.readers.ogb_hetero", "load_ogb_hetero"),
           accepts=frozenset({"split", "add_inverse_edge"}), what=lambda p: f"directory {p}"),
    Reader("PyG dataset directory", _directory(_pyg), _lazy("graphdist.data.readers.pyg", "load_pyg_dataset"),
           what=lambda p: f"directory {p}"),
    Reader("npz", _file(_npz), _lazy("graphdist.data.readers.npz", "load_npz")),
    Reader("edge list", _file(_edge_list), _lazy("graphdist.data.readers.edgelist", "load_edge_list"),
           accepts=frozenset({"features", "labels", "num_nodes"}), what=lambda p: f"edge list {p}"),
]


def register_reader(reader: Reader) -> None:
    """Adds a reader, claiming before the built-in ones (a user's format, or one that overrides a suffix)."""
    READERS.insert(0, reader)


def claim(text: str, is_name: bool = True) -> tuple[Optional[Reader], Any]:
    """The first reader that claims ``text`` and the target it reads; ``(None, None)`` when none does."""
    for reader in READERS:
        target = reader.claims(os.fspath(text), is_name)
        if target is not None:
            return reader, target
    return None, None


__all__ = ["FORMAT_ARGS", "READERS", "Reader", "claim", "path_key", "register_reader"]
