"""The `files` layer: the cuDNN's files as installed, read from disk only."""
from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING

from cudnn_setup.installation.model import Installation
from cudnn_setup.installation.locate import UNMANAGED
from cudnn_setup.facts import clients
from cudnn_setup.facts import cudnn as gen
from cudnn_setup.state.files import describe, describe_known
from cudnn_setup.state.manifest import FILE, SYMLINK
from cudnn_setup.state.view import command_line
from cudnn_setup.report import FAIL, PASS, WARN, Check
from cudnn_setup.text import escape, plural

if TYPE_CHECKING:
    from cudnn_setup.checks.check_facts import CheckFacts


def check_files(inst: Installation, facts: CheckFacts) -> Check:
    """Every file and link the record names as it was installed (`facts.deep`: hashed again,
    not trusted while stat says it is unchanged), the composition whole, nothing unreadable."""
    root = inst.root.path
    if inst.header_file is None and not inst.libraries:
        return Check("files", FAIL, f"no cuDNN in {root}: neither include/cudnn.h nor "
                     f"{inst.lib_dir.name}/libcudnn.so.* exists",
                     {"hint": f"run `{command_line('install ARCHIVE', root)}`"})
    problems: list[str] = []
    changed: list[str] = []
    entries = inst.manifest.files if inst.manifest else []
    links = soname_link_problems(inst)
    problems += links.values()
    for entry in entries:
        path = root / entry.path
        if _where(path) in links:
            continue
        current = describe(path, entry.content.hashes) if facts.deep else describe_known(path, entry)
        if current is None:
            problems.append(f"{entry.path} is missing")
        elif not entry.content.same(current):
            changed.append(entry.path)
        elif entry.type == FILE and ((current.mode or 0) & 0o444) != 0o444:
            problems.append(f"{entry.path} is not readable by everyone")
        elif entry.type == SYMLINK and not path.exists():
            problems.append(f"{entry.path} -> {entry.content.target} is a broken link")
    if inst.header_file is None:
        problems.append("include/cudnn.h is missing")
    comp = inst.composition() if inst.generation else None
    if comp is not None:
        problems += [f"{stem} is missing from {inst.lib_dir} ({comp.reason(stem)})"
                     for stem in comp.missing]
    for lib in inst.libraries:
        mode = stat.S_IMODE(os.stat(lib).st_mode)
        if mode & 0o444 != 0o444 and not any(lib.name in p for p in problems):
            problems.append(f"{lib.name} is not readable by everyone")
    recorded = {_where(root / entry.path) for entry in entries}  # said above, by its record
    for link in sorted(inst.lib_dir.glob("libcudnn*.so*")) if inst.lib_dir.is_dir() else []:
        if _where(link) in links or _where(link) in recorded:
            continue
        if link.is_symlink() and not link.exists():
            problems.append(f"{link.name} -> {os.readlink(link)} is a broken link")
    problems = list(dict.fromkeys(problems))
    others = inst.other_versions()
    data = {"changed_since_install": changed, "problems": problems,
            "managed": inst.manifest is not None, "selected_by": inst.selected_by,
            "other_versions": others,
            "composition": comp.to_dict() if comp else None}
    if changed:
        problems.append("changed since cudnn-setup installed them: " + ", ".join(
            _with_callers(path, inst.generation) for path in changed))
    if problems:
        ours = {entry.path for entry in entries}
        links_ours = recorded & set(links)
        if changed or links_ours or any(p.split(" ", 1)[0] in ours for p in problems):
            # the damage is in what the tool installed: the manifest can put it back
            data["hint"] = (f"run `{escape(command_line('repair', root))}` to put "
                            "back what cudnn-setup installed")
        return Check("files", FAIL, "; ".join(problems), data)
    origin = (f"{plural(len(entries), 'file and link', 'files and links')} as installed by cudnn-setup" if inst.manifest
              else f"headers and {plural(len(inst.libraries), 'library')} present ({UNMANAGED}; no "
                   "manifest to compare against)")
    main = inst.library("libcudnn")
    if others and main is not None:
        listing = "; ".join(f"{v} ({plural(len(names), 'library')})"
                            for v, names in sorted(others.items()))
        return Check("files", WARN, f"{origin}; {inst.lib_dir} also holds other cuDNN versions, "
                     f"which libcudnn.so does not select: {listing} (judged: {main.name}, "
                     f"selected by {inst.selected_by})", data)
    return Check("files", PASS if inst.manifest else WARN, origin, data)


def _with_callers(path: str, generation: str | None) -> str:
    """A changed file, with who calls the cuDNN 9 library it is (the clients whose calls may
    now run code that is not NVIDIA's)."""
    stem = gen.library_stem(os.path.basename(path)) if generation == gen.V9 else None
    who = clients.callers_of(stem) if stem else None
    return f"{path} (called by {who})" if who else path


def soname_link_problems(inst: Installation) -> dict:
    """{link path: problem} for each sub-library whose SONAME link (libcudnn_ops.so.9) is
    missing or leads to another file than the sub-library of this release: damage to the
    clients that load by that name, which facts/clients.link_clients names."""
    out: dict = {}
    if inst.generation not in (gen.V8_EARLY, gen.V8_LATE, gen.V9):
        return out
    for lib in inst.libraries:
        stem = gen.library_stem(lib.name)
        soname = gen.expected_soname(stem or "", gen.library_file_version(lib.name),
                                     inst.generation)
        if not stem or stem == "libcudnn" or not soname or soname == lib.name:
            continue
        link = lib.parent / soname
        if not link.is_symlink() and not link.exists():
            what = f"{soname} (the link to {lib.name}) is missing"
        elif os.path.realpath(link) != os.path.realpath(lib):
            target = os.readlink(link) if link.is_symlink() else "a file of its own"
            what = f"{soname} leads to {target}, not to {lib.name}"
        else:
            continue
        out[_where(link)] = f"{what}: {clients.link_clients(stem, inst.generation)}"
    return out


def _where(path) -> tuple[str, str]:
    """A path by its real directory and its own name (lib64 may be a link to lib)."""
    return os.path.realpath(os.path.dirname(path)), os.path.basename(path)
