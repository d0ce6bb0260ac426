"""The command line: parse argv, call a command, render its Result. Errors become exit codes here
and nowhere else; whatever happens, `--json` prints one JSON object.

Start-up is part of every command (`--version` and `--help` are little else), so this module
imports only what parsing needs; each command's module, and what it needs, is imported when that
command runs. Help is click's plain help, not typer's rich panels: those import rich, markdown-it
and pygments (about 80 ms) for every `--help`. tests/test_startup.py pins what is imported.
"""
from __future__ import annotations

import os
import sys
import typing
from pathlib import Path
from typing import IO, TYPE_CHECKING, Callable, Mapping, Optional

import typer
import typer.main

from cudnn_setup import __version__
from cudnn_setup.errors import INTERNAL, USAGE, InternalError, Interrupted, UsageError

if TYPE_CHECKING:
    from cudnn_setup.steps.context import Context
    from cudnn_setup.report import Result

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  rich_markup_mode=None,
                  help="Install NVIDIA cuDNN from an archive into a CUDA toolkit, configure "
                       "Theano for it, and prove that it works.")

# Every option that takes a value names it (metavar): a flag shows none, so help never suggests
# `--json true`; tests/test_startup.py reads the help of every command.
CudaRootOpt = typer.Option(None, "--cuda-root", metavar="DIR",
                           help="CUDA root (default: discovered)")
JsonOpt = typer.Option(False, "--json", help="one JSON object on stdout; human output on stderr")
_RC_DEFAULT = "(default: last entry of $THEANORC, else ~/.theanorc)"
TheanorcOpt = typer.Option(None, "--theanorc", metavar="FILE",
                           help=f"Theano config to write {_RC_DEFAULT}")
TheanorcCheckedOpt = typer.Option(None, "--theanorc", metavar="FILE",
                                  help=f"Theano config the Theano check reads {_RC_DEFAULT}")
TheanorcBenchOpt = typer.Option(None, "--theanorc", metavar="FILE",
                                help=f"Theano config the benchmark reads {_RC_DEFAULT}")


def _interpreter(ctx: typer.Context, value: Optional[str]) -> Optional[str]:
    """--python must name a program that exists, or a test of Theano there would be meaningless."""
    if value is None:
        return None
    import shutil

    from cudnn_setup.text import escape

    session = ctx.find_object(_Session)
    path = session.env.get("PATH", os.defpath) if session else os.defpath
    found = shutil.which(value, path=path) if "/" not in value else (
        value if os.path.isfile(value) and os.access(value, os.X_OK) else None)
    if found is None:
        why = ("does not exist" if not os.path.lexists(value) else
               "is not an executable file") if "/" in value else "is not on PATH"
        raise typer.BadParameter(f"the interpreter {escape(value)} {why}")
    return value


PythonOpt = typer.Option(None, "--python", callback=_interpreter, metavar="EXE",
                         help="interpreter whose Theano and frameworks are checked "
                              "(default: the one running cudnn-setup)")
LibDirOpt = typer.Option(None, "--lib-dir", metavar="DIR", help="check the cuDNN in this directory instead of "
                         "the root's (a copy by hand, /usr/lib/<triple>, a wheel's nvidia/cudnn/lib)")
IncludeDirOpt = typer.Option(None, "--include-dir", metavar="DIR", help="its headers (default: where its "
                             "layout keeps them)")
NoFrameworksOpt = typer.Option(False, "--no-frameworks", help="do not look at what the "
                               "deep-learning frameworks of --python load")
HeaderOpt = typer.Option(None, "--header", metavar="'NAME: VALUE'", help="extra HTTP header, e.g. 'Authorization: Bearer …' "
                         "(repeatable; never printed)")
