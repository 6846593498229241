"""Starting workers: the local spawn launcher, and joining under torchrun or SLURM.

On one machine ``graphdist-train --num-workers N`` spawns N processes itself
(no cluster, no SSH). Under ``torchrun`` (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT`` set) or ``srun`` (``SLURM_PROCID``,
``SLURM_NTASKS``, ``SLURM_LOCALID``, first host of ``SLURM_JOB_NODELIST``) the
process joins the job it was started in instead.

A worker that raises or dies ends the whole local job: the survivors are
terminated, and the error names the rank. Ctrl-C terminates every worker; no
orphan is left behind (checkpoints are written atomically, so the last good one
stays intact).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing.connection
import os
import pickle
import re
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, NoReturn, Optional, Sequence

from graphdist.section import ConfigError

logger = logging.getLogger(__name__)


class WorkerFailed(RuntimeError):
    """A worker raised or died; the message names its rank."""


class WorkerTimeout(TimeoutError):
    """Workers were still running at the deadline; the message names them."""


@dataclass(frozen=True)
class LaunchEnv:
    """Where this process runs and how it joins the job.

    Attributes:
        kind: ``local`` (graphdist spawns the workers), ``torchrun`` or ``slurm``.
        rank, world_size, local_rank: as the launcher set them (0, 1, 0 for local).
        local_world_size: workers on this machine (``LOCAL_WORLD_SIZE``; SLURM's tasks on this node
            when it states them as one number; 1 for local, where the spawner knows its workers).
        master_addr, master_port: rendezvous address for ``env://`` init.
        run_id: the job's id (``TORCHELASTIC_RUN_ID``, ``SLURM_JOB_ID``): the default run directory's name,
            the same for every process and every restart of the job.
        restart_count: ``TORCHELASTIC_RESTART_COUNT``: > 0 when torchrun ``--max-restarts`` restarted the job.
    """

    kind: str
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    master_addr: Optional[str] = None
    master_port: Optional[int] = None
    run_id: Optional[str] = None
    restart_count: int = 0

    @property
    def init_method(self) -> str:
        return f"tcp://{self.master_addr}:{self.master_port}" if self.kind == "slurm" else "env://"


def first_slurm_host(nodelist: str) -> str:
    """The first host of a SLURM node list: ``gpu[03-05,07],cpu1`` -> ``gpu03``.

    Example:
        >>> first_slurm_host("node[12-14],big")
        'node12'
    """
    first = re.match(r"([^,\[]+)(\[([^\]]+)\])?", nodelist.strip())
    if not first:
        raise ValueError(f"SLURM_JOB_NODELIST: cannot parse {nodelist!r}")
    prefix, ranges = first.group(1), first.group(3)
    if not ranges:
        return prefix
    return prefix + ranges.split(",")[0].split("-")[0]


def detect_environment(environ: Optional[dict[str, str]] = None) -> LaunchEnv:
    """Reads the launcher's variables: torchrun first, then SLURM, else local.

    Example:
        >>> detect_environment({"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1",
        ...                     "MASTER_ADDR": "h0", "MASTER_PORT": "29500"}).kind
        'torchrun'
    """
    env = os.environ if environ is None else environ
    if "RANK" in env and "WORLD_SIZE" in env:
        return LaunchEnv(
            kind="torchrun",
            rank=int(env["RANK"]),
            world_size=int(env["WORLD_SIZE"]),
            local_rank=int(env.get("LOCAL_RANK", 0)),
            local_world_size=int(env.get("LOCAL_WORLD_SIZE", 1) or 1),
            master_addr=env.get("MASTER_ADDR"),
            master_port=int(env["MASTER_PORT"]) if env.get("MASTER_PORT") else None,
            # torchrun's default --rdzv-id is the literal "none": not an id two jobs could not share
            run_id=env.get("TORCHELASTIC_RUN_ID") if env.get("TORCHELASTIC_RUN_ID") not in (None, "", "none") else None,
            restart_count=int(env.get("TORCHELASTIC_RESTART_COUNT", 0) or 0),
        )
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env and int(env["SLURM_NTASKS"]) > 1:
        return LaunchEnv(
            kind="slurm",
            rank=int(env["SLURM_PROCID"]),
            world_size=int(env["SLURM_NTASKS"]),
            local_rank=int(env.get("SLURM_LOCALID", 0)),
            # "2(x3)" and "3,2" forms (uneven nodes) leave it at 1: no automatic core binding there.
            local_world_size=int(env["SLURM_NTASKS_PER_NODE"]) if env.get("SLURM_NTASKS_PER_NODE", "").isdigit() else 1,
            master_addr=env.get("MASTER_ADDR") or first_slurm_host(env.get("SLURM_JOB_NODELIST", "localhost")),
            master_port=int(env.get("MASTER_PORT", 29500)),
            run_id=env.get("SLURM_JOB_ID") or None,
        )
    return LaunchEnv(kind="local")


def usable_cores() -> list[int]:
    """The cores this process may run on (its affinity; every core where the platform has no affinity).

    Example:
        >>> len(usable_cores()) >= 1
        True
    """
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def worker_cores(usable: Sequence[int], threads: Sequence[int], local_rank: int,
                 setting: Optional[bool] = None) -> Optional[list[int]]:
    """The cores local worker ``local_rank`` binds to (``--bind-cores``), or None to leave it unbound.

    Worker ``i`` of this machine gets its own ``threads[i]`` consecutive cores of ``usable``, in
    local-rank order. Two workers on one machine, each free to run on every core, trade places on
    the cores and lose their caches at every switch: bound, each keeps its own (on 2 cores a
    2-worker GCN job ran 1.11x faster, a GEMM-bound GraphSAGE one 1.00x: ``bench/bench_binding.py``).
    Consecutive cores keep a worker's threads on one socket on the usual numbering.

    Args:
        usable: the cores this machine lets the job use (:func:`usable_cores`).
        threads: each local worker's torch threads, by local rank.
        local_rank: this worker's.
        setting: None (auto) binds when two or more workers fill the usable cores exactly (the job
            owns the machine; with cores to spare the scheduler has room to keep workers apart, and
            another job on the same machine would bind to the same first cores); True binds
            whenever they fit (one worker alone is never bound: there is nothing to keep apart);
            False never binds.

    Raises:
        ValueError: ``setting`` is True and the workers' threads need more cores than ``usable`` has.

    Example:
        >>> worker_cores([0, 1, 2, 3], [2, 2], 1)
        [2, 3]
        >>> worker_cores([0, 1], [1, 1, 1], 0) is None  # more threads than cores: the scheduler shares them
        True
        >>> worker_cores(list(range(16)), [1, 1], 0) is None, worker_cores(list(range(16)), [1, 1], 0, setting=True)
        (True, [0])
    """
    wanted = sum(threads)
    if setting is False or len(threads) < 2:
        return None
    if wanted > len(usable):
        if setting:
            raise ConfigError("bind_cores", f": {len(threads)} workers with {wanted} threads in all need {wanted} "
                              f"cores; this machine lets the job use {len(usable)} (fewer {{0}} or {{1}}, or {{2}})",
                              mentions=(("num_workers", None), ("threads", None), ("bind_cores", False)))
        return None
    if setting is None and wanted < len(usable):
        return None
    first = sum(threads[:local_rank])
    return list(usable[first : first + threads[local_rank]])


def bind_to_cores(cores: Sequence[int]) -> None:
    """Restricts every thread of this process to ``cores``; threads it starts later inherit them.

    Example:
        >>> bind_to_cores(usable_cores())  # every usable core: changes nothing
    """
    try:
        tasks = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:  # no procfs: the calling thread, whose later threads inherit it
        tasks = [0]
    for tid in tasks:
        try:
            os.sched_setaffinity(tid, cores)
        except ProcessLookupError:  # a thread that ended meanwhile
            pass


# The most glibc keeps at the heap's top before giving memory back: the largest C int (2 GiB).
TRIM_THRESHOLD = (1 << 31) - 1


def tune_allocator() -> bool:
    """Keeps freed memory in the process instead of returning it to the OS (glibc only).

    Each training step allocates and frees ~100+ MB tensors (gathered features,
    activations). glibc serves those with fresh ``mmap``s and unmaps them on
    free, so every step pays the page faults again: measured here, 40 x 160 MB
    alloc/fill/free took 6.5 s by default and 1.5 s with mmap disabled and a
    high trim threshold. Same effect as ``MALLOC_MMAP_THRESHOLD_`` and
    ``MALLOC_TRIM_THRESHOLD_``, but it works in an already running process.

    Returns:
        True when the settings were applied.
    """
    import ctypes
    import ctypes.util

    if os.environ.get("GRAPHDIST_NO_MALLOC_TUNING"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        m_trim_threshold, m_mmap_max = -1, -4
        # mallopt takes a C int: 1 << 33 (what this once passed) wrapped to 0, a trim threshold
        # of zero, which hands the heap's top back on every free, so every step faulted its
        # pages in again (a 6 MB feature gather: 3.7 ms against 1.2).
        return bool(libc.mallopt(m_mmap_max, 0)) and bool(libc.mallopt(m_trim_threshold, TRIM_THRESHOLD))
    except (OSError, AttributeError):  # not glibc (musl, macOS): leave the allocator alone
        return False


def spawn(
    fn: Callable[..., Any],
    nprocs: int,
    args: Sequence[Any] = (),
    timeout: Optional[float] = None,
    poll_s: float = 0.2,
) -> None:
    """Runs ``fn(rank, *args)`` in ``nprocs`` spawned processes and waits for all.

    Args:
        fn: module-level function (spawned children import it).
        nprocs: number of processes.
        args: extra picklable arguments.
        timeout: seconds before every worker is killed (None: no limit).
        poll_s: how often the parent checks its children.

    Raises:
        WorkerFailed: a worker raised (its traceback in the message) or exited non-zero.
        WorkerTimeout: workers still running at the deadline (named).
        KeyboardInterrupt: after terminating every worker on Ctrl-C.

    Example:
        Each child prints ``0 hello`` or ``1 hello`` to its own stdout (doctest sees none of it):

        >>> spawn(print, 2, args=("hello",), timeout=60)
    """
    import torch.multiprocessing as mp

    method = start_method()
    # A forkserver child inherits the server's environment, not this process's current one: forward it.
    with _main_without_missing_file():
        context = mp.start_processes(_in_environment, args=(fn, dict(os.environ), os.getpid(), *args),
                                     nprocs=nprocs, join=False, start_method=method)
    deadline = None if timeout is None else time.monotonic() + timeout
    procs = context.processes
    try:
        while True:
            live = [p.sentinel for p in procs if p.exitcode is None]
            if live:
                multiprocessing.connection.wait(live, timeout=poll_s)
            if any(p.exitcode not in (None, 0) for p in procs):
                # The others get a moment to fail on their own and write their errors, so the cause
                # can be told from the ranks that only lost their peer; what is still running after
                # that is stopped by us (and is no cause).
                exited = _wait_for_exits(procs, FAILURE_GRACE_S)
                raise WorkerFailed(describe_failure(procs, context.error_files, exited))
            if not live:
                return
            if deadline is not None and time.monotonic() > deadline:
                alive = [r for r, p in enumerate(procs) if p.exitcode is None]
                raise WorkerTimeout(f"ranks {alive} still running after {timeout:.1f}s; killed")
    finally:
        _stop_all(procs)


@contextlib.contextmanager
def _main_without_missing_file() -> Iterator[None]:
    """Hides ``__main__.__file__`` while workers start when it names no file (``python -`` reading stdin).

    A spawned or forkserver child re-runs the parent's main script from its path; ``<stdin>`` is
    no path, and every worker would fail with ``FileNotFoundError: '<stdin>'``. Without the
    attribute the child starts as from an interactive session (a model class defined in that
    script is refused earlier, by ``check_picklable``).
    """
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or path is None or os.path.exists(path):
        yield
        return
    del main.__file__
    try:
        yield
    finally:
        main.__file__ = path


def _wait_for_exits(procs: Sequence[Any], grace_s: float) -> set[int]:
    """Waits up to ``grace_s`` for every process to exit; returns the ranks that did by themselves."""
    end = time.monotonic() + grace_s
    while time.monotonic() < end:
        live = [p.sentinel for p in procs if p.exitcode is None]
        if not live:
            break
        multiprocessing.connection.wait(live, timeout=max(0.0, end - time.monotonic()))
    return {r for r, p in enumerate(procs) if p.exitcode is not None}


# What the fork server imports once, so that each worker forked from it starts in milliseconds
# instead of importing torch (~3 s of CPU) itself.
FORKSERVER_PRELOAD = ("torch", "torch._dynamo", "graphdist.trainers.run")


def start_method() -> str:
    """``forkserver`` where the platform has it (workers start without importing torch again), else ``spawn``.

    Both are safe with CUDA: the server imports modules but never touches a device. ``GRAPHDIST_START_METHOD=spawn``
    restores a fresh interpreter per worker.
    """
    import multiprocessing

    wanted = os.environ.get("GRAPHDIST_START_METHOD", "forkserver")
    if wanted not in ("forkserver", "spawn"):
        raise ValueError(f"GRAPHDIST_START_METHOD must be forkserver or spawn (got {wanted!r})")
    if wanted == "forkserver" and "forkserver" in multiprocessing.get_all_start_methods():
        multiprocessing.set_forkserver_preload(list(FORKSERVER_PRELOAD))
        return "forkserver"
    return "spawn"


def start_workers_early() -> None:
    """Starts the fork server now, so its imports overlap the launcher's own work (config, partitions).

    The server imports torch, ``torch._dynamo`` (which torch's optimizers import on their first
    step, ~1 s) and the trainer once; workers forked from it later start without any of that.
    Nothing happens under ``GRAPHDIST_START_METHOD=spawn``.
    """
    if start_method() == "forkserver":
        from multiprocessing import forkserver

        forkserver.ensure_running()


def _in_environment(rank: int, fn: Callable[..., Any], environ: dict[str, str], launcher: int, *args: Any) -> None:
    """Runs ``fn(rank, *args)`` under the launcher's environment as it was at ``spawn``, dying with the launcher."""
    os.environ.clear()
    os.environ.update(environ)
    die_with(launcher)
    fn(rank, *args)
    fast_exit(0)  # the work is done and written: the launcher need not wait for torch's teardown


