"""The one error type of the library; the CLI turns it into an exit code."""
from __future__ import annotations

USAGE = 2
ARCHIVE_REJECTED = 3
NO_CUDA_ROOT = 4
INSTALL_FAILED = 5
DOWNLOAD_FAILED = 6
VERIFY_FAILED = 1


class SetupError(Exception):
    """A failure the user can act on: one line of message, one line of hint."""

    exit_code = INSTALL_FAILED

    def __init__(self, message: str, hint: str = "", *, problems: list | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.problems = problems or []

    def to_dict(self) -> dict:
        return {"exit_code": self.exit_code, "message": self.message, "hint": self.hint}


class UsageError(SetupError):
    exit_code = USAGE


class ArchiveRejected(SetupError):
    exit_code = ARCHIVE_REJECTED


class NoCudaRoot(SetupError):
    exit_code = NO_CUDA_ROOT


class InstallFailed(SetupError):
    exit_code = INSTALL_FAILED


class DownloadFailed(SetupError):
    exit_code = DOWNLOAD_FAILED