CacheOpt = typer.Option(None, "--cache-dir", metavar="DIR", help="download cache (default: $XDG_CACHE_HOME/cudnn-setup)")
DryRunOpt = typer.Option(False, "--dry-run", help="print the plan, change nothing")
MirrorOpt = typer.Option(None, "--mirror", metavar="URL|DIR", help="copy of NVIDIA's cudnn/redist/ tree: http(s) "
                         "URL, file:// URL or directory (default: $CUDNN_SETUP_MIRROR, then "
                         "the config files, then NVIDIA's)")
CudaOpt = typer.Option(None, "--cuda", metavar="N", help="CUDA version the build must fit, e.g. 12 "
                       "(default: the root's)")
FromOpt = typer.Option(None, "--from", metavar="nvidia|pypi|MIRROR", help="where versions come from: nvidia, pypi (the "
                       "nvidia-cudnn-cuNN wheels on the index pip would use), or a mirror's "
                       "URL or directory (default: --mirror's order)")
IndexUrlOpt = typer.Option(None, "--index-url", metavar="URL", help="the PyPI index to read (implies --from "
                           "pypi; default: pip's: PIP_INDEX_URL, pip.conf, pypi.org)")


class _Session:
    """What one invocation of main() was given: where to write, and the Context for commands."""

    def __init__(self, argv: list[str], env: Mapping[str, str], home: Path, out: IO[str],
                 err: IO[str], system_config: Path | None = None, cwd: Path | None = None,
                 pip_system_dirs: tuple[Path, ...] | None = None,
                 wheel_tags: tuple[str, ...] | None = None):
        self.argv, self.env, self.home, self.out, self.err = argv, env, home, out, err
        self.cwd = cwd
        self.pip_system_dirs, self.wheel_tags = pip_system_dirs, wheel_tags
        self.rendered = False
        self.code = 0
        self.console = None
        self.system_config = system_config

    def context(self, as_json: bool) -> Context:
        """The Context for a command; what it says while it works goes to stderr (a live
        display on a terminal, plain lines in a log), so stdout keeps only the answer."""
        from cudnn_setup import console
        from cudnn_setup.steps.context import Context

        settings = {"system_config": self.system_config} if self.system_config else {}
        if self.pip_system_dirs is not None:
            settings["pip_system_dirs"] = self.pip_system_dirs
        if self.wheel_tags is not None:
            settings["wheel_tags"] = self.wheel_tags
        self.console = console.for_stream(self.err)
        return Context(env=self.env, home=self.home, python=sys.executable, euid=os.geteuid(),
                       cwd=self.cwd, progress=self.console.progress, status=self.console.status,
                       **settings)

    def quiet(self) -> None:
        """The live display ends before the answer is printed (and on any way out)."""
        if self.console is not None:
            self.console.close()


def _safe(text: str, stream: IO[str]) -> str:
    """Text the stream can take whatever its encoding; what it cannot take is shown escaped."""
    encoding = getattr(stream, "encoding", None) or "utf-8"
    return text.encode(encoding, "backslashreplace").decode(encoding, "replace")


def _render(session: _Session, result: Result, as_json: bool) -> int:
    """People's lines (stdout, or stderr under --json), then the one JSON object.

    Every line passes printable(), so a newline, an escape sequence or an undecodable byte in a
    path shows as a visible code whatever the locale; the JSON is ASCII and valid Unicode.
    """
    import json

    from cudnn_setup.report import check_lines

    human = session.err if as_json else session.out
    error = result.error
    if isinstance(error, InternalError) and not error.saved:
        error.message += f" (traceback saved in {_save_traceback(session, error)})"
        error.saved = True
    lines = list(result.lines)
    if result.checks:
        lines += check_lines(result.checks)
    for line in lines:
        _emit(human, line)
    if error is not None:
        _emit(session.err, f"error: {error.message}")
        for problem in error.problems[1:]:
            _emit(session.err, f"error: {problem.message}")
        if error.hint:
            _emit(session.err, f"hint: {error.hint}")
    if as_json:
        _emit(session.out, json.dumps(_json_safe(result.to_dict()), ensure_ascii=True), raw=True)
    session.rendered = True
    session.code = result.exit_code
    return result.exit_code


