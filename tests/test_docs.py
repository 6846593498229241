"""The docs cannot rot: every runnable block of ``docs/*.md`` runs, and the links between the pages resolve.

A fenced block whose info string is ``bash run`` or ``python run`` is runnable; a plain ``bash`` or
``python`` block is only shown. Each page's runnable blocks run in order in one fresh temporary
directory, so a later block may use what an earlier one made (train, then ``--resume``):

- bash blocks under ``bash -euo pipefail``; python blocks as script files run by this interpreter
  (spawned workers re-import a script's module-level classes, as they would a user's script);
- ``PATH`` starts with this interpreter's ``bin`` (``graphdist-train``, ``torchrun``, ...);
  ``GRAPHDIST_DATA`` points at the datasets the page names (a missing one skips the page, or fails
  it under ``CI=true``), ``GRAPHDIST_CACHE`` is the test's own, and no other ``GRAPHDIST_*`` or
  launcher variable of the caller leaks in.

A failing block fails the page's test with the page, the block's line, its exit code and the end of
its output; a block running past ``BLOCK_TIMEOUT_S`` is killed with everything it started.

Run book::

    .venv/bin/python -m pytest tests/test_docs.py -q        # about a minute on 2 cores
"""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from graphdist.testing.markdown import slug

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
PAGES = sorted(DOCS.glob("*.md"))
RUNNABLE = {"bash", "python"}  # languages a ``<lang> run`` block may use
BLOCK_TIMEOUT_S = 180  # a hang guard: the slowest block takes ~15 s here
TAIL_CHARS = 4000
DATASETS = ("cora", "citeseer", "pubmed")  # read from GRAPHDIST_DATA; synthetic-<N> is generated
# what a runnable block may use that is optional: its marker in the code -> the module it needs
OPTIONAL = {"--tensorboard": "tensorboard"}
# never in a runnable block: multi-host steps, root, and placeholders such as <host0-ip>
FORBIDDEN = re.compile(r"--nnodes|--rdzv-endpoint|\bsudo\b|<[A-Za-z][\w.-]*>")
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
LINK = re.compile(r"\[[^\]]*\]\((?P<target>[^)\s]+)\)")
README_MAX_LINES = 250
# "session 38", "stop 41", "work period 3": internal numbering a reader cannot place in time
WORK_PERIOD = re.compile(r"\b(session|stop|work period)s? \d+", re.IGNORECASE)
LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class Fenced:
    """A fenced block: the line of its opening fence (1-based), its info string and its text."""

    line: int
    info: str
    code: str

    @property
    def lang(self) -> str:
        words = self.info.split()
        return words[0] if words else ""

    @property
    def runnable(self) -> bool:
        words = self.info.split()
        return len(words) >= 2 and words[0] in RUNNABLE and "run" in words[1:]


def fenced_blocks(text: str) -> tuple[list[Fenced], list[tuple[int, str]]]:
    """The fenced blocks of a Markdown text, and its other lines (number, text), in order.

    A fence closes on a line of the same character, at least as long, with nothing after it; a block
    indented under a list item loses that indentation.

    Example:
        >>> blocks, prose = fenced_blocks("a\\n```bash run\\necho hi\\n```\\n  ~~~python\\n  x = 1\\n  ~~~\\n")
        >>> [(b.line, b.lang, b.runnable, b.code) for b in blocks], prose
        ([(2, 'bash', True, 'echo hi\\n'), (5, 'python', False, 'x = 1\\n')], [(1, 'a')])
    """
    blocks: list[Fenced] = []
    prose: list[tuple[int, str]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening or (opening["fence"][0] == "`" and "`" in opening["info"]):
            prose.append((i + 1, lines[i]))
            i += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        body: list[str] = []
        j = i + 1
        while j < len(lines):
            closing = FENCE.match(lines[j])
            if (closing and closing["fence"][0] == fence[0] and len(closing["fence"]) >= len(fence)
                    and not closing["info"].strip()):
                break
            line = lines[j]
            body.append(line[min(indent, len(line) - len(line.lstrip(" "))):])
            j += 1
        blocks.append(Fenced(i + 1, opening["info"].strip(), "".join(f"{b}\n" for b in body)))
        i = j + 1
    return blocks, prose


def runnable_blocks(page: Path) -> list[Fenced]:
    return [b for b in fenced_blocks(page.read_text())[0] if b.runnable]


def anchors(page: Path) -> set[str]:
    prose = fenced_blocks(page.read_text())[1]
    return {slug(m.group(1)) for _, line in prose if (m := re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line))}


# ------------------------------------------------------------------ cheap checks


def test_fenced_blocks_tell_runnable_from_shown():
    text = "\n".join([
        "````markdown",          # 1: a block that shows a fence must not open one
        "```bash run",
        "echo no",
        "````",
        "```bash",               # 5: shown only
        "graphdist-train --epochs 100",
        "```",
        "- a list item:",
        "",
        "  ```python run",        # 10: indented under the item
        "  if True:",
        "      print(1)",
        "  ```",
        "```bash run extra",     # 14: more words after "run" are fine
        "echo yes",
        "```",
        "```console run",        # 17: not a runnable language
        "$ ls",
        "```",
    ])
    blocks, _ = fenced_blocks(text)
    assert [(b.line, b.runnable) for b in blocks] == [(1, False), (5, False), (10, True), (14, True), (17, False)]
    assert blocks[0].code == "```bash run\necho no\n"
    assert blocks[2].code == "if True:\n    print(1)\n"


