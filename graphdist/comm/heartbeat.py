"""Which ranks are alive, asked of the job's store rather than of the peers themselves.

A peer that died closes its sockets, and gloo names its address. A peer that is stopped (SIGSTOP,
a debugger, a swapping host) or hung keeps its sockets open, so a collective only times out and
cannot say on whom it waited. Every rank therefore beats: a background thread increments
``graphdist-beat/<rank>`` in the process group's store (a file store locally, torchrun's agent
store, or rank 0's TCP store under ``tcp://``) every ``BEAT_S`` seconds. When a collective times
out, :func:`silent_ranks` reads every counter twice, ``LISTEN_S`` apart: a rank whose counter did
not move (or never appeared: stopped before it joined) is the one the job waits for. Counters,
not clocks, so hosts' clocks need not agree.
"""

from __future__ import annotations

import datetime
import threading
import time
from typing import Any, Callable, Optional

BEAT_S = 0.5
LISTEN_S = 1.5  # three beats: a live rank's counter moves, even on a loaded machine
STORE_TIMEOUT_S = 5.0
PREFIX = "graphdist-beat/"

_beat: Optional["_Beat"] = None


class _Beat:
    def __init__(self, store: Any, rank: int, period_s: float) -> None:
        self.store, self.rank, self.period_s = store, rank, period_s
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="graphdist-heartbeat", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        count = 0
        while not self.done.is_set():
            count += 1
            try:
                self.store.set(f"{PREFIX}{self.rank}", str(count))
            except Exception:  # noqa: BLE001 - the store went away (shutdown, its host died): stop beating
                return
            self.done.wait(self.period_s)

    def stop(self) -> None:
        self.done.set()
        self.thread.join(timeout=2 * self.period_s + 1)


def _store() -> Any:
    import torch.distributed as dist

    try:
        return dist.distributed_c10d._get_default_store()  # the group's own store: no second rendezvous
    except (AttributeError, RuntimeError, ValueError):
        return None


def start(rank: int, period_s: float = BEAT_S) -> bool:
    """Starts this rank's heartbeat (once per process group); False where the store is not reachable."""
    global _beat
    stop()
    store = _store()
    if store is None:
        return False
    _beat = _Beat(store, rank, period_s)
    return True


def stop() -> None:
    """Stops this rank's heartbeat (before the process group is destroyed)."""
    global _beat
    if _beat is not None:
        _beat.stop()
        _beat = None


def silent_ranks(world_size: int, listen_s: float = LISTEN_S) -> Optional[list[int]]:
    """The ranks whose heartbeat did not advance in ``listen_s`` seconds (this rank excluded).

    Returns None when the store itself does not answer within ``STORE_TIMEOUT_S`` (under
    ``tcp://`` it lives in rank 0, so rank 0 is then the silent one).
    """
    store = _store()
    if store is None:
        return None
    me = _beat.rank if _beat is not None else -1
    keys = [f"{PREFIX}{r}" for r in range(world_size)]

    def read() -> dict[int, str]:
        return {r: store.get(k).decode() for r, k in enumerate(keys) if store.check([k])}

    try:
        store.set_timeout(datetime.timedelta(seconds=STORE_TIMEOUT_S))  # failing already: never block long
        before = within(read, STORE_TIMEOUT_S)
        time.sleep(listen_s)
        after = within(read, STORE_TIMEOUT_S)
    except Exception:  # noqa: BLE001 - a store that times out or is gone
        return None
    return [r for r in range(world_size) if r != me and (r not in after or after[r] == before.get(r))]


def within(fn: Callable[[], Any], timeout_s: float) -> Any:
    """``fn()``, or ``TimeoutError`` after ``timeout_s``: a TCP store whose server process is stopped
    accepts the connection and never answers, and ``check``/``set`` ignore the store's timeout.

    Example:
        >>> within(lambda: 42, 1.0)
        42
    """
    result: dict[str, Any] = {}

    def call() -> None:
        try:
            result["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            result["error"] = exc

    thread = threading.Thread(target=call, name="graphdist-store-read", daemon=True)  # left blocked if it hangs
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise TimeoutError(f"the store did not answer within {timeout_s:.0f} s")
    if "error" in result:
        raise result["error"]
    return result["value"]


def describe_silent(world_size: int, describe_addresses: Callable[[list[int]], str] = lambda ranks: "") -> str:
    """A sentence naming the ranks a timed-out collective waited for ('' when every rank still beats).

    ``describe_addresses(ranks)`` says where they run (``comm.group.describe_addresses``: ``"10.0.0.2 =
    rank 2"``); handed in, so that this module stays below ``group``, which starts and stops the beat.

    Example:
        >>> describe_silent(1)  # no process group: nothing to ask
        ''
    """
    if world_size < 2:
        return ""
    silent = silent_ranks(world_size)
    if silent is None:
        return ("The job's store does not answer either: the process serving it (rank 0's under tcp:// "
                "init) is stopped or hung.")
    if not silent:
        return ""
    who = ", ".join(map(str, silent))
    where = describe_addresses(silent)
    return (f"Rank{'s' if len(silent) > 1 else ''} {who} stopped beating{f' ({where})' if where else ''}: stopped "
            f"(SIGSTOP, a debugger) or hung (not dead: its sockets are open), or cut off from the job's store; "
            f"see its log and process state.")


__all__ = ["BEAT_S", "LISTEN_S", "describe_silent", "silent_ranks", "start", "stop", "within"]