def _emit(stream: IO[str], text: str, raw: bool = False) -> None:
    """One line out; a stream that is gone (closed, broken pipe) does not stop the rest."""
    from cudnn_setup.text import printable

    try:
        print(text if raw else _safe(printable(text), stream), file=stream)
        stream.flush()
    except (OSError, ValueError):
        pass


def _json_safe(value):
    """Every string of the JSON object as valid Unicode (keys included)."""
    from cudnn_setup.text import valid_unicode

    if isinstance(value, str):
        return valid_unicode(value)
    if isinstance(value, dict):
        return {_json_safe(k) if isinstance(k, str) else k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def _last_resort(session: _Session, command: str, exc: BaseException, as_json: bool) -> int:
    """A bug reached the top: still one line, one JSON object, exit 70, the traceback kept."""
    import json

    from cudnn_setup.steps.command_wrapper import internal_error
    from cudnn_setup.report import SCHEMA, Result
    from cudnn_setup.text import valid_unicode

    if session.rendered:  # the answer is out; what broke after it cannot change it
        return session.code
    try:
        return _render(session, Result(command, error=internal_error(exc)), as_json)
    except Exception:  # rendering itself is broken: a fixed object, built without it
        if as_json and not session.rendered:
            _emit(session.out, json.dumps({
                "schema": SCHEMA, "ok": False, "command": valid_unicode(command),
                "cuda_root": None, "cudnn_version": None, "changed": False, "checks": [],
                "error": {"exit_code": INTERNAL, "code": "internal", "hint": "",
                          "message": f"internal error: {type(exc).__name__}"}}), raw=True)
        _emit(session.err, f"error: internal error: {type(exc).__name__}")
        session.rendered = True
        return INTERNAL


def _save_traceback(session: _Session, error: InternalError) -> str:
    import datetime
    import tempfile

    from cudnn_setup.text import escape
    from cudnn_setup.urls import scrub

    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = session.env.get("XDG_CACHE_HOME") or str(session.home / ".cache")
    # the command line as given, but a URL's password or token is no more kept than shown
    argv = " ".join(scrub(a) for a in session.argv)
    text = f"cudnn-setup {__version__}\n{argv}\n\n{scrub(error.traceback)}"
    for directory in (Path(base) / "cudnn-setup", Path(tempfile.gettempdir())):
        try:
            directory.mkdir(parents=True, exist_ok=True)
            path = directory / f"cudnn-setup-crash-{stamp}-{os.getpid()}.txt"
            # bytes as they were: arguments and paths may hold any byte
            path.write_bytes(text.encode("utf-8", "surrogateescape"))
            return escape(str(path))
        except (OSError, UnicodeError):
            continue
    return "nowhere: no writable directory"


def _call(ctx: typer.Context, as_json: bool, run: Callable[[Context], Result]) -> None:
    import signal

    session: _Session = ctx.obj
    previous = signal.getsignal(signal.SIGTERM)
    in_main_thread = _main_thread()
    if in_main_thread:
        signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        result = run(session.context(as_json))
    finally:
        session.quiet()
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous)
    raise typer.Exit(_render(session, result, as_json))


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _on_sigterm(signum, frame):  # set by _call only: signal is imported by then
    raise Interrupted()


@app.command()
def inspect(ctx: typer.Context,
            archive: Path = typer.Argument(..., metavar="ARCHIVE", help="cuDNN archive (.tgz, .tar.xz)"),
            cuda_root: Optional[Path] = typer.Option(None, "--cuda-root", metavar="DIR", help="also judge "
                                                     "whether it fits this CUDA root"),
            json_: bool = JsonOpt) -> None:
    """Validate and describe an archive; install nothing."""
    from cudnn_setup.commands.inspect import inspect as run

    _call(ctx, json_, lambda c: run(c, archive, cuda_root=cuda_root))