def fast_exit(code: int) -> NoReturn:
    """Ends this process now: atexit handlers run and stdio is flushed, then the interpreter's
    teardown is skipped (with torch and torch._dynamo loaded it takes 1-1.6 s, measured here).

    Only for a process whose work is finished: files are written and closed by then (checkpoints
    and records are written aside, flushed and renamed), so nothing is lost.
    """
    import atexit

    try:
        atexit._run_exitfuncs()  # logging's shutdown, the heartbeat's and torch's own handlers
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # closed or broken pipe: nothing more to say
                pass
        os._exit(code)


def stop_forkserver() -> None:
    """Stops this process's fork server without its teardown (SIGTERM); a later spawn starts a new one.

    The server holds the launcher's stdout and stderr: whoever reads them (a shell pipe, a test's
    ``subprocess.run``) would otherwise wait for its slow exit after the launcher's.

    Example:
        >>> stop_forkserver()  # none running: nothing to do
    """
    from multiprocessing import forkserver

    pid = getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None)  # CPython's bookkeeping
    if pid:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


def die_with(pid: int, poll_s: float = 1.0) -> None:
    """Ends this worker as soon as process ``pid`` (its launcher) ends, even by ``kill -9``.

    A forked worker's parent is the fork server, which outlives a killed launcher (the workers
    hold its pipe open), so neither ``PR_SET_PDEATHSIG`` nor ``getppid()`` would notice: the worker
    watches the launcher itself, with a pidfd (Linux 5.3+: no pid-reuse race), else by polling.
    A worker ended this way loses nothing saved: checkpoints are written aside and renamed.
    """
    import select
    import threading

    try:
        handle: Optional[int] = os.pidfd_open(pid)
    except ProcessLookupError:
        os._exit(1)  # the launcher died before this worker started
    except (AttributeError, OSError):  # no pidfd here
        handle = None

    def watch() -> None:
        if handle is not None:
            select.select([handle], [], [])  # readable once the process has exited
            os._exit(1)
        while True:
            time.sleep(poll_s)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                os._exit(1)
            except PermissionError:  # alive, another user's (pid reused): keep watching
                pass

    threading.Thread(target=watch, name="graphdist-launcher-watch", daemon=True).start()


