"""The console is for people: a banner, progress, one line per epoch, a closing table; diagnostics behind --verbose.

Each test runs the real ``graphdist-train`` in a subprocess on a small generated graph (2 workers,
2 epochs), once without a terminal (pipes: log lines), once under a pseudo-terminal (bars), and
once with ``--verbose``.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

ARGS = ["--dataset", "synthetic-2000", "--num-workers", "2", "--epochs", "2", "--hidden", "16",
        "--fanouts", "5,5", "--batch-size", "256", "--log-interval", "2", "--timeout", "30"]
BANNER_ROWS = ("data", "partitions", "model", "strategy", "sync", "workers", "epochs", "run")
DIAGNOSTICS = ("config: {", "--sync auto: ddp", "topology:", "allreduce: Ring")


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """One cache for the module: the graph is partitioned by the first run, reused by the others."""
    cache = tmp_path_factory.mktemp("cache")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GRAPHDIST_")}
    return {**clean, "GRAPHDIST_CACHE": str(cache), "GLOO_SOCKET_IFNAME": "lo", "TERM": "xterm"}


def _command(run_dir: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "graphdist.cli.train", *ARGS, "--run-dir", str(run_dir), *extra]


def _piped(cmd: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout + done.stderr


def _in_terminal(cmd: list[str], env: dict[str, str], timeout: float = 240) -> str:
    """Runs ``cmd`` with a 30 x 120 pseudo-terminal as its stdin, stdout and stderr; returns all it wrote."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 120, 0, 0))  # a new pty is 0 columns wide
    proc = subprocess.Popen(cmd, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True)
    os.close(slave)
    out, deadline = bytearray(), time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    data = os.read(master, 1 << 16)
                except OSError:  # EIO: every writer closed the terminal
                    break
                if not data:
                    break
                out += data
            elif proc.poll() is not None:
                break
        else:
            proc.kill()
            pytest.fail(f"graphdist-train under a terminal ran past {timeout} s:\n{out.decode()[-3000:]}")
    finally:
        os.close(master)
    assert proc.wait(timeout=30) == 0, out.decode(errors="replace")[-3000:]
    return out.decode(errors="replace")


def _banner(text: str) -> list[str]:
    """The banner's row names, in order (the lines after the ``graphdist`` title)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(r"^graphdist( \S+)?\s*$", line.strip("\r")))
    rows = []
    for line in lines[start + 1:]:
        m = re.match(r"^  (\w+)\s{2,}\S", line)
        if not m:
            break
        rows.append(m.group(1))
    return rows


def test_without_a_terminal_the_console_is_banner_lines_and_a_closing_table(env, tmp_path):
    out = _piped(_command(tmp_path / "run"), env)
    assert _banner(out) == list(BANNER_ROWS), out
    assert re.search(r"^epoch 1 step 2/\d+ \| loss \d\.\d{4} \| .* seeds/s", out, re.M), out  # log lines, no bar
    assert re.search(r"^epoch 2 done \| loss \d\.\d{4} \| train", out, re.M), out  # epoch_line's format
    assert "\r" not in out and "%|" not in out, "a bar was drawn into a pipe"
    for diagnostic in DIAGNOSTICS:
        assert diagnostic not in out, f"{diagnostic!r} shown without --verbose:\n{out}"
    assert "[rank 1]" not in out, out  # other ranks speak only to warn
    closing = out[out.index("done: 2 epochs"):]
    for row in ("best epoch", "time", "sent", "run", "next"):
        assert re.search(rf"^  {row}\s", closing, re.M), closing
    assert f"--resume {tmp_path / 'run'}" in closing and f"--predict {tmp_path / 'run'}" in closing


def test_verbose_brings_back_the_diagnostics(env, tmp_path):
    out = _piped(_command(tmp_path / "run", "--verbose"), env)
    for diagnostic in DIAGNOSTICS:
        assert diagnostic in out, f"{diagnostic!r} missing under --verbose:\n{out}"
    assert "[rank 0] epoch 2 done |" in out, out  # verbose: every line says its rank
    assert "done: 2 epochs" in out


def test_a_terminal_gets_a_progress_bar_and_the_closing_table(env, tmp_path):
    out = _in_terminal(_command(tmp_path / "run"), env)
    assert _banner(out) == list(BANNER_ROWS), out
    assert re.search(r"epoch 1:\s+\d+%\|.*\| \d+/\d+ \[", out), f"no progress bar drawn:\n{out[-3000:]}"
    assert not re.search(r"^epoch 1 step 2/", out, re.M), "log lines beside the bar"
    assert re.search(r"epoch 2 done \| loss \d\.\d{4}", out), out
    assert "done: 2 epochs" in out and "  next " in out, out