@app.command()
def download(ctx: typer.Context,
             url: str = typer.Argument(..., metavar="URL|VERSION", help="http(s) URL of a cuDNN "
                                       "archive, or a version (9, 9.17, 9.17.0.29) to fetch from "
                                       "--from"),
             output: Optional[Path] = typer.Option(None, "-o", "--output", metavar="DIR", help="directory to "
                                                   "place the archive in (default: the cache)"),
             sha256: Optional[str] = typer.Option(None, "--sha256", metavar="HEX", help="expected checksum"),
             header: Optional[list[str]] = HeaderOpt, cache_dir: Optional[Path] = CacheOpt,
             from_: Optional[str] = FromOpt, index_url: Optional[str] = IndexUrlOpt,
             mirror: Optional[str] = MirrorOpt, cuda: Optional[str] = CudaOpt,
             cuda_root: Optional[Path] = typer.Option(None, "--cuda-root", metavar="DIR", help="CUDA root whose "
                                                      "version picks the build"),
             json_: bool = JsonOpt) -> None:
    """Download an archive (or a version's archive or wheel) into the cache (resumable,
    checksummed)."""
    from cudnn_setup.commands.download import download as run

    _call(ctx, json_, lambda c: run(c, url, output, sha256, header, cache_dir, from_=from_,
                                    index_url=index_url, mirror=mirror, cuda=cuda,
                                    cuda_root=cuda_root))


@app.command()
def install(ctx: typer.Context,
            source: str = typer.Argument(..., metavar="SOURCE", help="archive path, http(s)/file URL, or a "
                                         "version (9, 9.17, 9.17.0.29) to fetch"),
            cuda_root: Optional[Path] = CudaRootOpt,
            sha256: Optional[str] = typer.Option(None, "--sha256", metavar="HEX", help="expected checksum"),
            theanorc: Optional[Path] = TheanorcOpt,
            no_theanorc: bool = typer.Option(False, "--no-theanorc", help="leave Theano's config alone"),
            python: Optional[str] = PythonOpt,
            no_verify: bool = typer.Option(False, "--no-verify", help="skip verification"),
            dry_run: bool = DryRunOpt,
            force: bool = typer.Option(False, "--force", help="reinstall; replace changed files"),
            ldconfig: bool = typer.Option(False, "--ldconfig", help="register the library dir "
                                          "in /etc/ld.so.conf.d and run ldconfig"),
            header: Optional[list[str]] = HeaderOpt, cache_dir: Optional[Path] = CacheOpt,
            cuda: Optional[str] = CudaOpt, mirror: Optional[str] = MirrorOpt,
            from_: Optional[str] = FromOpt, index_url: Optional[str] = IndexUrlOpt,
            with_deps: bool = typer.Option(False, "--with-deps", help="with --from pypi: also "
                                           "place the cuBLAS/NVRTC libraries the wheel declares "
                                           "and the root lacks, in the same transaction"),
            no_frameworks: bool = NoFrameworksOpt,
            verify_content: bool = typer.Option(False, "--verify-content", help="to tell "
                                                "whether the archive is already installed, hash "
                                                "the installed files (default: their stat)"),
            json_: bool = JsonOpt) -> None:
    """Install cuDNN from an archive into a CUDA root, configure Theano, verify."""
    from cudnn_setup.commands.install import install as run

    _call(ctx, json_, lambda c: run(c, source, cuda_root=cuda_root, sha256=sha256,
                                    theanorc=theanorc, no_theanorc=no_theanorc, python=python,
                                    no_verify=no_verify, dry_run=dry_run, force=force,
                                    ldconfig=ldconfig, headers=header, cache_dir=cache_dir,
                                    cuda=cuda, mirror=mirror, no_frameworks=no_frameworks,
                                    from_=from_, index_url=index_url, with_deps=with_deps,
                                    verify_content=verify_content))


