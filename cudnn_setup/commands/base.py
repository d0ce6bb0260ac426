"""What every command shares: its context (passed in, never read from globals) and the wrapper
that turns whatever happens into a Result.
"""
from __future__ import annotations

import functools
import os
import shutil
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional

from cudnn_setup.errors import InstallFailed, InternalError, Interrupted, SetupError
from cudnn_setup.report import Result

Progress = Callable[[int, Optional[int]], None]  # bytes done, bytes in all (None: unknown)


@dataclass(frozen=True)
class Context:
    """The outside world a command may look at, handed in by its caller."""

    env: Mapping[str, str]
    home: Path
    python: str  # the interpreter running the tool: the default for --python
    euid: int = 0
    ld_conf_dir: Path = Path("/etc/ld.so.conf.d")
    ld_so_conf: Path = Path("/etc/ld.so.conf")
    lock_timeout: float = 300.0
    # Settings files (cudnn_setup.settings); user_config None: $XDG_CONFIG_HOME or ~/.config.
    system_config: Path = Path("/etc/cudnn-setup.conf")
    user_config: Optional[Path] = None
    # Makes a progress callback for a label ("downloading", "installing"), or None for none.
    progress: Callable[[str], Optional[Progress]] = field(default=lambda label: None)


def which(ctx: Context, program: str) -> str | None:
    """A program on the caller's PATH (not this process's)."""
    return shutil.which(program, path=ctx.env.get("PATH", os.defpath))


def command(name: str):
    """Run the body with a fresh Result; errors of any kind end up in it, never raised."""

    def wrap(body: Callable[..., None]) -> Callable[..., Result]:
        @functools.wraps(body)
        def run(*args, **kwargs) -> Result:
            result = Result(name)
            try:
                body(result, *args, **kwargs)
            except SetupError as exc:
                result.error = exc
            except (KeyboardInterrupt, Interrupted):
                result.error = interrupted(result)
            except Exception as exc:  # a bug: reported, with what was done before it
                result.error = InternalError(
                    f"internal error: {type(exc).__name__}: {exc}",
                    "this is a bug in cudnn-setup; please report it with the traceback",
                    traceback=traceback.format_exc())
            return result

        return run

    return wrap


def interrupted(result: Result) -> SetupError:
    if result.changed:
        return InstallFailed("interrupted after the change was committed; it stands",
                             "run `cudnn-setup verify` to check it", code="interrupted")
    return InstallFailed("interrupted; nothing was changed (a change in progress was rolled back)",
                         "run the command again", code="interrupted")
