"""docs/design.md's "where to look" tables name files and functions that exist.

A reader finds each behaviour from the table in one guess only while the table follows the
code: every file it names exists, and the function (or class, constant, `Class.method`) that
answers each question is defined in the file named beside it.
"""
import ast
import re

from conftest import REPO

DESIGN = REPO / "docs" / "design.md"


def _rows():
    """(files, names) of each table row that names cudnn_setup files; in a row with a function
    column, its first name in backticks: the answer (the rest of the cell is context)."""
    rows = []
    for line in DESIGN.read_text().splitlines():
        if not line.startswith("| ") or "cudnn_setup/" not in line:
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        files = re.findall(r"`(cudnn_setup/[\w/]+\.py)`", line)
        names = re.findall(r"`([A-Za-z_][\w.]*)`", cells[-1]) if len(cells) == 3 else []
        names = [n for n in names if "/" not in n and not n.endswith(".py")]
        rows.append((files, names[:1]))
    return rows


def _defined(path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
            if isinstance(node, ast.ClassDef):
                out.update(f"{node.name}.{m.name}" for m in node.body
                           if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out.update(t.id for t in targets if isinstance(t, ast.Name))
    return out


def test_the_tables_are_read():
    rows = _rows()
    assert len(rows) >= 20
    assert sum(1 for _, names in rows if names) >= 12


def test_every_file_and_its_function_exists():
    missing = []
    for files, names in _rows():
        for f in files:
            if not (REPO / f).is_file():
                missing.append(f)
        if names and files:
            defined = set().union(*(_defined(REPO / f) for f in files if (REPO / f).is_file()))
            missing += [f"{files[0]}: {n}" for n in names if n.split(".")[-1] not in
                        {d.split(".")[-1] for d in defined} and n not in defined]
    assert not missing, missing