@app.command()
def uninstall(ctx: typer.Context, cuda_root: Optional[Path] = CudaRootOpt,
              dry_run: bool = DryRunOpt,
              force: bool = typer.Option(False, "--force", help="also remove files changed since install"),
              json_: bool = JsonOpt) -> None:
    """Remove the cuDNN the tool installed and put back what it replaced."""
    from cudnn_setup.commands.uninstall import uninstall as run

    _call(ctx, json_, lambda c: run(c, cuda_root=cuda_root, dry_run=dry_run, force=force))


@app.command()
def theanorc(ctx: typer.Context, cuda_root: Optional[Path] = CudaRootOpt,
             theanorc: Optional[Path] = TheanorcOpt,
             dry_run: bool = typer.Option(False, "--dry-run", help="show the diff, change nothing"),
             json_: bool = JsonOpt) -> None:
    """Write the cuDNN settings into Theano's config."""
    from cudnn_setup.commands.theanorc import theanorc as run

    _call(ctx, json_, lambda c: run(c, cuda_root=cuda_root, theanorc=theanorc, dry_run=dry_run))


@app.command()
def verify(ctx: typer.Context, cuda_root: Optional[Path] = CudaRootOpt,
           theanorc: Optional[Path] = TheanorcCheckedOpt, python: Optional[str] = PythonOpt,
           no_theano: bool = typer.Option(False, "--no-theano", help="skip the Theano check"),
           deep: bool = typer.Option(False, "--deep", help="hash every installed file, even those "
                                     "whose inode, size, mtime and ctime are unchanged"),
           lib_dir: Optional[Path] = LibDirOpt, include_dir: Optional[Path] = IncludeDirOpt,
           no_frameworks: bool = NoFrameworksOpt, json_: bool = JsonOpt) -> None:
    """Check, layer by layer, that cuDNN is installed right and works."""
    from cudnn_setup.commands.verify import verify as run

    _call(ctx, json_, lambda c: run(c, cuda_root=cuda_root, theanorc=theanorc, python=python,
                                    no_theano=no_theano, deep=deep, lib_dir=lib_dir,
                                    include_dir=include_dir, no_frameworks=no_frameworks))


@app.command()
def doctor(ctx: typer.Context,
           message: Optional[str] = typer.Argument(None, metavar="MESSAGE", help="a Theano startup line to explain"),
           cuda_root: Optional[Path] = CudaRootOpt, python: Optional[str] = PythonOpt,
           lib_dir: Optional[Path] = LibDirOpt, include_dir: Optional[Path] = IncludeDirOpt,
           json_: bool = JsonOpt) -> None:
    """Diagnose cuDNN on this machine; explain a Theano startup line."""
    from cudnn_setup.commands.doctor import doctor as run

    _call(ctx, json_, lambda c: run(c, message, cuda_root, python=python, lib_dir=lib_dir,
                                    include_dir=include_dir))


@app.command()
def bench(ctx: typer.Context, cuda_root: Optional[Path] = CudaRootOpt,
          theanorc: Optional[Path] = TheanorcBenchOpt, python: Optional[str] = PythonOpt,
          no_theano: bool = typer.Option(False, "--no-theano", help="only cuDNN's own timings"),
          json_: bool = JsonOpt) -> None:
    """Theano conv net with cuDNN vs without; cuDNN's algorithm timings on the GPU."""
    from cudnn_setup.commands.bench import bench as run

    _call(ctx, json_, lambda c: run(c, cuda_root=cuda_root, theanorc=theanorc, python=python,
                                    no_theano=no_theano))