FAILURE_GRACE_S = 2.0  # enough for a peer that saw a connection close to write its error
PEER_SYMPTOM = re.compile(r"^graphdist\.comm\.group\.CommError: ", re.MULTILINE)
# A CommError that found out which rank went silent (comm/heartbeat.py, comm/group.py) says more than
# one that only saw a connection close: of the symptoms, it is the one to show.
DIAGNOSIS = re.compile(r"stopped beating|never joined|store does not answer")


def describe_failure(processes: Sequence[Any], error_files: Sequence[str], exited: Optional[set[int]] = None) -> str:
    """Names the rank that caused a failed job, with its traceback.

    A rank that lost a peer fails too, with a ``CommError`` (a collective saw the
    connection close or time out): that is a symptom. The cause is a rank that raised
    anything else, or else one that died without a traceback (killed, or exited
    non-zero) by itself (``exited``: the ranks that ended before the launcher stopped
    any; default all); only when every failure is a ``CommError`` is one of those named: the first
    that says which rank went silent (a stopped rank's peers time out at slightly different moments,
    and one that saw another peer's connection close first knows less), else the lowest rank.
    """
    if exited is None:
        exited = set(range(len(processes)))
    raised: dict[int, str] = {}
    for rank, path in enumerate(error_files):
        try:
            with open(path, "rb") as fh:
                raised[rank] = pickle.load(fh)
        except (OSError, EOFError, pickle.UnpicklingError):
            continue
    died = [r for r, p in enumerate(processes) if r in exited and r not in raised and p.exitcode not in (None, 0)]
    causes = [r for r, tb in raised.items() if not PEER_SYMPTOM.search(tb)]
    if causes:
        rank = causes[0]
        message = f"worker rank {rank} raised:\n{raised[rank]}"
    elif died:
        rank = died[0]
        code = processes[rank].exitcode
        how = f" (signal {signal.Signals(-code).name})" if code < 0 and -code in signal.valid_signals() else ""
        message = f"worker rank {rank} exited with code {code}{how}"
    elif raised:
        diagnosed = sorted(r for r, tb in raised.items() if DIAGNOSIS.search(tb))
        rank = diagnosed[0] if diagnosed else min(raised)
        message = f"worker rank {rank} raised:\n{raised[rank]}"
    else:
        return "a worker failed without an exit code or a traceback"
    others = sorted((set(raised) | set(died)) - {rank})
    if others:
        message += f"\n(ranks {others} failed too)"
    return message


def _stop_all(processes: Sequence[Any], grace_s: float = 5.0) -> None:
    """SIGTERM (and SIGCONT) every live worker, then SIGKILL what is left after ``grace_s``."""
    for proc in processes:
        if proc.is_alive():
            try:
                os.kill(proc.pid, signal.SIGTERM)
                os.kill(proc.pid, signal.SIGCONT)  # a stopped worker (SIGSTOP) would hold SIGTERM pending
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace_s
    for proc in processes:
        proc.join(timeout=max(0.0, deadline - time.monotonic()))
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=2)
