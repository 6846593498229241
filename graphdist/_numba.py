"""numba for the compiled loops of sampling (``sampling.compiled``) and the models (GCN's block normalisation).

numba is imported on first use only, with its cache under ``GRAPHDIST_CACHE/numba`` (the one
directory graphdist writes to; an explicit ``NUMBA_CACHE_DIR`` wins). ``GRAPHDIST_NUMBA=0``
turns every compiled loop off, and without numba installed the torch code they replace runs:
each loop gives the same results as that torch code, bit for bit.

Example:
    >>> compiled_enabled(10, minimum=4096)  # too small to pay for numba's import
    False
"""

from __future__ import annotations

import functools
import os
from typing import Any, Callable, Optional


@functools.lru_cache(maxsize=1)
def numba_module() -> Optional[Any]:
    """The ``numba`` module, or None when it is not installed."""
    if "NUMBA_CACHE_DIR" not in os.environ:
        from graphdist.data.paths import cache_dir

        os.environ["NUMBA_CACHE_DIR"] = str(cache_dir() / "numba")
    try:
        import numba
    except ImportError:
        return None
    return numba


def compiled_enabled(work: int, minimum: int) -> bool:
    """Whether a call of ``work`` elements runs a compiled loop: at least ``minimum`` of them, numba
    installed and ``GRAPHDIST_NUMBA`` not ``0``."""
    return work >= minimum and os.environ.get("GRAPHDIST_NUMBA", "1") != "0" and numba_module() is not None


def jit() -> Callable[[Callable], Callable]:
    """numba's ``njit`` as these loops use it: cached on disk, without the GIL (the loader's prefetch
    thread runs them beside training)."""
    return numba_module().njit(cache=True, nogil=True)


__all__ = ["compiled_enabled", "jit", "numba_module"]