@app.command("list")
def list_(ctx: typer.Context, cuda: Optional[str] = CudaOpt,
          cuda_root: Optional[Path] = CudaRootOpt, mirror: Optional[str] = MirrorOpt,
          from_: Optional[str] = FromOpt, index_url: Optional[str] = IndexUrlOpt,
          header: Optional[list[str]] = HeaderOpt,
          platform: Optional[str] = typer.Option(
              None, "--platform", metavar="P",
              help="NVIDIA's platform instead of this machine's: linux-x86_64, linux-sbsa, "
                   "linux-aarch64 (Jetson), linux-ppc64le, windows-x86_64, windows-arm64"),
          json_: bool = JsonOpt) -> None:
    """The cuDNN versions published for this machine, newest first; which one is installed."""
    from cudnn_setup.commands.list import list_releases as run

    _call(ctx, json_, lambda c: run(c, cuda=cuda, cuda_root=cuda_root, mirror=mirror,
                                    headers=header, from_=from_, index_url=index_url,
                                    platform=platform))


@app.command()
def mirror(ctx: typer.Context,
           directory: Path = typer.Argument(..., metavar="DIR", help="the mirror directory to build or update"),
           versions: list[str] = typer.Argument(..., metavar="VERSION...", help="versions to hold (9, 9.28, 9.28.0.42)"),
           cuda: Optional[list[str]] = typer.Option(None, "--cuda", metavar="N", help="CUDA major to hold "
                                                    "builds for (repeatable; default: the root's)"),
           platform: Optional[list[str]] = typer.Option(None, "--platform", metavar="KEY", help="NVIDIA "
                                                        "platform key, e.g. linux-sbsa "
                                                        "(repeatable; default: this machine's)"),
           from_: Optional[str] = typer.Option(None, "--from", metavar="nvidia|pypi|MIRROR", help="nvidia (default), pypi "
                                               "(wheels repacked in NVIDIA's layout), or another "
                                               "mirror's URL or directory"),
           index_url: Optional[str] = IndexUrlOpt, header: Optional[list[str]] = HeaderOpt,
           cuda_root: Optional[Path] = CudaRootOpt, json_: bool = JsonOpt) -> None:
    """Build a directory in NVIDIA's redist layout that --mirror and any web server serve."""
    from cudnn_setup.commands.mirror import mirror as run

    _call(ctx, json_, lambda c: run(c, directory, versions, cudas=cuda, platforms=platform,
                                    from_=from_, index_url=index_url, headers=header,
                                    cuda_root=cuda_root))


def _version_callback(ctx: typer.Context, value: bool) -> None:
    if value:
        session: _Session = ctx.obj
        print(f"cudnn-setup {__version__}", file=session.out)
        raise typer.Exit()


@app.callback()
def _main(version: bool = typer.Option(False, "--version", callback=_version_callback,
                                       is_eager=True, help="print the version")) -> None:
    pass


class _PlainValues:
    """One option's values converted without a validation library.

    typer 0.2x converts every option value through a pydantic TypeAdapter, so any command
    that has an option with a value (all but --version) imported pydantic first, about 100 ms
    and more than the rest of the start-up. The options here are str, Path and list[str] (flags
    are bools, or None when not given), which need nothing more than this.
    """

    def __init__(self, convert: Callable[[str], object], multiple: bool):
        self.convert, self.multiple = convert, multiple

    def coerce(self, value, param=None, ctx=None):
        if value is None:
            return () if self.multiple else None
        if self.multiple:
            return [self.convert(v) for v in value]
        return self.convert(value)


def _flag(value) -> bool:
    if not isinstance(value, bool):  # click gives a flag True or False, never text
        raise typer.BadParameter(f"{value!r} is not a flag's value")
    return value


_PLAIN = {str: str, Path: Path, bool: _flag}