def test_pages_have_runnable_blocks_and_none_needs_a_cluster_root_or_a_placeholder():
    assert PAGES, f"no pages in {DOCS}"
    for page in PAGES:
        for block in runnable_blocks(page):
            bad = FORBIDDEN.search(block.code)
            assert bad is None, (f"{page.relative_to(REPO)}:{block.line}: a runnable block holds {bad.group(0)!r}; "
                                 f"show it as a plain ```{block.lang} block instead")
    assert sum(len(runnable_blocks(p)) for p in PAGES) >= 10


def test_every_page_is_indexed_and_every_link_resolves():
    index = (DOCS / "README.md").read_text()
    for page in PAGES:
        if page.name != "README.md":
            assert f"]({page.name})" in index, f"docs/README.md does not link {page.name}"
        for number, line in fenced_blocks(page.read_text())[1]:
            for match in LINK.finditer(line):
                target = match["target"]
                if re.match(r"^[a-z]+:", target):
                    continue  # http(s), mailto: not fetched
                path, _, anchor = target.partition("#")
                where = f"{page.relative_to(REPO)}:{number}: link {target}"
                resolved = (page.parent / path).resolve() if path else page
                assert resolved.exists(), f"{where}: no file {resolved}"
                if anchor and resolved.suffix == ".md":
                    assert anchor in anchors(resolved), f"{where}: no heading #{anchor} in {resolved.name}"


def test_the_readme_is_a_front_page():
    """At most 250 lines: what graphdist is, the two commands, a tour, one table of figures, links.
    The reference and the measurement history live in docs/."""
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, (f"README.md has {len(lines)} lines (at most {README_MAX_LINES}); "
                                             f"move the details to a page of docs/ and link it")
    assert lines[0].startswith("# graphdist")
    head = "\n".join(lines[:40])
    assert "make run" in head and "make test" in head, "the two set-up commands come first"


def test_measurements_are_dated_not_numbered_by_work_period():
    """A reader knows a date, not the team's internal numbering of its work periods."""
    for page in [REPO / "README.md", *PAGES]:
        for number, line in enumerate(page.read_text().splitlines(), start=1):
            found = WORK_PERIOD.search(line)
            assert found is None, (f"{page.relative_to(REPO)}:{number}: {found.group(0)!r}: date the measurement "
                                   f"(2026-12-05) or name the commit instead")


# ------------------------------------------------------------------ the runs


def _environment(blocks: list[Fenced], tmp_path: Path) -> dict[str, str]:
    """What a reader's fresh shell would have, with the datasets the page names."""
    from graphdist.testing.env import find_dataset, require

    code = "".join(b.code for b in blocks)
    for marker, module in OPTIONAL.items():
        if marker in code:
            require(importlib.util.find_spec(module) is not None,
                    f"{module} is not installed (pip install -e '.[dev]'); the page uses {marker}")
    folders = dict.fromkeys(str(find_dataset(name).parent) for name in DATASETS if re.search(rf"\b{name}\b", code))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GRAPHDIST_", "SLURM_", "TORCHELASTIC_")) and k not in LAUNCHER_VARIABLES}
    env.update({
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        "GRAPHDIST_CACHE": str(tmp_path / "cache"),
        "PYTHONUNBUFFERED": "1",  # the output tail in order
    })
    if folders:
        env["GRAPHDIST_DATA"] = os.pathsep.join(folders)
    elif "GRAPHDIST_DATA" in os.environ:
        env["GRAPHDIST_DATA"] = os.environ["GRAPHDIST_DATA"]
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # the tests' rule: local runs over loopback
    return env


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    """Runs ``argv`` in its own session; on timeout kills the session (workers, fork servers) too."""
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=BLOCK_TIMEOUT_S)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        code = -signal.SIGKILL
        out += f"\n[killed after {BLOCK_TIMEOUT_S} s]".encode()
    return code, out.decode(errors="replace")


@pytest.mark.parametrize("page", [p for p in PAGES if runnable_blocks(p)], ids=lambda p: p.name)
def test_runnable_blocks_run(page, tmp_path):
    blocks = runnable_blocks(page)
    env = _environment(blocks, tmp_path)
    work, scripts = tmp_path / "work", tmp_path / "blocks"
    work.mkdir()
    scripts.mkdir()
    name = page.relative_to(REPO)
    took = []
    for block in blocks:
        script = scripts / f"{page.stem.replace('-', '_')}_line{block.line}.{'sh' if block.lang == 'bash' else 'py'}"
        script.write_text(block.code)
        argv = ["bash", "-euo", "pipefail", str(script)] if block.lang == "bash" else [sys.executable, str(script)]
        start = time.monotonic()
        code, out = _run(argv, work, env)
        took.append(f"{block.line}: {time.monotonic() - start:.1f} s")
        if code != 0:
            pytest.fail(f"{name}:{block.line}: {block.lang} block failed with exit code {code} after "
                        f"{time.monotonic() - start:.1f} s\n--- block ---\n{block.code}--- output (last "
                        f"{TAIL_CHARS} characters) ---\n{out[-TAIL_CHARS:]}", pytrace=False)
    print(f"{name}: blocks at lines {', '.join(took)}")
