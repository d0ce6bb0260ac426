"""The one error type of the library, with its exit code and a stable machine-readable code.

The CLI turns a SetupError into its exit code and its JSON `error` object; provisioning scripts
key off `code`, never off the message text.
"""
from __future__ import annotations

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


class Interrupted(BaseException):
    """Ctrl-C or SIGTERM, raised where the program is, so transactions roll back."""
