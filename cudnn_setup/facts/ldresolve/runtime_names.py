"""The sonames a library keeps for dlopen (read from its read-only data) and the names it
tries for each: cuDNN's sub-libraries with its own version, templates with its CUDA's."""
from __future__ import annotations

import os
import re
from typing import BinaryIO, Sequence

from msgspec import Struct

from cudnn_setup.facts.cudnn import OPENED_FIRST, V9, names_opened, so_base
from cudnn_setup.facts.elf import PARSE_ERRORS, read_only_ranges
from cudnn_setup.untrusted import open_regular

# A soname as code names it for dlopen: "libz.so.1", "libcudnn_ops.so", and the templates
# cuDNN fills in itself ("libnvrtc.so.%d", "libnvrtc.so.%d.%d"). Whole NUL-terminated strings
# only, so error messages that mention a library are not taken for one.
_RUNTIME_NAME = re.compile(rb"(lib[A-Za-z0-9_+\-]{1,200}\.so(?:\.(?:\d{1,9}|%d)){0,4})\x00")
MAX_RUNTIME_NAMES = 256
_SCAN_CHUNK = 1 << 20
# Read-only data scanned per library at most: cuDNN 9's largest .rodata is far smaller; a file
# whose headers claim more (or a huge file named like a library) is not read past this.
MAX_SCAN_BYTES = 1 << 30


def runtime_names(path: str | os.PathLike, limit: int = MAX_RUNTIME_NAMES) -> list[str]:
    """Sonames a library keeps as whole strings in its read-only data, as code that dlopens
    them at run time does (cuDNN: "libcublasLt.so.12", "libz.so.1", "libnvrtc.so.%d",
    "libcudnn_ops.so"). Read in chunks, never past the file's end; at most `limit` distinct
    names, in file order; [] for a file that is not a readable ELF object."""
    path = os.fspath(path)
    found: dict[str, None] = {}
    try:
        f = open_regular(path)
    except OSError:
        return []
    with f:
        size = os.fstat(f.fileno()).st_size
        try:
            ranges = read_only_ranges(f, size)
        except PARSE_ERRORS:
            return []
        try:
            budget = MAX_SCAN_BYTES
            for offset, length in ranges:
                length = min(length, budget)
                _scan(f, offset, offset + length, found, limit)
                budget -= length
                if len(found) >= limit or budget <= 0:
                    break
        except OSError:
            pass  # a read error part way: the names found so far
    return list(found)[:limit]


def _scan(f: BinaryIO, offset: int, end: int, found: dict[str, None], limit: int) -> None:
    f.seek(offset)
    carry = b""
    pos = offset
    while pos < end:
        chunk = f.read(min(_SCAN_CHUNK, end - pos))
        if not chunk:
            break
        pos += len(chunk)
        buf = carry + chunk
        last = buf.rfind(b"\x00")
        if last < 0:
            carry = buf[-256:] if len(buf) <= 256 else b"\xff"
            continue
        for m in _RUNTIME_NAME.finditer(buf, 0, last + 1):
            if m.start() and buf[m.start() - 1]:
                continue  # the tail of a longer string
            found.setdefault(m.group(1).decode("ascii"), None)
            if len(found) >= limit:
                return
        tail = buf[last + 1:]
        carry = tail if len(tail) <= 256 else b"\xff"  # too long to be a name


class Versions(Struct, frozen=True):
    """Numbers the library fills into the names it builds: cuDNN's own and its CUDA's."""

    cudnn: str | None = None  # "9.1.0"
    cuda: str | None = None  # "12.4"


def runtime_requests(names: Sequence[str], requester_soname: str | None,
                     versions: Versions = Versions()) -> list[tuple[str, tuple[str, ...]]]:
    """Group embedded names by library into (label, candidates tried in order).

    cuDNN 9 builds a sub-library's name from its base ("libcudnn_ops.so") and its own
    version, trying .M.m.p, .M.m, .M and the bare name (facts/cudnn.names_opened);
    other templates ("libnvrtc.so.%d") take the CUDA version it was built for, then the
    bare name is the fallback."""
    own = requester_soname or ""
    groups: dict[str, list[str]] = {}
    for name in names:
        if name == own:
            continue
        groups.setdefault(so_base(name), []).append(name)
    own_version = None
    if versions.cudnn:
        own_version = versions.cudnn
    elif re.fullmatch(r"libcudnn\w*\.so\.\d+(?:\.\d+)*", own):
        own_version = own.split(".so.", 1)[1]
    out = []
    for stem, members in groups.items():
        candidates: list[str] = []
        for name in members:
            if "%d" in name:
                filled = _fill(name, versions.cuda)
                if filled:
                    candidates.append(filled)
            elif name != stem:
                candidates.append(name)
        if stem in members:
            if stem.startswith("libcudnn") and own_version:
                candidates += names_opened(stem[:-len(".so")], own_version, V9)
            candidates.append(stem)
        candidates = list(dict.fromkeys(candidates))
        if candidates:
            out.append((candidates[0], tuple(candidates)))
    # cuDNN opens graph, then ops, before the parts that list them as DT_NEEDED, whatever
    # order the names sit in its binary (9.24: ops, graph, cnn, adv)
    first = [f"{stem}.so" for stem in OPENED_FIRST[V9]]
    out.sort(key=lambda r: first.index(so_base(r[0])) if so_base(r[0]) in first else len(first))
    return out


def _fill(template: str, version: str | None) -> str | None:
    if not version:
        return None
    parts = version.split(".")
    count = template.count("%d")
    if count > len(parts):
        return None
    for p in parts[:count]:
        template = template.replace("%d", p, 1)
    return template
