"""The traceback of a bug (exit 70), kept for its report: in the user's own cache directory, never
a shared temporary directory that another user could have prepared, readable by the user alone,
and without the secrets the command line or the error held (header values, cookies, tokens,
URLs' passwords).
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from cudnn_setup.private_dirs import open_private_dir

# `--header` values are secrets whatever their names; these look like secrets wherever they are.
# Every repetition is bounded or followed by nothing that can fail, so matching stays linear.
_WHOLE_VALUE = re.compile(r"(?i)\b((?:proxy-)?authorization|(?:set-)?cookie)"
                          r"(['\"]?[ \t]{0,8}[:=][ \t]*['\"]?)[^\r\n'\"]+")
_NAMED_VALUE = re.compile(r"(?i)(token|secret|passw(?:or)?d|api[-_]?key)([\w-]{0,40}"
                          r"[ \t]{0,8}[:=][ \t]{0,8})[^\s'\",;&]+")
_SCHEME_VALUE = re.compile(r"(?i)\b(bearer|basic|digest)([ \t]{1,8})[A-Za-z0-9._~+/=-]{4,}")
HIDDEN = "…"
HEADER_OPTION = "--header"


def scrub_argv(argv: list[str]) -> list[str]:
    """The command line with each --header value hidden (the header's name kept)."""
    out, hide_next = [], False
    for word in argv:
        if hide_next:
            out.append(_name_only(word))
            hide_next = False
        elif word == HEADER_OPTION:
            out.append(word)
            hide_next = True
        elif word.startswith(HEADER_OPTION + "="):
            out.append(f"{HEADER_OPTION}={_name_only(word.partition('=')[2])}")
        else:
            out.append(word)
    return out


def header_values(argv: list[str]) -> list[str]:
    """The values of the --header options given (to be hidden wherever they appear)."""
    values, take = [], False
    for word in argv:
        if take:
            values.append(word)
        elif word.startswith(HEADER_OPTION + "="):
            values.append(word.partition("=")[2])
        take = word == HEADER_OPTION
    return [v.partition(":")[2].strip() or v for v in values]


def _name_only(header: str) -> str:
    name, colon, _ = header.partition(":")
    return f"{name}: {HIDDEN}" if colon else HIDDEN


def scrub(text: str, secrets: list[str]) -> str:
    """`text` with `secrets` (exact strings) and whatever looks like a credential hidden."""
    from cudnn_setup.urls import scrub as scrub_urls

    for secret in sorted(set(secrets), key=len, reverse=True):
        if len(secret) >= 3:
            text = text.replace(secret, HIDDEN)
    for pattern in (_WHOLE_VALUE, _NAMED_VALUE, _SCHEME_VALUE):
        text = pattern.sub(lambda m: m.group(1) + m.group(2) + HIDDEN, text)
    return scrub_urls(text)


def report_text(version: str, argv: list[str], traceback: str) -> str:
    secrets = header_values(argv)
    line = " ".join(scrub(word, secrets) for word in scrub_argv(argv))
    return f"cudnn-setup {version}\n{line}\n\n{scrub(traceback, secrets)}"


def cache_dir(env, home: Path) -> Path:
    """The user's cache directory: $XDG_CACHE_HOME when it is absolute (the XDG rule), else
    ~/.cache."""
    base = env.get("XDG_CACHE_HOME") or ""
    return Path(base) if os.path.isabs(base) else home / ".cache"


def save(directory: Path, name: str, text: str, euid: int) -> Path:
    """Write `text` as `directory/name`, mode 0600 whatever the umask, the directory made 0700
    if missing. A directory that is a link, is not the user's, or that others may write is not
    used (OSError, saying why): a file there could be read, replaced or planted by them."""
    dir_fd = open_private_dir(directory, euid)
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600, dir_fd=dir_fd)
        try:
            os.fchmod(fd, 0o600)
            # bytes as they were: arguments and paths may hold any byte
            data = text.encode("utf-8", "surrogateescape")
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
    finally:
        os.close(dir_fd)
    return directory / name
