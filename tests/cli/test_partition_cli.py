"""graphdist-partition: the real CLI in subprocesses (started together: each pays torch's import)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from graphdist.cli.partition import main

REPO = Path(__file__).resolve().parents[2]


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "graphdist.cli.partition", *args]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Starts every subprocess case at once, then waits; maps case name -> CompletedProcess-like."""
    tmp = tmp_path_factory.mktemp("cli")
    np.savez(tmp / "noedges.npz", edge_index=np.zeros((2, 0), np.int64), x=np.zeros((5, 2), np.float32))
    (tmp / "existing").mkdir()
    (tmp / "afile").write_text("not a directory")
    cases = {
        "ok": _cli("--dataset", "synthetic-3k", "--num-parts", "3", "--method", "stream", "--out", str(tmp / "ok"),
                   "--progress"),
        "unknown_dataset": _cli("--dataset", "no-such-graph", "--num-parts", "2", "--out", str(tmp / "u")),
        "zero_parts": _cli("--dataset", "synthetic-3k", "--num-parts", "0", "--out", str(tmp / "z")),
        "too_many_parts": _cli("--dataset", "synthetic-3k", "--num_parts", "4000", "--out", str(tmp / "m")),
        "unwritable": _cli("--dataset", "synthetic-3k", "--num-parts", "2", "--out", str(tmp / "afile" / "sub")),
        "no_edges": _cli("--dataset", str(tmp / "noedges.npz"), "--num-parts", "2", "--out", str(tmp / "n")),
        "exists": _cli("--dataset", "synthetic-3k", "--num-parts", "2", "--out", str(tmp / "existing")),
    }
    env = {**os.environ, "GRAPHDIST_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    procs = {
        name: subprocess.Popen(cmd, cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for name, cmd in cases.items()
    }
    results = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=240)
        results[name] = subprocess.CompletedProcess(cases[name], proc.returncode, out, err)
    results["tmp"] = tmp
    return results


def test_end_to_end_writes_a_verified_directory_and_prints_stats(runs):
    ok = runs["ok"]
    assert ok.returncode == 0, ok.stderr
    out = runs["tmp"] / "ok"
    meta = json.loads((out / "meta.json").read_text())
    assert meta["method"] == "stream" and meta["num_parts"] == 3
    assert "--num-parts 3" in meta["command"]
    assert "memory estimate" in ok.stderr and "partition (stream)" in ok.stderr  # estimate and progress bars
    assert "edge cut" in ok.stdout and "label TVD" in ok.stdout
    assert main(["--stats", str(out)]) == 0


@pytest.mark.parametrize(
    "case, words",
    [
        ("unknown_dataset", "no-such-graph"),
        ("zero_parts", "--num-parts"),
        ("too_many_parts", "--num-parts"),
        ("unwritable", "--out"),
        ("no_edges", "no edges"),
        ("exists", "--force"),
    ],
)
def test_bad_input_is_one_clear_line(runs, case, words):
    run = runs[case]
    assert run.returncode != 0
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("graphdist-partition: error:") and words in lines[0]
    assert "Traceback" not in run.stderr


def test_help_is_complete(capsys):
    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    for flag in ("--dataset", "--num-parts", "--method", "--halo-hops", "--balance", "--seed", "--out", "--force",
                 "--stats", "--no-verify", "examples:"):
        assert flag in text


def test_stats_of_a_corrupted_directory_names_the_file(runs, capsys):
    src = runs["tmp"] / "ok"
    target = src / "part-0" / "indptr.npy"
    data = bytearray(target.read_bytes())
    data[-1] ^= 0x01
    target.write_bytes(bytes(data))
    try:
        assert main(["--stats", str(src)]) == 2
        assert "part-0/indptr.npy" in capsys.readouterr().err
        assert main(["--stats", str(src), "--no-verify"]) == 0
    finally:
        data[-1] ^= 0x01
        target.write_bytes(bytes(data))


def test_bad_balance_and_missing_flags_fail_in_process(capsys):
    assert main(["--dataset", "cora", "--num-parts", "2", "--balance", "nodes,bogus"]) == 2
    assert main(["--num-parts", "2"]) == 2
    assert main(["--stats", "/nonexistent/dir"]) == 2
    err = capsys.readouterr().err
    assert "--balance" in err and "--dataset is required" in err and "not a directory" in err


def test_more_parts_than_the_graph_can_fill_is_refused_and_writes_nothing(tmp_path, capsys):
    from graphdist.cli.partition import main as partition_main

    out = tmp_path / "p"
    assert partition_main(["--dataset", "synthetic-300", "--num-parts", "300", "--out", str(out)]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]  # after the graph and the memory estimate
    assert last.startswith("graphdist-partition: error: --num-parts 300: metis leaves") and "use at most" in last
    assert not out.exists()


def test_a_bad_flag_is_one_line_exit_2(capsys):
    from graphdist.cli.partition import main as partition_main

    assert partition_main(["--num-parts", "x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["graphdist-partition: error: argument --num-parts/--num_parts: invalid int value: 'x' "
                   "(see graphdist-partition --help)"]
