"""The project cites only what is in the repository: its design document is ``docs/design.md``.

Every tracked text file (code, docstrings, help texts, tests, benches, Markdown) is scanned for

- a citation of ``DESIGN.md`` or ``STYLE.md`` (files that lived outside the repository, which users
  never get), other than ``docs/design.md`` itself;
- a ``../shared/`` path other than ``../shared/datasets`` (the datasets' read-only home);
- a ``docs/design.md#anchor`` that is no heading of ``docs/design.md``.

A failure names every offending ``file:line``.

Run book::

    .venv/bin/python -m pytest tests/test_citations.py -q
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from graphdist.testing.markdown import slug

REPO = Path(__file__).resolve().parents[1]
DESIGN = REPO / "docs" / "design.md"
SELF = Path(__file__).resolve().relative_to(REPO).as_posix()  # holds the patterns it looks for

# Upper case only: the one design document, ``docs/design.md``, is lower case.
OUTSIDE_DOC = re.compile(r"\b(?:DESIGN|STYLE)\.md\b")
SHARED = re.compile(r"\.\./shared/(?!datasets\b)")
ANCHOR = re.compile(r"docs/design\.md#([\w-]+)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(`{3,}|~{3,})")


def design_anchors(text: str) -> set[str]:
    """The anchors of a Markdown text's headings (lines inside fenced blocks are not headings).

    Example:
        >>> sorted(design_anchors("# A b\\n```\\n# not one\\n```\\n## SACP's rule\\n"))
        ['a-b', 'sacps-rule']
    """
    anchors, fence = set(), None
    for line in text.splitlines():
        opening = FENCE.match(line)
        if opening:
            marker = opening.group(1)
            if fence is None:
                fence = marker
            elif marker[0] == fence[0] and len(marker) >= len(fence):
                fence = None
            continue
        if fence is None and (m := HEADING.match(line)):
            anchors.add(slug(m.group(1)))
    return anchors


def tracked_texts() -> list[tuple[str, str]]:
    """``(path, text)`` of every tracked text file but this one (binary and unreadable files skipped)."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    out = []
    for name in filter(None, listed.decode().split("\0")):
        path = REPO / name
        if name == SELF or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data:
            continue
        try:
            out.append((name, data.decode("utf-8")))
        except UnicodeDecodeError:
            continue
    return out


def bad_citations(files: list[tuple[str, str]], anchors: set[str]) -> list[str]:
    """One ``file:line: what`` per citation of something outside the repository or a missing heading.

    Example:
        >>> bad_citations([("a.py", "# see DESIGN.md section 6\\n# docs/design.md#glossary\\n")], {"glossary"})
        ['a.py:1: cites DESIGN.md (cite docs/design.md#<heading> instead)']
        >>> bad_citations([("b.md", "../shared/datasets ok; ../shared/tools/x.py not; docs/design.md#nope")], set())
        ['b.md:1: ../shared/ path other than ../shared/datasets', 'b.md:1: docs/design.md#nope: no such heading']
    """
    wrong = []
    for name, text in files:
        for number, line in enumerate(text.splitlines(), 1):
            for m in OUTSIDE_DOC.finditer(line):
                wrong.append(f"{name}:{number}: cites {m.group(0)} (cite docs/design.md#<heading> instead)")
            if SHARED.search(line):
                wrong.append(f"{name}:{number}: ../shared/ path other than ../shared/datasets")
            for m in ANCHOR.finditer(line):
                if m.group(1) not in anchors:
                    wrong.append(f"{name}:{number}: docs/design.md#{m.group(1)}: no such heading")
    return wrong


def test_design_document_exists_with_headings():
    assert DESIGN.is_file(), f"{DESIGN.relative_to(REPO)} is missing"
    assert len(design_anchors(DESIGN.read_text())) >= 10


def test_citations_point_inside_the_repository_and_resolve():
    files = tracked_texts()
    assert any(name == "docs/design.md" for name, _ in files) or DESIGN.is_file()
    wrong = bad_citations(files, design_anchors(DESIGN.read_text()))
    assert not wrong, f"{len(wrong)} citation(s) to fix:\n" + "\n".join(wrong)


def test_the_check_catches_each_kind_of_bad_citation():
    anchors = design_anchors(DESIGN.read_text())
    good = "see docs/design.md#glossary and ../shared/datasets/README.md; docs/design.md is lower case"
    assert "glossary" in anchors
    assert bad_citations([("ok.py", good)], anchors) == []
    bad = {
        "DESIGN.md section 6": "cites DESIGN.md",
        "(DESIGN.md §8)": "cites DESIGN.md",
        "see STYLE.md": "cites STYLE.md",
        "../shared/DESIGN.md": "cites DESIGN.md",
        "python3 ../shared/tools/import_cycles.py": "../shared/ path",
        "docs/design.md#no-such-heading": "no such heading",
    }
    for line, what in bad.items():
        found = bad_citations([("x.md", line)], anchors)
        assert found and all(f.startswith("x.md:1: ") for f in found), (line, found)
        assert any(what in f for f in found), (line, found)
