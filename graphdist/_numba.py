"""numba for the compiled loops of sampling (``sampling.compiled``) and the models (GCN's block normalisation).

numba is imported on first use only, with its cache under ``GRAPHDIST_CACHE/numba`` (the one
directory graphdist writes to; an explicit ``NUMBA_CACHE_DIR`` wins). ``GRAPHDIST_NUMBA=0``
turns every compiled loop off, and without numba installed the torch code they replace runs:
each loop gives the same results as that torch code, bit for bit. A process runs its first
:data:`WARMUP_CALLS` eligible calls on torch, so jobs too short to repay numba's load never pay it;
a training job that knows it will make more says so (:func:`expect_calls`) and runs compiled at once.

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
    # numba reads NUMBA_CACHE_DIR when it is first imported, and torch_geometric imports it: set
    # after that, the variable alone is ignored and numba writes its cache beside the sources.
    numba.config.CACHE_DIR = os.environ["NUMBA_CACHE_DIR"]
    return numba


# Calls large enough for a compiled loop that a process makes on torch first. Loading numba and
# the cached loops costs a process ~0.5 s (import 0.2 s, then LLVM and the cached code), which a
# few hundred batches of savings (~1 ms each) repay: shorter jobs (and most tests) never load it.
# The loops give the torch code's results bit for bit, so when the switch comes changes nothing.
WARMUP_CALLS = 256
_calls = 0


def compiled_enabled(work: int, minimum: int) -> bool:
    """Whether a call of ``work`` elements runs a compiled loop: at least ``minimum`` of them, past the
    process's first :data:`WARMUP_CALLS` such calls (``GRAPHDIST_NUMBA=eager``: from the first, as the
    throughput benches measure), numba installed and ``GRAPHDIST_NUMBA`` not ``0``."""
    global _calls
    mode = os.environ.get("GRAPHDIST_NUMBA", "1")
    if work < minimum or mode == "0":
        return False
    if _calls < WARMUP_CALLS and mode != "eager":
        _calls += 1  # threads may race here: the count only needs to be about right
        return False
    return numba_module() is not None


def expect_calls(calls: int) -> bool:
    """A job about to make ``calls`` eligible calls (training: steps x hops) that repay numba's load
    runs the compiled loops from its next call, as ``GRAPHDIST_NUMBA=eager`` does: the ~0.35 s load
    then lands in the first epoch, not in the middle of a later one (a GraphSAGE minibatch step of
    epoch 2 took 350 ms where the switch came), and the first epoch's batches run compiled too.
    Returns whether it switched.

    Example:
        >>> expect_calls(0)
        False
    """
    global _calls
    if calls < WARMUP_CALLS or os.environ.get("GRAPHDIST_NUMBA", "1") == "0":
        return False
    _calls = max(_calls, WARMUP_CALLS)
    return True


def jit() -> Callable[[Callable], Callable]:
    """numba's ``njit`` as these loops use it: cached on disk, without the GIL (the loader's prefetch
    thread runs them beside training)."""
    return numba_module().njit(cache=True, nogil=True)


__all__ = ["WARMUP_CALLS", "compiled_enabled", "expect_calls", "jit", "numba_module"]
