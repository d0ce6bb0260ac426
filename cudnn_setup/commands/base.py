"""What every command shares: its context (passed in, never read from globals) and the wrapper
that turns whatever happens into a Result.
"""
from __future__ import annotations

import functools
import os
import shutil
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional

from cudnn_setup.child import Runner
from cudnn_setup.errors import (DownloadFailed, InstallFailed, InternalError, Interrupted,
                                 NoCudaRoot, SetupError, UsageError, os_error)
from cudnn_setup.facts.cuda import CudaRoot, find_cuda_root
from cudnn_setup.report import Result
from cudnn_setup.settings import SYSTEM_CONFIG
from cudnn_setup.sources.pipconf import SYSTEM_DIRS as PIP_SYSTEM_DIRS
from cudnn_setup.text import escape
from cudnn_setup.urls import scrub

Progress = Callable[[int, Optional[int]], None]  # bytes done, bytes in all (None: unknown)


@dataclass(frozen=True)
class Context:
    """The outside world a command may look at, handed in by its caller."""

    env: Mapping[str, str]
    home: Path
    python: str  # the interpreter running the tool: the default for --python
    cwd: Optional[Path] = None  # the shell's directory, for relative paths in settings
    euid: int = 0
    # The machine's own facts: its filesystem's root (Jetson markers are read below it) and
    # `platform.machine()` (None: this machine's). Tests give a fake root and machine.
    host_root: Path = Path("/")
    machine: Optional[str] = None
    ld_conf_dir: Path = Path("/etc/ld.so.conf.d")
    ld_so_conf: Path = Path("/etc/ld.so.conf")
    ldconfig: Optional[str] = None  # the ldconfig to run; None: the system's (/sbin, /usr/sbin)
    lock_timeout: float = 300.0
    # Settings files (cudnn_setup.settings); user_config None: $XDG_CONFIG_HOME or ~/.config.
    system_config: Path = SYSTEM_CONFIG
    user_config: Optional[Path] = None
    # Makes a progress callback for a label ("downloading", "installing"), or None for none.
    progress: Callable[[str], Optional[Progress]] = field(default=lambda label: None)
    # Takes one line for a person about a step or a wait (a retry and why, a lock held by
    # another run); the CLI decides how it is shown. Never part of the Result.
    status: Callable[[str], None] = field(default=lambda line: None)
    # Runs this command's child processes and remembers what hung (child.Runner): one per
    # command, passed down to every check that starts a child, so a library or framework that
    # hangs costs one time limit per command. Killed whole when the command is interrupted.
    runner: Runner = field(default_factory=Runner)
    # Where pip's system-wide configuration lives (/etc/xdg, /etc; tests hand in their own) and
    # this machine's wheel platform tags (None: packaging's, for this machine).
    pip_system_dirs: tuple[Path, ...] = PIP_SYSTEM_DIRS
    wheel_tags: Optional[tuple[str, ...]] = None


def root_if_any(ctx: Context, cuda_root: Path | None) -> CudaRoot | None:
    """The CUDA root, for a command that can do without one (verify --lib-dir, list, bench):
    none found is fine unless --cuda-root named one."""
    try:
        return find_cuda_root(ctx.env, cuda_root)
    except NoCudaRoot:
        if cuda_root is not None:
            raise
        return None


def reading(ctx: Context, archive: Path):
    """The archive's bytes read, for the progress display (the archive's size as the total)."""
    try:
        total = archive.stat().st_size
    except OSError:
        total = None
    report = ctx.progress(f"reading {escape(archive.name)}")
    if report is None:
        return None
    return lambda done: report(done, total)


def include_needs_lib_dir(lib_dir: Path | None, include_dir: Path | None) -> None:
    """--include-dir names the headers of the cuDNN in --lib-dir; alone it would be ignored."""
    if include_dir is not None and lib_dir is None:
        raise UsageError("--include-dir is only used with --lib-dir (the root's cuDNN keeps its "
                         "headers in the root)", "add --lib-dir DIR for the cuDNN whose headers "
                         "these are, or leave --include-dir out")


def which(ctx: Context, program: str) -> str | None:
    """A program on the caller's PATH (not this process's)."""
    return shutil.which(program, path=ctx.env.get("PATH", os.defpath))


def command(name: str, fails_as: type[SetupError] = InstallFailed):
    """Run the body with a fresh Result; errors of any kind end up in it, never raised.

    An OSError that no step turned into a SetupError becomes one here, by errno, with the exit
    code of `fails_as`; whatever else escapes is a bug (exit 70, traceback kept). What the
    body recorded before the error (a committed install, its checks) stays in the Result.
    """

    def wrap(body: Callable[..., None]) -> Callable[..., Result]:
        @functools.wraps(body)
        def run(*args, **kwargs) -> Result:
            result = Result(name)
            ctx = next((a for a in args if isinstance(a, Context)), kwargs.get("ctx"))
            if ctx is not None and ctx.cwd is not None:  # every path taken as the user meant it
                args = tuple(_absolute(a, ctx.cwd) for a in args)
                kwargs = {k: _absolute(v, ctx.cwd) for k, v in kwargs.items()}
            try:
                body(result, *args, **kwargs)
            except SetupError as exc:
                result.error = exc
            except (KeyboardInterrupt, Interrupted):
                if ctx is not None:
                    ctx.runner.cancel()  # children still running on other threads
                result.error = interrupted(result)
            except Exception as exc:  # requests' errors are OSErrors too: asked first
                result.error = library_error(exc, name) or (
                    os_error(exc, f"{name} failed", kind=fails_as,
                             outcome=committed_outcome(result))
                    if isinstance(exc, OSError) else internal_error(exc))
            return result

        return run

    return wrap


def _absolute(value, cwd: Path):
    """A relative path given by the user, joined to the directory it was given in.

    Library code checks paths from roots down (the loader's search, ELF RUNPATHs, the state's
    containment); a relative one would be read against whatever directory each part assumes."""
    if isinstance(value, Path) and not value.is_absolute():
        return cwd / value
    if isinstance(value, (list, tuple)) and any(isinstance(v, Path) for v in value):
        return type(value)(_absolute(v, cwd) for v in value)
    return value


def committed_outcome(result: Result) -> str:
    """What a failure after the command's change leaves; only said when it is known."""
    if result.changed:
        return "this came after the change was committed, which stands"
    return ""


def library_error(exc: Exception, name: str) -> SetupError | None:
    """A third-party library's error that means the outside world failed, not the tool."""
    requests = sys.modules.get("requests")  # only loaded when something was downloaded
    if requests is not None and isinstance(exc, requests.RequestException):
        # requests' words carry the URL, query and user-info included: redacted
        return DownloadFailed(f"{name} failed: the download broke off ({type(exc).__name__}: "
                              f"{escape(scrub(str(exc)[:600]))[:300]})", "run again; a partial download is "
                              "resumed", code="download-failed")
    return None


def internal_error(exc: BaseException) -> InternalError:
    """A bug: one line saying so, the traceback kept for a report."""
    return InternalError(f"internal error: {type(exc).__name__}: "
                         f"{escape(scrub(str(exc)[:1000]))[:500]}",
                         "this is a bug in cudnn-setup; please report it with the traceback",
                         traceback=traceback.format_exc())


def interrupted(result: Result) -> SetupError:
    if result.changed:
        return InstallFailed("interrupted after the change was committed; it stands",
                             "run `cudnn-setup verify` to check it", code="interrupted")
    return InstallFailed("interrupted; nothing was changed (a change in progress was rolled back)",
                         "run the command again", code="interrupted")
