"""``graphdist env``: what this machine and environment are, for a bug report.

Run book::

    graphdist env                 # a table: paste it into the bug report
    graphdist env --json          # the same as one JSON object (scripts, CI logs)
    python -m graphdist env       # without the console script

Reports graphdist, Python, the platform, torch (version, CUDA/ROCm or CPU build), the other
packages (a missing one reads "not installed"), the distributed backends, CUDA devices, cores,
memory, whether emulated clusters (network namespaces) can run here, the data and cache
directories and the torchrun/SLURM/``GRAPHDIST_*`` variables that are set.

Nothing here may fail the report: a section that cannot be read (torch itself broken, a driver
that errors) reads ``error: <what>``, and the other sections are still printed. Nothing is
created or changed: namespaces are judged from root and ``ip``/``tc`` on the PATH, never made.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Callable, Optional, Sequence

PROG = "graphdist env"

# Variables a launcher sets (torchrun, SLURM) or that steer the transport: they change what a run does.
LAUNCHER_VARIABLES = (
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
    "SLURM_JOB_ID", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NNODES", "SLURM_JOB_NODELIST",
    "SLURM_CPUS_PER_TASK", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME",
)
# distribution name -> module name; these are optional, and the import itself is tried: a
# compiled extension built for another torch installs fine and fails only at import.
OPTIONAL_PACKAGES = {"pyg-lib": "pyg_lib", "torch-sparse": "torch_sparse", "tensorboard": "tensorboard"}
# versions only: importing PyG takes seconds
REQUIRED_PACKAGES = ("torch_geometric", "pymetis", "numpy", "numba", "psutil")
NOT_INSTALLED = "not installed"
Rows = list[tuple[str, str]]  # a section's table lines: (name, text)


def package_version(dist: str) -> str:
    """The installed version of distribution ``dist``, or ``"not installed"``.

    Example:
        >>> package_version("no-such-package-graphdist"), package_version("pip") != "not installed"
        ('not installed', True)
    """
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return NOT_INSTALLED


def optional_package(dist: str, module: str) -> str:
    """``package_version(dist)``, or that version with why its import fails.

    Example:
        >>> optional_package("no-such-package-graphdist", "no_such_module")
        'not installed'
    """
    version = package_version(dist)
    if version == NOT_INSTALLED:
        return version
    try:
        __import__(module)
    except Exception as exc:  # noqa: BLE001 -- an ABI mismatch raises OSError, ImportError, RuntimeError...
        return f"{version} (import fails: {_one_line(exc)})"
    return version


def _one_line(exc: BaseException) -> str:
    text = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def graphdist_info() -> dict[str, str]:
    import graphdist

    # The location tells an editable checkout from an installed wheel.
    return {"version": graphdist.__version__, "location": os.path.dirname(os.path.abspath(graphdist.__file__))}


def python_info() -> dict[str, str]:
    import platform

    return {"version": platform.python_version(), "executable": sys.executable}


def platform_info() -> dict[str, str]:
    import platform

    return {"platform": platform.platform(), "kernel": platform.release(), "machine": platform.machine()}


def torch_info() -> dict[str, Any]:
    """torch's version, build (``CUDA 12.4``, ``ROCm 6.1`` or ``CPU``) and intra-op threads."""
    import torch

    if torch.version.cuda:
        build = f"CUDA {torch.version.cuda}"
    elif getattr(torch.version, "hip", None):
        build = f"ROCm {torch.version.hip}"
    else:
        build = "CPU"
    return {"version": torch.__version__, "build": build, "threads": torch.get_num_threads()}


def packages_info() -> dict[str, str]:
    out = {name: package_version(name) for name in REQUIRED_PACKAGES}
    out.update({module: optional_package(dist, module) for dist, module in OPTIONAL_PACKAGES.items()})
    return out


def backends_info() -> dict[str, bool]:
    """Which ``torch.distributed`` backends this torch build has (queries only; nothing is initialised)."""
    import torch

    # Not through graphdist.comm: that package imports every collective; these are build queries.
    dist = torch.distributed
    if not dist.is_available():
        return {"distributed": False, "gloo": False, "nccl": False, "mpi": False}
    return {"distributed": True, "gloo": dist.is_gloo_available(), "nccl": dist.is_nccl_available(),
            "mpi": dist.is_mpi_available()}


