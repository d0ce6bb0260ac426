"""What every command is handed: its context (passed in, never read from globals), and the
small lookups several commands make through it.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional

from cudnn_setup.child import Runner
from cudnn_setup.steps.command_facts import Facts
from cudnn_setup.errors import NoCudaRoot, UsageError
from cudnn_setup.facts.cuda import CudaRoot, find_cuda_root
from cudnn_setup.settings import SYSTEM_CONFIG
from cudnn_setup.sources.pipconf import SYSTEM_DIRS as PIP_SYSTEM_DIRS
from cudnn_setup.text import escape

Progress = Callable[[int, Optional[int]], None]  # bytes done, bytes in all (None: unknown)


# A dataclass, not a Struct: `facts` is made from the other fields, outside __init__.
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
    # The facts this command looks at, each started at most once (steps/command_facts.py):
    # the driver, the loader, each installation's load, the frameworks, the HTTP client and
    # its one waiting budget. Made from the fields above; a Context serves one command.
    facts: Facts = field(init=False, compare=False, hash=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "facts", Facts(self.env, self.home, self.runner, self.status))


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
    """How far reading the archive got, for the progress display (the reader says of what:
    a .tar.xz's decoded bytes, else the file's)."""
    return ctx.progress(f"reading {escape(archive.name)}")


def include_needs_lib_dir(lib_dir: Path | None, include_dir: Path | None) -> None:
    """--include-dir names the headers of the cuDNN in --lib-dir; alone it would be ignored."""
    if include_dir is not None and lib_dir is None:
        raise UsageError("--include-dir is only used with --lib-dir (the root's cuDNN keeps its "
                         "headers in the root)", "add --lib-dir DIR for the cuDNN whose headers "
                         "these are, or leave --include-dir out")


def which(ctx: Context, program: str) -> str | None:
    """A program on the caller's PATH (not this process's)."""
    return shutil.which(program, path=ctx.env.get("PATH", os.defpath))
