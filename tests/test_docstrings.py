"""Comments say why, briefly: no issue numbers in the code (its history is in git), core module docstrings say
what a module is for in a few lines (long derivations live in docs/), and the docs/ pages they point to exist."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
CODE_FOLDERS = ("app", "core", "db", "jobs")
MAX_CORE_DOCSTRING_LINES = 15
#: "issue 12", "Issue 12", "issue #12", "(issue 23, item 4)"
ISSUE_NUMBER = re.compile(r"issue #?[0-9]", re.IGNORECASE)
DOCS_LINK = re.compile(r"docs/[\w./-]+\.md")
TEXT_SUFFIXES = {".py", ".js", ".css", ".html", ".md", ".json", ".mako", ".txt", ".toml", ".cfg", ".ini"}


def _code_files(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (REPO_ROOT / folder).rglob("*")
                  if p.is_file() and p.suffix in TEXT_SUFFIXES and "__pycache__" not in p.parts)


def _module_docstring_lines(path: Path) -> tuple[int, str]:
    """The number of source lines the module's docstring literal spans (0 without one), and its text."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    first = tree.body[0] if tree.body else None
    if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)):
        return first.end_lineno - first.lineno + 1, first.value.value
    return 0, ""


def test_the_scanned_folders_hold_the_code():
    # guards the two rules below against passing on an empty or mistyped file list
    files = _code_files(*CODE_FOLDERS)
    assert len([p for p in files if p.suffix == ".py"]) > 100
    assert (REPO_ROOT / "core" / "field" / "population.py") in files


@pytest.mark.parametrize("text, found", [("# see issue 12", True), ("(Issue 23, item 4)", True),
                                         ("issue #7", True), ("an issue with the 3 photos", False)])
def test_the_issue_pattern_catches_the_forms_it_means(text, found):
    assert bool(ISSUE_NUMBER.search(text)) is found


def test_no_issue_numbers_in_the_code():
    hits = [f"{p.relative_to(REPO_ROOT)}:{n}: {line.strip()}"
            for p in _code_files(*CODE_FOLDERS)
            for n, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), start=1)
            if ISSUE_NUMBER.search(line)]
    assert not hits, "say why in the code, not which issue asked for it:\n" + "\n".join(hits)


def test_the_docstring_line_count_reads_the_literal(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('"""One.\n\nTwo.\nThree."""\n\nX = 1\n', encoding="utf-8")
    assert _module_docstring_lines(module)[0] == 4
    module.write_text("X = 1\n", encoding="utf-8")
    assert _module_docstring_lines(module)[0] == 0


def test_core_module_docstrings_are_short():
    long = [f"{p.relative_to(REPO_ROOT)}: {n} lines" for p in _code_files("core") if p.suffix == ".py"
            for n in [_module_docstring_lines(p)[0]] if n > MAX_CORE_DOCSTRING_LINES]
    assert not long, (f"a core module docstring says what the module is for in at most {MAX_CORE_DOCSTRING_LINES} "
                      "lines; move derivations to docs/ and link there:\n" + "\n".join(long))


def test_the_docs_pages_the_code_names_exist():
    links = [(p, link) for p in _code_files(*CODE_FOLDERS) if p.suffix == ".py"
             for link in DOCS_LINK.findall(p.read_text(encoding="utf-8"))]
    assert any(link == "docs/population.md" for _, link in links)  # the pattern finds the links it guards
    missing = [f"{p.relative_to(REPO_ROOT)} -> {link}" for p, link in links if not (REPO_ROOT / link).is_file()]
    assert not missing, "the code points to docs/ pages that do not exist:\n" + "\n".join(missing)
