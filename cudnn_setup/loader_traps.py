"""Files on LD_LIBRARY_PATH that make the dynamic loader wait forever: a FIFO (or a device)
named like a shared object. ld.so opens each candidate with a blocking open(2) and reads its
header, so a FIFO named `libz.so.1` in a directory on LD_LIBRARY_PATH stops every program that
loads libz.so.1 (the tool's own Python importing zlib, gcc, Theano) before it runs a line,
where no time limit of its own can help it.

The program itself, started in such an environment, starts itself again at once without the
directories that hold one (`cli.console_main`); the user's value is handed down to the new
process and is what every command looks at. A child whose loader path holds one is not
started (child.Runner): it would only wait out its time limit.

Standard library only, and cheap: this runs before anything else is imported.
"""
from __future__ import annotations

import os
import re
import stat

_LIBRARY_NAME = re.compile(r".*\.so(?:\.[^/]*)?\Z")  # what ld.so is asked to open by name
_BLOCKING = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"))


def directories(value: str | None) -> list[str]:
    """LD_LIBRARY_PATH's directories as ld.so reads them: ':' or ';' separated, an empty entry
    the working directory."""
    if not value:
        return []
    return [entry or "." for entry in re.split(r"[:;]", value)]


def traps(value: str | None) -> list[tuple[str, str]]:
    """(path, what it is) of each file named like a shared object in the directories of the
    LD_LIBRARY_PATH `value` that opening or reading could block on, links followed."""
    return [trap for directory in dict.fromkeys(directories(value)) for trap in _scan(directory)]


def without_traps(value: str) -> tuple[str | None, list[tuple[str, str]]]:
    """The LD_LIBRARY_PATH `value` without the directories that hold a trap (None when none is
    left), and the traps; `value` itself when there is none."""
    found = {d: _scan(d) for d in dict.fromkeys(directories(value))}
    if not any(found.values()):
        return value, []
    kept = [entry for entry in re.split(r"[:;]", value) if not found[entry or "."]]
    return (":".join(kept) or None), [trap for traps in found.values() for trap in traps]


def _scan(directory: str) -> list[tuple[str, str]]:
    found = []
    try:
        entries = list(os.scandir(directory))
    except (OSError, ValueError):
        return found
    for entry in entries:
        if not _LIBRARY_NAME.match(entry.name):
            continue
        try:
            if entry.is_file() or entry.is_dir():  # from the directory entry where it can
                continue
            mode = os.stat(entry.path).st_mode
        except (OSError, ValueError):
            continue
        what = next((what for test, what in _BLOCKING if test(mode)), None)
        if what is not None:
            found.append((entry.path, what))
    return found


def say(found: list[tuple[str, str]]) -> str:
    """The words for the traps `found`, for a check's detail."""
    path, what = found[0]
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return (f"{path} on LD_LIBRARY_PATH is {what}{more}: a program that loads "
            f"{os.path.basename(path)} would wait on it forever; remove it")
