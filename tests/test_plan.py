"""The install and uninstall plans decided from what stands in the root (state/plan.py
`decide`, `decide_uninstall`: no I/O), case by case, and looking at a real root
(state/observe.py) apart from deciding."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudnn_setup.errors import InstallFailed
from cudnn_setup.state.journal import MKDIR, PUT, REMOVE, RMDIR, Op
from cudnn_setup.state.manifest import (DIR, FILE, OTHER, SYMLINK, Content, FileRecord, Manifest,
                                        Original, Source)
from cudnn_setup.state.observe import Observed, observe_install, observe_uninstall
from cudnn_setup.state.plan import (Desired, decide, decide_uninstall, make_plan,
                                    uninstall_plan)
from cudnn_setup.digest import file_digest

ROOT = Path("/nonexistent/cuda-root")  # deciding never looks at it
STAGED = ROOT / ".cudnn-setup/tx/stage"
STORE = ".cudnn-setup/originals"
LIB = "lib64/libcudnn.so.9.1.0"
LINK = "lib64/libcudnn.so.9"
HEADER = "include/cudnn.h"
A, B, C = "a" * 64, "b" * 64, "c" * 64


def archive_file(path: str = LIB, sha: str = A, mode: int = 0o755) -> Desired:
    return Desired(path, FILE, sha256=sha, mode=mode, source=STAGED / path)


def archive_link(path: str = LINK, target: str = "libcudnn.so.9.1.0") -> Desired:
    return Desired(path, SYMLINK, target=target, source=STAGED / path)


def file(sha: str, mode: int = 0o755) -> Content:
    return Content(FILE, sha, mode)


def link(target: str) -> Content:
    return Content(SYMLINK, target=target)


def manifest(files: dict[str, Content] | None = None, originals: dict[str, Original] | None = None,
             created_dirs: list[str] | None = None) -> Manifest:
    return Manifest("0" * 32, "9.1.0", "v9", "12.4", Source("cudnn.tar.xz", A, 1), "lib64",
                    [FileRecord(p, c) for p, c in (files or {}).items()],
                    originals=dict(originals or {}), created_dirs=list(created_dirs or []))


def seen(at: dict, standing=("lib64", "include")) -> Observed:
    return Observed(at, frozenset(standing))


def put(path: str = LIB, *, backup=False, original=False, kind=FILE) -> Op:
    return Op(PUT, path, os.path.relpath(STAGED / path, ROOT), backup=backup, original=original,
              kind=kind)


# ---- install: one path, every case of the table -------------------------------------------

CASES = {
    # name: (desired, previous record, what stands, original waiting, force) -> expectations
    "create": (archive_file(), None, None, None, False,
               dict(ops=[put()])),
    "adopt an identical hand copy": (archive_file(), None, file(A), None, False,
                                     dict(adopted=[LIB], originals={LIB: Original(file(A), True)})),
    "adopt an identical link": (archive_link(), None, link("libcudnn.so.9.1.0"), None, False,
                                dict(adopted=[LINK],
                                     originals={LINK: Original(link("libcudnn.so.9.1.0"), True)})),
    "hand copy different: backed up, replaced": (
        archive_file(), None, file(B), None, False,
        dict(ops=[put(backup=True, original=True)], manual=[LIB],
             originals={LIB: Original(file(B))})),
    "hand copy with the same bytes, another mode: backed up": (
        archive_file(), None, file(A, 0o644), None, False,
        dict(ops=[put(backup=True, original=True)], manual=[LIB],
             originals={LIB: Original(file(A, 0o644))})),
    "symlink in the way of a file: backed up, replaced": (
        archive_file(), None, link("/elsewhere/libcudnn.so"), None, False,
        dict(ops=[put(backup=True, original=True)], manual=[LIB],
             originals={LIB: Original(link("/elsewhere/libcudnn.so"))})),
    "file in the way of a link: backed up, replaced": (
        archive_link(), None, file(B), None, False,
        dict(ops=[put(LINK, backup=True, original=True, kind=SYMLINK)], manual=[LINK],
             originals={LINK: Original(file(B))})),
    "something else (a fifo) in the way: backed up": (
        archive_file(), None, Content(OTHER), None, False,
        dict(ops=[put(backup=True, original=True)], manual=[LIB],
             originals={LIB: Original(Content(OTHER))})),
    "installed and identical: left": (archive_file(), file(A), file(A), None, False,
                                      dict(unchanged=[LIB])),
    "installed, now another version: replaced, no original": (
        archive_file(sha=B), file(A), file(A), None, False,
        dict(ops=[put(backup=True)])),
    "installed over a file adopted in place: that file goes to the store": (
        archive_file(sha=B), file(A), file(A), Original(file(A), True), False,
        dict(ops=[put(backup=True, original=True)], originals={LIB: Original(file(A))})),
    "installed over a backed-up original: the original stays in the store": (
        archive_file(sha=B), file(A), file(A), Original(file(C)), False,
        dict(ops=[put(backup=True)], originals={LIB: Original(file(C))})),
    "changed since installed: conflict": (archive_file(sha=B), file(A), file(C), None, False,
                                         dict(conflicts=[LIB])),
    "changed since installed, --force: replaced": (
        archive_file(sha=B), file(A), file(C), None, True, dict(ops=[put(backup=True)])),
    "installed, gone since: created again": (archive_file(sha=B), file(A), None, None, False,
                                            dict(ops=[put()])),
    "identical, --force: replaced all the same": (archive_file(), file(A), file(A), None, True,
                                                  dict(ops=[put(backup=True)])),
    "hand copy identical, --force: backed up": (
        archive_file(), None, file(A), None, True,
        dict(ops=[put(backup=True, original=True)], manual=[LIB],
             originals={LIB: Original(file(A))})),
    "an original waits to go back where something new stands: conflict": (
        archive_file(), None, file(B), Original(file(C)), False, dict(conflicts=[LIB],
        originals={LIB: Original(file(C))})),
    "an original waits, the new thing is identical: still a conflict": (
        archive_file(), None, file(A), Original(file(C)), False, dict(conflicts=[LIB],
        originals={LIB: Original(file(C))})),
    "an original waits, --force: replaced, the stored original kept": (
        archive_file(), None, file(B), Original(file(C)), True,
        dict(ops=[put(backup=True)], originals={LIB: Original(file(C))})),
    "an original waits, nothing stands: created": (
        archive_file(), None, None, Original(file(C)), False,
        dict(ops=[put()], originals={LIB: Original(file(C))})),
}


@pytest.mark.parametrize("name", CASES)
def test_install_case(name):
    desired, prev, current, waiting, force, expected = CASES[name]
    old = None
    if prev is not None or waiting is not None:
        old = manifest({desired.path: prev} if prev else {},
                       {desired.path: waiting} if waiting else {})
    plan = decide(ROOT, old, [desired], force, seen({desired.path: current}))
    assert plan.ops == expected.get("ops", [])
    for key in ("adopted", "unchanged", "conflicts", "manual"):
        assert getattr(plan, key) == expected.get(key, []), key
    assert plan.originals == expected.get("originals", {})
    assert plan.created_dirs == []


def test_old_manifest_and_its_originals_are_not_changed():
    old = manifest({LIB: file(A)}, {LIB: Original(file(A), True)})
    before = old.to_dict()
    plan = decide(ROOT, old, [archive_file(sha=B)], False, seen({LIB: file(A)}))
    assert plan.originals[LIB] == Original(file(A))
    assert old.to_dict() == before


def test_directory_in_the_way():
    with pytest.raises(InstallFailed) as caught:
        decide(ROOT, None, [archive_file(HEADER), archive_file()], False,
               seen({HEADER: None, LIB: Content(DIR)}))
    error = caught.value
    assert error.code == "directory-in-the-way"
    assert str(error) == f"{ROOT / LIB} is a directory where cuDNN puts a file"
    assert error.hint == "move it away, then run again"


def test_directory_in_the_way_is_refused_even_with_force_and_a_record():
    with pytest.raises(InstallFailed, match="is a directory where cuDNN puts a symlink"):
        decide(ROOT, manifest({LINK: link("x")}), [archive_link()], True,
               seen({LINK: Content(DIR)}))


def test_missing_parents_are_created_first_and_recorded():
    desired = [archive_file(), archive_file(HEADER), archive_link()]
    old = manifest(created_dirs=["targets"])
    plan = decide(ROOT, old, desired, False, seen({LIB: None, HEADER: None, LINK: None},
                                                  standing=()))
    assert plan.ops[:2] == [Op(MKDIR, "include"), Op(MKDIR, "lib64")]
    assert [op.action for op in plan.ops[2:]] == [PUT, PUT, PUT]
    assert plan.created_dirs == ["targets", "include", "lib64"]
    assert old.created_dirs == ["targets"]


def test_existing_parents_are_not_created():
    plan = decide(ROOT, None, [archive_file(), archive_file(HEADER)], False,
                  seen({LIB: None, HEADER: None}, standing=("lib64",)))
    assert [op for op in plan.ops if op.action == MKDIR] == [Op(MKDIR, "include")]


@pytest.mark.parametrize("current, force, ops, conflicts, originals, record_changed", [
    (file(A), False, [Op(REMOVE, LIB, backup=True)], [], {}, False),  # unchanged: removed
    (file(C), False, [], [LIB], {}, False),  # changed since: conflict
    (file(C), True, [Op(REMOVE, LIB, backup=True)], [], {}, False),
    (None, False, [], [], {}, False),  # already gone
])
def test_file_the_archive_no_longer_has(current, force, ops, conflicts, originals,
                                        record_changed):
    old = manifest({LIB: file(A), HEADER: file(B)})
    plan = decide(ROOT, old, [archive_file(HEADER, B)], force,
                  seen({HEADER: file(B), LIB: current}))
    assert [op for op in plan.ops if op.path == LIB] == ops and plan.conflicts == conflicts
    assert plan.unchanged == ([] if force else [HEADER])
    assert plan.originals == originals and plan.record_changed is record_changed


def test_adopted_file_the_archive_no_longer_has_goes_to_the_store():
    old = manifest({LIB: file(A)}, {LIB: Original(file(A), True)})
    plan = decide(ROOT, old, [], False, seen({LIB: file(A)}))
    assert plan.ops == [Op(REMOVE, LIB, backup=True, original=True)]
    assert plan.originals == {LIB: Original(file(A))}


def test_adopted_file_gone_is_forgotten():
    old = manifest({LIB: file(A)}, {LIB: Original(file(A), True)})
    plan = decide(ROOT, old, [], False, seen({LIB: None}))
    assert plan.ops == [] and plan.originals == {}
    assert plan.record_changed and plan.changed


def test_actions_for_people():
    old = manifest({"lib64/old.so.1": file(C)})
    desired = [archive_file(), archive_file(HEADER, B), archive_link()]
    plan = decide(ROOT, old, desired, False,
                  seen({LIB: file(B), HEADER: file(B), LINK: None, "lib64/old.so.1": file(C)},
                       standing=("lib64",)))
    assert plan.actions() == [
        {"action": "create directory", "path": "include"},
        {"action": "back up", "path": LIB}, {"action": "replace", "path": LIB},
        {"action": "link", "path": LINK},
        {"action": "remove", "path": "lib64/old.so.1"},
        {"action": "adopt", "path": HEADER}]


def test_deciding_reads_nothing_from_the_root(tmp_path):
    """A real root that says the opposite of what was seen: the plan follows what was seen."""
    (tmp_path / "lib64" / "libcudnn.so.9.1.0").mkdir(parents=True)  # a directory in the way
    plan = decide(tmp_path, None, [archive_file()], False, seen({LIB: None}))
    assert [op.action for op in plan.ops] == [PUT]


# ---- install: properties over every combination for one path ------------------------------

CONTENTS = st.sampled_from([None, file(A), file(B), file(A, 0o644), link("x"), link("y"),
                            Content(OTHER)])
RECORDED = st.sampled_from([None, file(A), file(B), link("x")])
WAITING = st.sampled_from([None, Original(file(C)), Original(file(A), True)])
DESIRED = st.sampled_from([archive_file(), archive_file(sha=B), archive_link(LIB, "x")])


@settings(deadline=None, database=None)  # a busy machine is no failure
@given(DESIRED, RECORDED, CONTENTS, WAITING, st.booleans())
def test_every_combination_keeps_the_rules(desired, prev, current, waiting, force):
    old = manifest({LIB: prev} if prev else {}, {LIB: waiting} if waiting else {})
    plan = decide(ROOT, old, [desired], force, seen({LIB: current}))
    puts = [op for op in plan.ops if op.path == LIB]
    outcomes = [bool(puts), LIB in plan.conflicts, LIB in plan.unchanged, LIB in plan.adopted]
    assert sum(outcomes) == 1, plan  # one decision per path
    assert all(op.action == PUT for op in puts) and len(puts) <= 1
    if puts and current is not None:
        assert puts[0].backup  # nothing standing is ever overwritten without a backup
    if force:
        assert not plan.conflicts
    elif prev is not None and current is not None and not current.same(prev) \
            and not desired.matches(current):
        assert plan.conflicts == [LIB]  # changed since the tool wrote it: never touched
    if puts and current is not None and prev is None and waiting is None:
        # not the tool's: it is kept as an original, to come back on uninstall
        assert puts[0].original and plan.originals[LIB] == Original(current)
        assert plan.manual == [LIB]
    if plan.adopted:
        assert prev is None and waiting is None and not force and desired.matches(current)
        assert plan.originals[LIB] == Original(current, in_place=True)
    if waiting is not None and not waiting.in_place:
        assert plan.originals[LIB] == waiting  # a stored original is never lost
    if not puts and not plan.adopted:
        assert plan.originals == old.originals


# ---- uninstall ----------------------------------------------------------------------------

def test_uninstall_without_a_manifest_does_nothing():
    plan = decide_uninstall(ROOT, None, STORE, False, Observed())
    assert plan.ops == [] and not plan.changed


@pytest.mark.parametrize("current, force, ops, conflicts", [
    (file(A), False, [Op(REMOVE, LIB, backup=True)], []),
    (file(C), False, [], [LIB]),
    (file(C), True, [Op(REMOVE, LIB, backup=True)], []),
    (link("x"), False, [], [LIB]),
    (None, False, [], []),
])
def test_uninstall_installed_file(current, force, ops, conflicts):
    plan = decide_uninstall(ROOT, manifest({LIB: file(A)}, created_dirs=["lib64"]), STORE,
                            force, Observed({LIB: current}))
    assert plan.ops == ops + [Op(RMDIR, "lib64")]
    assert plan.conflicts == conflicts


def test_uninstall_leaves_a_file_found_in_place():
    plan = decide_uninstall(ROOT, manifest({LIB: file(A)}, {LIB: Original(file(A), True)}),
                            STORE, False, Observed())  # never looked at
    assert plan.kept == [LIB] and plan.ops == []
    assert plan.actions() == [{"action": "keep", "path": LIB}]


def test_uninstall_puts_originals_back():
    old = manifest({LIB: file(A)}, {LIB: Original(file(B))})
    plan = decide_uninstall(ROOT, old, STORE, False,
                            Observed({LIB: file(A)}, frozenset({f"{STORE}/{LIB}", LIB})))
    assert plan.ops == [Op(REMOVE, LIB, backup=True), Op(PUT, LIB, f"{STORE}/{LIB}")]


@pytest.mark.parametrize("force, ops, conflicts", [
    (False, [], [HEADER]),
    (True, [Op(PUT, HEADER, f"{STORE}/{HEADER}")], []),
])
def test_uninstall_original_where_something_new_stands(force, ops, conflicts):
    old = manifest({}, {HEADER: Original(file(B))})
    plan = decide_uninstall(ROOT, old, STORE, force,
                            Observed({}, frozenset({f"{STORE}/{HEADER}", HEADER})))
    assert plan.ops == ops and plan.conflicts == conflicts


def test_uninstall_original_missing_from_the_store_is_damage():
    old = manifest({}, {"include/a.h": Original(file(B)), HEADER: Original(file(C))})
    with pytest.raises(InstallFailed) as caught:
        decide_uninstall(ROOT, old, STORE, True, Observed({}, frozenset({f"{STORE}/include/a.h"})))
    assert caught.value.code == "state-damaged"
    assert f"the original {HEADER} is missing from {STORE}" in str(caught.value)


@settings(deadline=None, database=None)  # a busy machine is no failure
@given(st.lists(st.tuples(st.sampled_from([None, file(A), file(C), link("x")]),
                          st.sampled_from([None, Original(file(B)), Original(file(A), True)]),
                          st.booleans()), min_size=1, max_size=5),
       st.booleans())
def test_every_uninstall_keeps_the_rules(paths, force):
    names = [f"lib64/lib{i}.so.1" for i in range(len(paths))]
    old = manifest({n: file(A) for n in names},
                   {n: w for n, (_, w, _) in zip(names, paths) if w is not None})
    at = {n: c for n, (c, w, _) in zip(names, paths) if not (w and w.in_place)}
    standing = {f"{STORE}/{n}" for n, (_, w, stored) in zip(names, paths)
                if w and not w.in_place and stored}
    missing = [n for n, (_, w, stored) in zip(names, paths) if w and not w.in_place and not stored]
    if missing:
        with pytest.raises(InstallFailed, match=f"the original {missing[0]} is missing"):
            decide_uninstall(ROOT, old, STORE, force, Observed(at, frozenset(standing)))
        return
    plan = decide_uninstall(ROOT, old, STORE, force, Observed(at, frozenset(standing)))
    for n, (current, waiting, _) in zip(names, paths):
        removed = Op(REMOVE, n, backup=True) in plan.ops
        back = Op(PUT, n, f"{STORE}/{n}") in plan.ops
        if waiting is not None and waiting.in_place:
            assert plan.kept.count(n) == 1 and not removed and not back  # never touched
            continue
        assert n not in plan.kept
        assert removed == (current is not None and (force or current == file(A)))
        assert (n in plan.conflicts) == (current is not None and not removed)
        assert back == (waiting is not None)  # a stored original always goes back
        if removed and back:  # what the tool installed leaves before the original returns
            assert plan.ops.index(Op(REMOVE, n, backup=True)) < plan.ops.index(
                Op(PUT, n, f"{STORE}/{n}"))


# ---- looking at a real root ----------------------------------------------------------------

def _root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "lib64").mkdir(parents=True)
    (root / "lib64" / "libcudnn.so.9.1.0").write_bytes(b"\x7fELF by hand\n")
    os.symlink("libcudnn.so.9.1.0", root / "lib64" / "libcudnn.so.9")
    return root


def test_observe_install_sees_files_links_dirs_and_parents(tmp_path):
    root = _root(tmp_path)
    (root / "lib64" / "gone.so.1").write_bytes(b"old")
    old = manifest({"lib64/gone.so.1": file(A), "lib64/away.so.1": file(A)})
    got = observe_install(root, old, [LIB, LINK, HEADER])
    assert got.content(LIB) == Content(FILE, file_digest(root / LIB), 0o644)
    assert got.content(LINK) == link("libcudnn.so.9.1.0")
    assert got.content(HEADER) is None
    assert got.content("lib64/gone.so.1") == Content(FILE, file_digest(root / "lib64/gone.so.1"),
                                                     0o644)
    assert got.content("lib64/away.so.1") is None
    assert got.stands("lib64") and not got.stands("include")


def test_observe_install_stops_at_a_directory_in_the_way(tmp_path):
    root = _root(tmp_path)
    (root / "include" / "cudnn.h").mkdir(parents=True)
    got = observe_install(root, None, [HEADER, LIB])
    assert got.content(HEADER) == Content(DIR)
    assert LIB not in got.at  # not hashed: the plan refuses at the directory
    with pytest.raises(InstallFailed, match="directory-in-the-way|is a directory"):
        make_plan(root, None, [archive_file(HEADER), archive_file()], False)


def test_observe_install_raises_where_the_root_cannot_be_read(tmp_path):
    root = _root(tmp_path)
    (root / "include").write_text("a file where a directory belongs\n")
    with pytest.raises(NotADirectoryError):
        observe_install(root, None, [HEADER])


def test_make_plan_is_observe_then_decide(tmp_path):
    root = _root(tmp_path)
    desired = [Desired(LIB, FILE, sha256=A, mode=0o755, source=root / "stage" / LIB),
               Desired(LINK, SYMLINK, target="libcudnn.so.9.1.0", source=root / "stage" / LINK)]
    plan = make_plan(root, None, desired, False)
    assert plan.adopted == [LINK] and plan.manual == [LIB]
    assert plan.ops == [Op(PUT, LIB, f"stage/{LIB}", backup=True, original=True)]
    assert plan == decide(root, None, desired, False, observe_install(root, None, [LIB, LINK]))


def test_uninstall_plan_is_observe_then_decide(tmp_path):
    root = _root(tmp_path)
    (root / STORE / "include").mkdir(parents=True)
    (root / STORE / HEADER).write_text("/* the user's */\n")
    (root / "include").mkdir()
    (root / HEADER).write_text("/* put there since */\n")
    old = manifest({LIB: file(file_digest(root / LIB), 0o644), LINK: link("elsewhere")},
                   {HEADER: Original(file(B))}, created_dirs=[])
    got = observe_uninstall(root, old, STORE)
    assert got.stands(f"{STORE}/{HEADER}") and got.stands(HEADER)
    plan = uninstall_plan(root, old, STORE, False)
    assert plan.ops == [Op(REMOVE, LIB, backup=True)]
    assert plan.conflicts == [LINK, HEADER]
    assert plan == decide_uninstall(root, old, STORE, False, got)


# ---- deciding stays free of I/O --------------------------------------------------------------

IO_CALLS = {"open", "describe", "describe_known", "observe_install", "observe_uninstall",
            "lstat", "stat", "exists", "lexists", "is_dir", "is_file", "iterdir", "read_text",
            "read_bytes", "readlink", "listdir", "scandir", "file_digest", "manifest", "journal"}


@pytest.mark.parametrize("function", ["decide", "decide_uninstall"])
def test_the_decisions_call_nothing_that_looks_at_the_disk(function):
    import ast

    from cudnn_setup.state import plan as module

    tree = ast.parse(Path(module.__file__).read_text())
    body = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function)
    called = set()
    for node in ast.walk(body):
        if isinstance(node, ast.Call):
            f = node.func
            called.add(f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute)
                       else "?")
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id == "os":
            assert node.attr == "path", ast.unparse(node)
    assert called and not called & IO_CALLS, called & IO_CALLS
    assert "relpath" in called or function == "decide_uninstall"  # what it may use of os.path
