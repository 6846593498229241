"""``graphdist env``: the real command in a subprocess reports this machine's real values."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import psutil
import pytest
import torch

REPO = Path(__file__).resolve().parents[2]


def _run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -m graphdist ARGS`` with the launcher and ``GRAPHDIST_*`` variables cleared, then ``env`` added."""
    from graphdist.cli.env import LAUNCHER_VARIABLES

    clean = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARIABLES and not k.startswith("GRAPHDIST_")}
    return subprocess.run([sys.executable, "-m", "graphdist", *args], capture_output=True, text=True, timeout=120,
                          cwd=REPO, env={**clean, **(env or {})})


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def test_json_reports_this_machine(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    env = {"RANK": "3", "WORLD_SIZE": "4", "MASTER_ADDR": "10.0.0.7", "SLURM_JOB_ID": "4242",
           "GRAPHDIST_DATA": f"{data}:{tmp_path / 'missing'}", "GRAPHDIST_CACHE": str(tmp_path / "cache"),
           "GRAPHDIST_EPOCHS": "3"}
    proc = _run("env", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["torch"]["version"] == torch.__version__
    assert report["torch"]["build"] == (f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU")
    assert report["python"]["executable"] == sys.executable
    assert report["python"]["version"] == ".".join(map(str, sys.version_info[:3]))
    assert report["cores"]["cpu_count"] == os.cpu_count()
    assert report["cores"]["usable"] == len(os.sched_getaffinity(0))
    assert report["memory"]["total_bytes"] == psutil.virtual_memory().total
    assert 0 < report["memory"]["available_bytes"] <= report["memory"]["total_bytes"]
    for dist, key in (("torch_geometric", "torch_geometric"), ("pymetis", "pymetis"), ("numpy", "numpy"),
                      ("pyg-lib", "pyg_lib"), ("torch-sparse", "torch_sparse"), ("tensorboard", "tensorboard")):
        assert report["packages"][key].split(" (import fails")[0] == _version(dist), key  # or "not installed"
    assert report["backends"]["gloo"] == torch.distributed.is_gloo_available()
    assert report["backends"]["nccl"] == torch.distributed.is_nccl_available()
    assert len(report["cuda"]) == (torch.cuda.device_count() if torch.cuda.is_available() else 0)
    assert report["emulated_cluster"]["root"] == (os.geteuid() == 0)
    assert report["emulated_cluster"]["ip"] == shutil.which("ip")
    assert report["paths"]["cache"] == str(tmp_path / "cache") and report["paths"]["cache_from"] == "GRAPHDIST_CACHE"
    assert report["paths"]["data_missing"] == [str(tmp_path / "missing")]
    assert report["environment"] == {"RANK": "3", "WORLD_SIZE": "4", "MASTER_ADDR": "10.0.0.7",
                                     "SLURM_JOB_ID": "4242", "GRAPHDIST_EPOCHS": "3"}


def test_table_has_one_line_per_fact_with_the_real_values(tmp_path):
    proc = _run("env", env={"GRAPHDIST_CACHE": str(tmp_path), "MASTER_PORT": "29500"})
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    rows = {line.split(None, 1)[0]: line.split(None, 1)[1] for line in proc.stdout.splitlines()
            if not line.startswith(" ")}
    assert rows["torch"].startswith(f"{torch.__version__} (")
    assert rows["cores"].startswith(f"{len(os.sched_getaffinity(0))} usable (affinity), {os.cpu_count()} in the")
    assert rows["python"] == f"{'.'.join(map(str, sys.version_info[:3]))} ({sys.executable})"
    assert rows["cache"] == f"{tmp_path} (GRAPHDIST_CACHE)"
    assert "MASTER_PORT=29500" in rows["environment"]
    assert rows["cuda"].startswith("devices")  # "cuda devices  none" or the count, then one line per device
    assert "Traceback" not in proc.stdout


def test_a_missing_optional_package_reads_not_installed(monkeypatch):
    from graphdist.cli import env

    monkeypatch.setitem(env.OPTIONAL_PACKAGES, "no-such-package-graphdist", "no_such_module")
    report = env.collect()
    assert report["packages"]["no_such_module"] == "not installed"
    assert ["no_such_module", "not", "installed"] in [line.split() for line in env.text_lines(report)]


def test_a_failing_section_is_one_error_line_and_the_rest_is_still_there(monkeypatch):
    from graphdist.cli import env

    def broken() -> dict:
        raise RuntimeError("CUDA driver initialization failed\nmore detail")

    monkeypatch.setitem(env.SECTIONS, "cuda", (broken, env.SECTIONS["cuda"][1]))
    lines = env.text_lines(env.collect())
    assert "cuda              error: RuntimeError: CUDA driver initialization failed" in lines
    assert any(line.startswith("memory ") for line in lines)


def test_help_lists_env_and_an_unknown_command_is_one_line_exit_2():
    proc = _run("--help")
    assert proc.returncode == 0
    assert any(line.split()[:1] == ["env"] and "bug report" in line for line in proc.stdout.splitlines())
    proc = _run("envv")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == ["graphdist: unknown command 'envv'; did you mean 'env'?"]
    proc = _run("env", "--jsn")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "graphdist env: error: unrecognized argument --jsn; did you mean '--json'? (see graphdist env --help)"]


def test_console_script_runs_env():
    script = Path(sys.executable).with_name("graphdist")
    from graphdist.testing.env import require

    require(script.exists(), "no graphdist console script next to this python: pip install -e . makes it")
    proc = subprocess.run([str(script), "env", "--json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["torch"]["version"] == torch.__version__
