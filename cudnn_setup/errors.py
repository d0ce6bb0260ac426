"""The one error type of the library, with its exit code and a stable machine-readable code.

The CLI turns a SetupError into its exit code and its JSON `error` object; provisioning scripts
key off `code`, never off the message text.
"""
from __future__ import annotations

import errno
import os
import re


VERIFY_FAILED = 1
USAGE = 2
ARCHIVE_REJECTED = 3
NO_CUDA_ROOT = 4
INSTALL_FAILED = 5
DOWNLOAD_FAILED = 6
INTERNAL = 70


class SetupError(Exception):
    """A failure the user can act on: one line of message, one line of hint."""

    exit_code = INSTALL_FAILED
    default_code = "install-failed"

    def __init__(self, message: str, hint: str = "", *, problems: list | None = None,
                 code: str | None = None):
        # A message may quote what a manifest, an index or a server said (`not a plain relative
        # path: 'http://user:password@…'`): URLs in it lose their secrets here, whoever wrote it.
        # Imported here: `--version` and usage errors load no URL parsing.
        from cudnn_setup.urls import scrub
        message, hint = scrub(message), scrub(hint)
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.problems = problems or []
        self.code = code or self.default_code

    def to_dict(self) -> dict:
        out = {"exit_code": self.exit_code, "code": self.code, "message": self.message,
               "hint": self.hint}
        if self.problems:
            out["problems"] = [p.to_dict() for p in self.problems]
        return out


class UsageError(SetupError):
    exit_code = USAGE
    default_code = "usage"


class ArchiveRejected(SetupError):
    exit_code = ARCHIVE_REJECTED
    default_code = "archive-rejected"


class NoCudaRoot(SetupError):
    exit_code = NO_CUDA_ROOT
    default_code = "no-cuda-root"


class InstallFailed(SetupError):
    exit_code = INSTALL_FAILED
    default_code = "install-failed"


class NothingRolledBack(SetupError):
    """A failure that rolled nothing back, so not exit 5: a change that was committed and
    stands (what came after it failed, or was interrupted), or a command that only looks
    (verify, doctor, list, inspect) and could not finish. Its `code` stays the cause's
    (LeftUnfinished, a transaction that could not be settled either way, has its own)."""

    exit_code = VERIFY_FAILED
    default_code = "install-failed"  # never used alone: `of` keeps the cause's code

    @classmethod
    def of(cls, exc: SetupError) -> "NothingRolledBack":
        return cls(exc.message, exc.hint, problems=exc.problems, code=exc.code)


# The commands that only look: they never write to a root, so they never roll anything back.
# bench is one: it runs Theano and cuDNN where verify does, and writes nowhere but scratch.
LOOKS_ONLY = frozenset({"verify", "doctor", "list", "inspect", "bench"})


def rolled_back_or_not(error: SetupError, command: str, changed: bool) -> SetupError:
    """Exit 5 says "rolled back": the same error after a committed change (which stands), or
    from a command that only looks (which changes nothing), exits 1 instead, its code kept."""
    if error.exit_code == INSTALL_FAILED and (changed or command in LOOKS_ONLY):
        return NothingRolledBack.of(error)
    return error


class LeftUnfinished(NothingRolledBack):
    """A transaction that failed and could be neither rolled back nor shown to be committed
    (the state dir could not be read back, or the rollback itself failed): nothing was rolled
    back for sure, so exit 1, and the command says `changed` (the root may hold part of the
    change). The journal stays on disk for the next run's recovery."""

    default_code = "transaction-unfinished"


class DownloadFailed(SetupError):
    exit_code = DOWNLOAD_FAILED
    default_code = "download-failed"


class InternalError(SetupError):
    """A bug: something no command path expected. The traceback is kept for a report."""

    exit_code = INTERNAL
    default_code = "internal"

    def __init__(self, message: str, hint: str = "", *, traceback: str = ""):
        super().__init__(message, hint)
        self.traceback = traceback
        self.saved = False  # the traceback was written to a file and the message says where


class Interrupted(BaseException):
    """Ctrl-C or SIGTERM, raised where the program is, so transactions roll back."""