def _parser(name: str = ""):
    """The click command typer builds from `app`, with plain conversions where typer has the
    hook for them (typer versions without it convert as they always did): the group's and
    command `name`'s, the only ones this run parses."""
    command = typer.main.get_command(app)
    chosen = getattr(command, "commands", {}).get(name)
    for cmd in [command, *([chosen] if chosen is not None else [])]:
        try:  # --help is made on first use and kept: made here, it is converted plainly too
            cmd.get_help_option(cmd.context_class(cmd))
        except Exception:  # another typer: its --help stays as it makes it
            pass
        for param in [*cmd.params, getattr(cmd, "_help_option", None)]:
            if param is None:
                continue
            desc = getattr(param, "type_descriptor", None)
            if desc is None or getattr(param, "_runtime_param", False) is not None:
                continue
            annotation, multiple = desc.annotation, bool(param.multiple or param.nargs == -1)
            if multiple and getattr(desc, "is_list", False):
                annotation = typing.get_args(annotation)[0] if typing.get_args(annotation) else None
            if annotation in _PLAIN and not getattr(desc, "file_annotation", None) \
                    and getattr(desc.parameter_info, "parser", None) is None:
                param._runtime_param = _PlainValues(_PLAIN[annotation], multiple)
    return command


def main(argv: list[str] | None = None, *, env: Mapping[str, str] | None = None,
         home: Path | None = None, stdout: IO[str] | None = None,
         stderr: IO[str] | None = None, system_config: Path | None = None,
         cwd: Path | None = None, pip_system_dirs: tuple[Path, ...] | None = None,
         wheel_tags: tuple[str, ...] | None = None) -> int:
    """Run the command line in this process; return the exit code.

    Everything a command may look at comes from the arguments (environment, home, working
    directory, streams), so a provisioning script or a test calls this exactly as the shell
    would call the program; `system_config` replaces /etc/cudnn-setup.conf, `pip_system_dirs`
    the directories of pip's system-wide configuration (/etc/xdg, /etc), `wheel_tags` this
    machine's wheel platform tags.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    env = dict(os.environ if env is None else env)
    home = home or Path(env.get("HOME") or Path.home())
    session = _Session(argv, env, home, stdout or sys.stdout, stderr or sys.stderr, system_config,
                       cwd or Path.cwd(), pip_system_dirs, wheel_tags)
    as_json = "--json" in argv
    command = next((a for a in argv if not a.startswith("-")), "")
    try:
        import contextlib

        with contextlib.redirect_stdout(session.out), contextlib.redirect_stderr(session.err):
            code = _parser(command)(args=argv, prog_name="cudnn-setup", standalone_mode=False,
                             obj=session)
        return code if isinstance(code, int) else 0
    except typer.Exit as exc:
        return exc.exit_code
    except (typer.Abort, KeyboardInterrupt, Interrupted):
        # Ctrl-C while arguments were parsed or a command module loaded: nothing had started
        if session.rendered:
            return session.code
        from cudnn_setup.steps.command_wrapper import interrupted
        from cudnn_setup.report import Result

        return _render(session, Result(command, error=interrupted(Result(command))), as_json)
    except Exception as exc:
        # click's UsageError (typer may carry its own copy of click, so matched by its shape)
        if getattr(exc, "exit_code", None) == USAGE and hasattr(exc, "format_message"):
            if as_json and not session.rendered:
                import json

                from cudnn_setup.report import Result

                error = UsageError(exc.format_message(),
                                   _usage_hint(argv, command, exc.format_message()))
                _emit(session.out, json.dumps(_json_safe(Result(command, error=error).to_dict())),
                      raw=True)
            try:
                exc.show(file=session.err)
            except (OSError, ValueError, UnicodeError):
                pass
            flag = _usage_hint(argv, command, exc.format_message())
            if not flag.startswith("see "):
                _emit(session.err, f"hint: {flag}")
            return USAGE
        return _last_resort(session, command, exc, as_json)


_BOOL_WORDS = {"true", "false", "yes", "no", "on", "off", "1", "0"}


def _usage_hint(argv: list[str], command: str, message: str) -> str:
    """`--json true` reads as a value given to a flag; say that flags take none."""
    for before, word in zip(argv, argv[1:]):
        if "extra argument" not in message:
            break
        if word.lower() in _BOOL_WORDS and before.startswith("--") and "=" not in before:
            return f"{before} is a flag and takes no value: give {before} alone, or leave it out"
    return f"see `cudnn-setup {command} --help`"


def console_main() -> None:
    sys.exit(main())
