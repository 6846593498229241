"""Which ranks are alive, asked of the job's store rather than of the peers themselves.

A peer that died closes its sockets, and gloo names its address. A peer that is stopped (SIGSTOP,
a debugger, a swapping host) or hung keeps its sockets open, so a collective only times out and
cannot say on whom it waited. Every rank therefore beats: a background thread increments
``graphdist-beat/<rank>`` in the process group's store (a file store locally, torchrun's agent
store, or rank 0's TCP store under ``tcp://``) every ``BEAT_S`` seconds. When a collective times
out, :func:`silent_ranks` reads every counter twice, ``LISTEN_S`` apart: a rank whose counter did
not move (or never appeared: stopped before it joined) is the one the job waits for. Counters,
not clocks, so hosts' clocks need not agree.

With a peer timeout the same thread also watches: a peer whose counter stood still for that long
(its host died without closing its sockets, or it is stopped) ends this rank at once, naming it,
instead of every rank waiting out the collective timeout; torchrun can then form the job again
(``--max-restarts``). A rank that left the job on purpose marks itself done first and is not watched.
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
DONE = "graphdist-beat-done/"
WATCH_EVERY_S = 1.0

_beat: Optional["_Beat"] = None


class _Beat:
    def __init__(self, store: Any, rank: int, period_s: float, watch: Optional["PeerWatch"] = None) -> None:
        self.store, self.rank, self.period_s, self.watch = store, rank, period_s, watch
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
                if self.watch is not None and not self.done.is_set():
                    self.watch.store_failed(time.monotonic())
                return
            if self.watch is not None and not self.done.is_set():
                self.watch.look(self.store, time.monotonic())
            self.done.wait(self.period_s)

    def stop(self) -> None:
        self.done.set()
        try:
            within(lambda: self.store.set(f"{DONE}{self.rank}", "1"), STORE_TIMEOUT_S)  # left on purpose: unwatched
        except Exception:  # noqa: BLE001 - the store is gone: nobody is left to watch
            pass
        self.thread.join(timeout=2 * self.period_s + 1)


class PeerWatch:
    """Ends this rank when a peer's heartbeat stood still for ``timeout_s`` (see the module doc).

    ``on_silent(ranks, seconds)`` is called once, from the heartbeat thread, with the silent ranks
    (``[]``: the store itself stopped answering); it should say so and end the process.

    Example (no store: a peer whose counter never moves is named after the timeout):
        >>> class Store(dict):
        ...     def check(self, keys): return all(k in self for k in keys)
        ...     def get(self, k): return self[k].encode()
        >>> told = []
        >>> watch = PeerWatch(rank=0, world_size=3, timeout_s=10.0, on_silent=lambda r, s: told.append(r))
        >>> store = Store({"graphdist-beat/1": "5", "graphdist-beat/2": "7"})
        >>> watch.look(store, now=100.0); store["graphdist-beat/2"] = "8"; watch.look(store, now=101.0); told
        []
        >>> watch.look(store, now=110.5); told  # rank 1 silent 10.5 s; rank 2, silent 9.5 s, stopped with it
        [[1, 2]]
    """

    def __init__(self, rank: int, world_size: int, timeout_s: float,
                 on_silent: Callable[[list[int], float], None]) -> None:
        self.rank, self.world_size, self.timeout_s, self.on_silent = rank, world_size, timeout_s, on_silent
        self._seen: dict[int, tuple[str, float]] = {}  # rank -> (last counter, when it last moved)
        self._last_look = -1e18
        self._store_failing_since: Optional[float] = None
        self._fired = False

    def look(self, store: Any, now: float) -> None:
        """Reads the peers' counters (at most every ``WATCH_EVERY_S``) and fires on the silent ones."""
        if self._fired or now - self._last_look < WATCH_EVERY_S:
            return
        self._last_look = now
        silent = []
        for r in range(self.world_size):
            key = f"{PREFIX}{r}"
            if r == self.rank or not store.check([key]) or store.check([f"{DONE}{r}"]):
                continue  # not beating yet (judged by the join), or left on purpose
            value = store.get(key).decode()
            last = self._seen.get(r)
            if last is None or last[0] != value:
                self._seen[r] = (value, now)
            elif now - last[1] >= self.timeout_s:
                silent.append(r)
        self._store_failing_since = None
        if silent:
            # Peers that fell silent with it (a dead host's other ranks stop within a beat or two of each
            # other) are named too, not left for a second message that never comes.
            slack = WATCH_EVERY_S + 2 * BEAT_S
            quiet = [r for r, (_, moved) in sorted(self._seen.items())
                     if now - moved >= self.timeout_s - slack and r != self.rank]
            self._fire(sorted(set(silent) | set(quiet)), max(now - self._seen[r][1] for r in silent))

    def store_failed(self, now: float) -> None:
        """The store did not take this rank's beat: after ``timeout_s`` of that, the store's host is gone."""
        if self._store_failing_since is None:
            self._store_failing_since = now
        if now - self._store_failing_since >= self.timeout_s:
            self._fire([], now - self._store_failing_since)

    def _fire(self, silent: list[int], seconds: float) -> None:
        if not self._fired:
            self._fired = True
            self.on_silent(silent, seconds)


def _store() -> Any:
    import torch.distributed as dist

    try:
        return dist.distributed_c10d._get_default_store()  # the group's own store: no second rendezvous
    except (AttributeError, RuntimeError, ValueError):
        return None


def start(rank: int, period_s: float = BEAT_S, watch: Optional[PeerWatch] = None) -> bool:
    """Starts this rank's heartbeat (once per process group), watching the peers' with ``watch``; False where
    the store is not reachable."""
    global _beat
    stop()
    store = _store()
    if store is None:
        return False
    _beat = _Beat(store, rank, period_s, watch)
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


__all__ = ["BEAT_S", "LISTEN_S", "PeerWatch", "describe_silent", "silent_ranks", "start", "stop", "within"]