# What an OSError means to the person who has to fix it, by errno: (code, what, hint). `what`
# names the file when the system named one ({path}); hints say what to do.
_OS_ERRORS = {
    errno.EACCES: ("permission-denied", "permission denied{: path}",
                   "run as a user with access to {path} (e.g. with sudo), or choose a location "
                   "you own"),
    errno.ENOSPC: ("disk-full", "no space left on the device{ holding path}",
                   "free some space on that filesystem, then run again"),
    errno.EDQUOT: ("disk-full", "disk quota exceeded{ writing path}",
                   "free some space (or raise the quota) on that filesystem, then run again"),
    errno.EFBIG: ("disk-full", "File too large{: path} (over the filesystem's or the process's "
                  "file size limit, ulimit -f)", "free some space or raise the limit, then run "
                  "again"),
    errno.EROFS: ("read-only-filesystem", "read-only filesystem{: path}",
                  "remount it read-write, or choose a location on a writable filesystem"),
    errno.ENAMETOOLONG: ("name-too-long", "file name too long{: path}",
                         "use a shorter path (each name in it may have at most 255 bytes, the "
                         "whole path 4095)"),
    errno.EIO: ("io-error", "input/output error{ on path}",
                "the disk or filesystem reports an error (see `dmesg`); fix it, then run again"),
}
# A thread that could not be started (ProcessLimit, made by no_thread): by its class, not by
# EAGAIN, which an O_NONBLOCK open meeting another process's lease says too.
_PROCESS_LIMIT = ("process-limit", "no more processes or threads could be started (Resource "
                  "temporarily unavailable)", "raise the limit on processes and threads "
                  "(ulimit -u; a container's or cgroup's pids.max), or run it with fewer "
                  "processes about")
_OS_ERRORS[errno.EPERM] = _OS_ERRORS[errno.EACCES]
_PATH_PART = re.compile(r"\{([^{}]*)path\}")


# What a failure after a command's change leaves, said beside the failure
COMMITTED_STANDS = "this came after the change was committed, which stands"


def interruption(changed: bool, verify: str = "cudnn-setup verify",
                 read_only: bool = False) -> SetupError:
    """What a Ctrl-C or SIGTERM left, in words: nothing (a command that only looks, or one
    interrupted before it began, which is why this module holds it: light enough to say so
    while the command's own modules are still loading), a rollback, or a committed change,
    which `verify` (the command line) checks."""
    if read_only:
        return InstallFailed("interrupted; nothing was changed", "run the command again",
                             code="interrupted")
    if changed:
        return InstallFailed("interrupted after the change was committed; it stands",
                             f"run `{verify}` to check it", code="interrupted")
    return InstallFailed("interrupted; nothing was changed (a change in progress was rolled back)",
                         "run the command again", code="interrupted")


class ProcessLimit(OSError):
    """No thread could be started: the machine's limit on processes and threads."""


def no_thread(exc: BaseException | None) -> BaseException | None:
    """A thread that could not be started, as what it is: the machine's limit on processes and
    threads (CPython says so with a RuntimeError of these words)."""
    if type(exc) is RuntimeError and str(exc).startswith("can't start new thread"):
        return ProcessLimit(errno.EAGAIN, os.strerror(errno.EAGAIN))
    return exc


def os_error(exc: OSError, action: str = "", *, kind: type[SetupError] = InstallFailed,
             outcome: str = "") -> SetupError:
    """The SetupError for an OSError: a stable code and a hint chosen by errno, never by text.

    `action` says what was being done ("install failed"); `outcome` what state that left
    ("nothing was changed"), and is only given by a caller who knows it.
    """
    from cudnn_setup.text import escape

    names = [n for n in (exc.filename, exc.filename2) if n is not None]
    path = " -> ".join(escape(os.fsdecode(n)) if isinstance(n, (str, bytes)) else escape(str(n))
                       for n in names)
    known = _PROCESS_LIMIT if isinstance(exc, ProcessLimit) else _OS_ERRORS.get(exc.errno or 0)
    if known:
        code, what, hint = known
        what = _PATH_PART.sub(lambda m: f"{m.group(1)}{path}" if path else "", what)
        hint = hint.replace("{path}", path or "it")
    else:
        code = "os-error"
        reason = exc.strerror or type(exc).__name__
        what = f"{reason}: {path}" if path else escape(reason)
        hint = f"fix the problem with {path}, then run again" if path else "fix it, then run again"
    message = f"{action}: {what}" if action else what
    if outcome:
        message += f"; {outcome}"
    return kind(message, hint, code=code)
