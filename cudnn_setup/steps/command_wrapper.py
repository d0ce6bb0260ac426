"""The wrapper every command runs in: whatever happens ends up in the command's Result (an
error of the tool, an OSError by errno, an interrupt, a bug as exit 70), never raised.
"""
from __future__ import annotations

import functools
import sys
import traceback
from pathlib import Path
from typing import Callable

from cudnn_setup.child import waited_for
from cudnn_setup.errors import (COMMITTED_STANDS, DownloadFailed, InstallFailed, InternalError,
                                 Interrupted, LeftUnfinished, LOOKS_ONLY, SetupError,
                                 interruption, no_thread, os_error, rolled_back_or_not)
from cudnn_setup.orphans import Subreaper
from cudnn_setup.report import Result
from cudnn_setup.state.view import command_line
from cudnn_setup.steps.context import Context
from cudnn_setup.text import escape
from cudnn_setup.urls import scrub


def command(name: str, fails_as: type[SetupError] = InstallFailed):
    """Run the body with a fresh Result; errors of any kind end up in it, never raised.

    An OSError that no step turned into a SetupError becomes one here, by errno, with the exit
    code of `fails_as`; whatever else escapes is a bug (exit 70, traceback kept). What the
    body recorded before the error (a committed install, its checks) stays in the Result.
    Exit 5 says "rolled back": an error after a committed change (which stands), or of a
    command that only looks (errors.LOOKS_ONLY: it changes nothing), exits 1 instead, its code
    kept.
    The body runs with the process as a child subreaper (orphans.py): whatever the code its
    children ran left running, daemons out of their sessions included, is ended with it.
    """

    read_only = name in LOOKS_ONLY

    def wrap(body: Callable[..., None]) -> Callable[..., Result]:
        @functools.wraps(body)
        def run(*args, **kwargs) -> Result:
            result = Result(name)
            ctx = next((a for a in args if isinstance(a, Context)), kwargs.get("ctx"))
            if ctx is not None and ctx.cwd is not None:  # every path taken as the user meant it
                args = tuple(_absolute(a, ctx.cwd) for a in args)
                kwargs = {k: _absolute(v, ctx.cwd) for k, v in kwargs.items()}
            if ctx is not None:
                ctx.runner.begin()
            reaper = Subreaper(waited_for).start()
            try:
                body(result, *args, **kwargs)
            except SetupError as exc:
                result.error = exc
                if isinstance(exc, LeftUnfinished):  # the root may hold part of the change
                    result.changed = True
            except (KeyboardInterrupt, Interrupted):
                if ctx is not None:
                    ctx.runner.cancel()  # children still running on other threads
                result.error = interrupted(result, read_only)
            except Exception as exc:  # requests' errors are OSErrors too: asked first
                exc = no_thread(exc)
                result.error = library_error(exc, name) or (
                    os_error(exc, f"{name} failed", kind=fails_as,
                             outcome=committed_outcome(result))
                    if isinstance(exc, OSError) else internal_error(exc))
            finally:
                # A child still running now is one no step waits for (a probe started ahead,
                # then a refusal): it runs in a session of its own, so leaving would orphan it.
                if _end(ctx, reaper) and result.error is None:
                    result.error = interrupted(result, read_only)
                if result.error is not None:
                    result.error = rolled_back_or_not(result.error, name, result.changed)
            return result

        return run

    return wrap


def _end(ctx: Context | None, reaper: Subreaper) -> bool:
    """The command's children killed and their threads' scratch dirs removed, then what they
    left running out of their sessions; whether a signal came meanwhile. A SIGTERM or Ctrl-C
    here does not cut the clean-up short (the runner's end waits up to seconds for threads):
    it is finished first, and the result says it was interrupted, with what it had done."""
    signalled = False
    while ctx is not None:
        try:
            ctx.runner.end()  # again after a signal: it only kills, waits and removes
            break
        except (KeyboardInterrupt, Interrupted):
            signalled = True
    try:
        reaper.end()
    except (KeyboardInterrupt, Interrupted):
        signalled = True  # its own `finally` leaves the process's state as it found it
    return signalled


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
    return COMMITTED_STANDS if result.changed else ""


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


def interrupted(result: Result, read_only: bool = False) -> SetupError:
    if result.command == "download" and not result.changed:
        # nothing is rolled back: the bytes received stay in the .part file, to be resumed
        return InstallFailed("interrupted before the download finished; the bytes received "
                             "are kept beside the file, nothing else was written",
                             "run the command again: it resumes the download",
                             code="interrupted")
    return interruption(result.changed, command_line("verify", result.cuda_root)
                        if result.cuda_root else "cudnn-setup verify", read_only)