def cuda_info() -> list[dict[str, Any]]:
    """One entry per visible CUDA device (index, name, memory); empty without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return []
    devices = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        devices.append({"index": index, "name": props.name, "memory_bytes": int(props.total_memory),
                        "capability": f"{props.major}.{props.minor}"})
    return devices


def cores_info() -> dict[str, Optional[float]]:
    """Cores this process may run on, cores in the machine, and a cgroup v2 CPU quota (None: none)."""
    from graphdist.launch import usable_cores

    return {"usable": len(usable_cores()), "cpu_count": os.cpu_count(), "cgroup_quota": cgroup_cpu_quota()}


def cgroup_cpu_quota(path: str = "/sys/fs/cgroup/cpu.max") -> Optional[float]:
    """A container's CPU limit in cores (``cpu.max``: ``quota period``); None when unlimited or unknown.

    A quota below the affinity count is why a container "with 8 cores" runs 2 workers slowly.

    Example:
        >>> cgroup_cpu_quota("/no/such/file") is None
        True
    """
    try:
        with open(path) as f:
            quota, period = f.read().split()[:2]
    except (OSError, ValueError):
        return None
    return None if quota == "max" else int(quota) / int(period)


def memory_info() -> dict[str, int]:
    import psutil

    vm = psutil.virtual_memory()
    return {"total_bytes": int(vm.total), "available_bytes": int(vm.available)}


def emulated_cluster_info() -> dict[str, Any]:
    """Whether ``graphdist.testing.netns`` can make hosts here, judged without making a namespace.

    It needs Linux, root and iproute2 (``ip``, ``tc``); a container may still refuse ``ip netns add``
    (no CAP_SYS_ADMIN), which only trying tells.
    """
    import shutil

    root = os.geteuid() == 0
    tools = {tool: shutil.which(tool) for tool in ("ip", "tc")}
    missing = [f"{tool} not on PATH (apt-get install iproute2)" for tool, path in tools.items() if path is None]
    reasons = ([] if sys.platform.startswith("linux") else [f"not Linux ({sys.platform})"]) + (
        [] if root else [f"not root (uid {os.geteuid()})"]) + missing
    return {"root": root, **tools, "likely": not reasons, "reasons": reasons}


def paths_info() -> dict[str, Any]:
    from graphdist.data.paths import cache_dir

    data = os.environ.get("GRAPHDIST_DATA")
    dirs = [p for p in (data or "").split(os.pathsep) if p]
    # A misspelt GRAPHDIST_DATA entry is the usual reason a named dataset "does not exist".
    missing = [p for p in dirs if not os.path.isdir(os.path.expanduser(p))]
    cache_from = "GRAPHDIST_CACHE" if os.environ.get("GRAPHDIST_CACHE") else "default"
    return {"data": data, "data_missing": missing, "cache": str(cache_dir()), "cache_from": cache_from}


def environment_info(environ: Optional[dict[str, str]] = None) -> dict[str, str]:
    """The launcher variables and ``GRAPHDIST_*`` options that are set (they change what a run does).

    Example:
        >>> environment_info({"RANK": "1", "HOME": "/root", "GRAPHDIST_EPOCHS": "3"})
        {'RANK': '1', 'GRAPHDIST_EPOCHS': '3'}
    """
    env = os.environ if environ is None else environ
    out = {name: env[name] for name in LAUNCHER_VARIABLES if name in env}
    # DATA and CACHE have a section of their own.
    out.update({k: v for k, v in sorted(env.items()) if k.startswith("GRAPHDIST_")
                and k not in ("GRAPHDIST_DATA", "GRAPHDIST_CACHE")})
    return out


def collect() -> dict[str, Any]:
    """Every section's facts; a section that raises reads ``{"error": "<Type>: <message>"}``.

    Example:
        >>> report = collect()
        >>> list(report)[:3], report["cores"]["cpu_count"] == os.cpu_count()
        (['graphdist', 'python', 'platform'], True)
    """
    report: dict[str, Any] = {}
    for name, (read, _) in SECTIONS.items():
        try:
            report[name] = read()
        except Exception as exc:  # noqa: BLE001 -- the report of a broken environment is the point
            report[name] = {"error": _one_line(exc)}
    return report


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def text_lines(report: dict[str, Any]) -> list[str]:
    """The report as ``name  value`` lines, one fact per line (what a bug report quotes).

    Example:
        >>> lines = text_lines({"cores": {"usable": 2, "cpu_count": 4, "cgroup_quota": None}})
        >>> lines
        ['cores             2 usable (affinity), 4 in the machine (os.cpu_count)']
    """
    rows: list[tuple[str, str]] = []
    for name, value in report.items():
        if isinstance(value, dict) and "error" in value:
            rows.append((name, f"error: {value['error']}"))
        else:
            rows.extend(SECTIONS[name][1](value))
    return [f"{key:<17} {text}".rstrip() for key, text in rows]


def _graphdist_rows(v: dict[str, str]) -> Rows:
    return [("graphdist", f"{v['version']} ({v['location']})")]


def _python_rows(v: dict[str, str]) -> Rows:
    return [("python", f"{v['version']} ({v['executable']})")]


def _platform_rows(v: dict[str, str]) -> Rows:
    return [("platform", f"{v['platform']} (kernel {v['kernel']}, {v['machine']})")]


def _torch_rows(v: dict[str, Any]) -> Rows:
    return [("torch", f"{v['version']} ({v['build']} build, {v['threads']} threads)")]


def _package_rows(v: dict[str, str]) -> Rows:
    return list(v.items())


def _backend_rows(v: dict[str, bool]) -> Rows:
    if not v["distributed"]:
        return [("backends", "none: this torch build has no torch.distributed")]
    return [("backends", ", ".join(f"{k} {'yes' if v[k] else 'no'}" for k in ("gloo", "nccl", "mpi")))]


def _cuda_rows(devices: list[dict[str, Any]]) -> Rows:
    if not devices:
        return [("cuda devices", "none")]
    return [("cuda devices", str(len(devices)))] + [
        (f"  cuda:{d['index']}", f"{d['name']}, {_gib(d['memory_bytes'])}, compute {d['capability']}")
        for d in devices]


def _core_rows(v: dict[str, Any]) -> Rows:
    text = f"{v['usable']} usable (affinity), {v['cpu_count']} in the machine (os.cpu_count)"
    if v["cgroup_quota"] is not None:
        text += f", cgroup quota {v['cgroup_quota']:g} cores"
    return [("cores", text)]


def _memory_rows(v: dict[str, int]) -> Rows:
    return [("memory", f"{_gib(v['total_bytes'])} total, {_gib(v['available_bytes'])} available")]


def _cluster_rows(v: dict[str, Any]) -> Rows:
    tools = ", ".join(f"{t} {v[t] or 'not found'}" for t in ("ip", "tc"))
    if v["likely"]:
        return [("emulated cluster", f"likely: root, {tools} (a container may still refuse `ip netns add`)")]
    return [("emulated cluster", f"no: {'; '.join(v['reasons'])}; {tools}")]


def _path_rows(v: dict[str, Any]) -> Rows:
    missing = f"; not a directory: {', '.join(v['data_missing'])}" if v["data_missing"] else ""
    return [("data", f"{v['data']} (GRAPHDIST_DATA{missing})" if v["data"] else "GRAPHDIST_DATA unset"),
            ("cache", f"{v['cache']} ({v['cache_from']})")]


def _environment_rows(v: dict[str, str]) -> Rows:
    if not v:
        return [("environment", "no launcher or GRAPHDIST_* variables set")]
    return [("environment", " ".join(f"{k}={val}" for k, val in v.items()))]


# name -> (what reads the facts, how the table shows them). The one declaration of the sections, in report order.
SECTIONS: dict[str, tuple[Callable[[], Any], Callable[[Any], Rows]]] = {
    "graphdist": (graphdist_info, _graphdist_rows),
    "python": (python_info, _python_rows),
    "platform": (platform_info, _platform_rows),
    "torch": (torch_info, _torch_rows),
    "packages": (packages_info, _package_rows),
    "backends": (backends_info, _backend_rows),
    "cuda": (cuda_info, _cuda_rows),
    "cores": (cores_info, _core_rows),
    "memory": (memory_info, _memory_rows),
    "emulated_cluster": (emulated_cluster_info, _cluster_rows),
    "paths": (paths_info, _path_rows),
    "environment": (environment_info, _environment_rows),
}


def build_parser() -> argparse.ArgumentParser:
    from graphdist.cli.args import OneLineParser

    p = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0],
                      epilog="exit codes: 0 the report was printed, 2 a bad flag")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Prints the report (``--json``: as JSON); returns the exit code.

    Example:
        >>> import contextlib, io
        >>> out = io.StringIO()
        >>> with contextlib.redirect_stdout(out):
        ...     code = main(["--json"])
        >>> code, json.loads(out.getvalue())["cores"]["cpu_count"] == os.cpu_count()
        (0, True)
    """
    from graphdist.cli.args import UsageError

    try:
        ns = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    report = collect()
    print(json.dumps(report, indent=2) if ns.json else "\n".join(text_lines(report)))
    return 0


__all__ = ["collect", "main", "text_lines"]
