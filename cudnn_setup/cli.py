"""The command line: parse argv, call a command, render its Result. Errors become exit codes here
and nowhere else; whatever happens, `--json` prints one JSON object.

Start-up is part of every command (`--version` is little else), so this module imports only the
grammar (arguments.py, which reads the words itself and hands typer the rest, imported only past
`--version`); each command's module, and what it needs, is imported when that command runs.
tests/test_startup.py pins what is imported.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from cudnn_setup import __version__
from cudnn_setup.arguments import ArgsError, Parsed, parse
from cudnn_setup.errors import (INTERNAL, USAGE, VERIFY_FAILED, InternalError, Interrupted,
                                UsageError, os_error)

TYPE_CHECKING = False
if TYPE_CHECKING:  # without importing typing, which start-up does not otherwise need
    from typing import IO, Mapping

    from cudnn_setup.steps.context import Context
    from cudnn_setup.report import Result


# What the completion scripts typer writes set to ask for completions (click's naming)
COMPLETE_VAR = "_CUDNN_SETUP_COMPLETE"


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
        error.message += f" ({_save_traceback(session, error)})"
        error.saved = True
    lines = list(result.lines)
    if result.checks:
        lines += check_lines(result.checks)
    failed = []  # what went wrong writing the answer to stdout, line by line
    for line in lines:
        went_wrong = _emit(human, line)
        if human is session.out:
            failed.append(went_wrong)
    if error is not None:
        _emit(session.err, f"error: {error.message}")
        for problem in error.problems[1:]:
            _emit(session.err, f"error: {problem.message}")
        if error.hint:
            _emit(session.err, f"hint: {error.hint}")
    if as_json:
        failed.append(_emit(session.out, json.dumps(_json_safe(result.to_dict()),
                                                     ensure_ascii=True), raw=True))
    session.rendered = True
    session.code = _answer_lost(session, result.exit_code, failed)
    return session.code


def _answer_lost(session: _Session, code: int, failed: list) -> int:
    """A command whose answer could not be written (a full disk under `> out.json`, an I/O
    error) did not succeed, whatever it found: said on stderr, exit 1. A reader that left
    (`| head`, a closed pipe) wanted no more, and is not a failure."""
    lost = next((exc for exc in failed if exc is not None
                 and not isinstance(exc, (BrokenPipeError, ValueError))), None)
    if lost is None:
        return code
    why = os_error(lost, "cannot write the answer to stdout")
    _emit(session.err, f"error: {why.message}")
    _emit(session.err, f"hint: {why.hint}")
    return code or VERIFY_FAILED


def _emit(stream: IO[str], text: str, raw: bool = False) -> OSError | ValueError | None:
    """One line out; a stream that is gone (closed, broken pipe, full) does not stop the rest,
    and what went wrong is returned for the caller to judge."""
    from cudnn_setup.text import printable

    try:
        print(text if raw else _safe(printable(text), stream), file=stream)
        stream.flush()
    except (OSError, ValueError) as exc:
        return exc
    return None


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
    """Where the traceback was kept, for the error's message: "saved in PATH", or "not saved"
    and why (crash_report.py says where and how)."""
    import datetime

    from cudnn_setup import crash_report
    from cudnn_setup.text import escape

    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    directory = crash_report.cache_dir(session.env, session.home) / "cudnn-setup" / "crashes"
    text = crash_report.report_text(__version__, session.argv, error.traceback)
    try:
        path = crash_report.save(directory, f"crash-{stamp}-{os.getpid()}.txt", text,
                                 os.geteuid())
    except (OSError, UnicodeError) as exc:
        strerror = getattr(exc, "strerror", None)
        why = f"{strerror}: {directory}" if strerror else str(exc)
        return f"traceback not saved: {escape(why)}"
    return f"traceback saved in {escape(str(path))}"


def _call(session: _Session, parsed: Parsed) -> int:
    """Run the parsed command with the session's Context; SIGTERM rolls it back like Ctrl-C."""
    import importlib
    import signal

    import cudnn_setup.commands

    module, name = parsed.command.target.split(":")  # the one command this run needs
    run = getattr(importlib.import_module(f"{cudnn_setup.commands.__name__}.{module}"), name)
    previous = {signal.SIGTERM: signal.getsignal(signal.SIGTERM)}
    if signal.getsignal(signal.SIGHUP) in (signal.SIG_DFL, _on_signal):
        # the terminal closed (an ssh session dropped): as SIGTERM, not a death that leaves
        # a transaction half done and no answer (a nohup'd run's stays ignored)
        previous[signal.SIGHUP] = signal.getsignal(signal.SIGHUP)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        # Ctrl-C as Python raises it, with the same care in a close (an ignored SIGINT, a
        # background job's, stays ignored; a host program's own handler stays its own)
        previous[signal.SIGINT] = signal.default_int_handler
    in_main_thread = _main_thread()
    if in_main_thread:
        _deferred[0] = 0
        for signum in previous:
            signal.signal(signum, _on_signal)
    try:
        try:
            result = run(session.context(parsed.as_json), **parsed.values)
            if in_main_thread:  # the answer is decided: a signal now could only make it false
                for signum in previous:  # ("interrupted; nothing was changed" of a done install)
                    signal.signal(signum, signal.SIG_IGN)
        finally:
            session.quiet()
        return _render(session, result, parsed.as_json)
    finally:
        if in_main_thread:
            for signum, handler in previous.items():
                signal.signal(signum, handler)


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _on_signal(signum, frame):  # set by _call and console_main: signal is imported by then
    """SIGTERM (and SIGHUP) raises Interrupted, SIGINT KeyboardInterrupt, where the program
    is; both roll back the same way (steps/command_wrapper.py)."""
    import signal

    if _in_io_close(frame) and _deferred[0] < MAX_DEFERRALS:
        # A file object left to the garbage collector is closed by io's finalizer, which drops
        # whatever close() raises, without a word: the signal would be lost, and the command
        # would go on (waiting for bytes that never come, say). It is raised again a moment
        # later, in the main thread, once out of the close; a close that outlasts the
        # deferrals gets it where it is.
        import threading

        main = threading.main_thread().ident
        if main is not None:
            _deferred[0] += 1
            threading.Timer(RESIGNAL_S, signal.pthread_kill, (main, signum)).start()
            return
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Interrupted()


RESIGNAL_S = 0.05
MAX_DEFERRALS = 20  # a second at most
_deferred = [0]  # deferrals of this command's signal (reset by _call)
_CLOSE_DEPTH = 8  # frames looked at: close() and what it calls (a hasher's stop, a join)


def _in_io_close(frame) -> bool:
    """Whether the signal landed in a file object's close(), or in what it calls."""
    import io

    for _ in range(_CLOSE_DEPTH):
        if frame is None:
            return False
        if frame.f_code.co_name == "close" and isinstance(frame.f_locals.get("self"), io.IOBase):
            return True
        frame = frame.f_back
    return False


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
    env = _as_given(os.environ) if env is None else dict(env)
    cwd = cwd or _working_dir()
    env = _paths_anchored(env, cwd or Path("/"))
    if COMPLETE_VAR in env:  # the shell's completion script asks for words, not a command
        from cudnn_setup.typer_app import complete

        try:
            return complete(argv)
        except (KeyError, ValueError) as exc:  # COMP_WORDS or COMP_CWORD missing or not a number
            print(f"cudnn-setup: completion asked without the shell's words ({type(exc).__name__}: "
                  f"{exc}); nothing completed", file=stderr or sys.stderr)
            return USAGE
    home = home or Path(env.get("HOME") or Path.home())
    # a closed stream (Python makes it None) is a sink: print(file=None) would write to stdout
    session = _Session(argv, env, home, stdout or sys.stdout or _sink(),
                       stderr or sys.stderr or _sink(), system_config, cwd or Path("/"),
                       pip_system_dirs, wheel_tags)
    as_json = "--json" in argv
    command = next((a for a in argv if not a.startswith("-")), "")
    if cwd is None:
        from cudnn_setup.report import Result

        return _render(session, Result(command, error=UsageError(
            "the working directory no longer exists, so no path given relative to it can be "
            "found", "cd to a directory that exists and run the command again",
            code="no-working-directory")), as_json)
    try:
        import contextlib

        # what a library prints while the command runs goes where the command's output goes
        with contextlib.redirect_stdout(session.out), contextlib.redirect_stderr(session.err):
            try:
                parsed = parse(argv, env, session.cwd)
            except ArgsError as exc:
                return _usage_error(session, exc, as_json)
            if parsed.done:  # typer answered (completion scripts)
                return parsed.code
            if parsed.version:
                _emit(session.out, f"cudnn-setup {__version__}", raw=True)
                return 0
            if parsed.help is not None:  # nothing given at all: help, as an error, on stderr
                _emit(session.out if parsed.code == 0 else session.err, parsed.help, raw=True)
                return parsed.code
            return _call(session, parsed)
    except (KeyboardInterrupt, Interrupted):
        # Ctrl-C while arguments were parsed or a command module loaded: nothing had started
        if session.rendered:
            return session.code
        from cudnn_setup.errors import interruption, rolled_back_or_not
        from cudnn_setup.report import Result

        error = rolled_back_or_not(interruption(False, read_only=True), command, False)
        return _render(session, Result(command, error=error), as_json)
    except Exception as exc:
        return _last_resort(session, command, exc, as_json)


_GIVEN = "CUDNN_SETUP_GIVEN_LD_LIBRARY_PATH"  # the user's LD_LIBRARY_PATH, across a new start


# The variables that name files or directories and that children read: a relative value means
# "from the directory the command was given in", which a child (run in a scratch dir of its own)
# would read from elsewhere.
_PATH_VARIABLES = ("HOME", "THEANORC", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "CUDA_ROOT",
                   "CUDA_PATH", "CUDA_HOME")


def _working_dir() -> Path | None:
    """The directory the command was given in; None once it has been removed (getcwd fails)."""
    try:
        return Path.cwd()
    except FileNotFoundError:
        return None


def _paths_anchored(env: dict[str, str], cwd: Path) -> dict[str, str]:
    """`env` with each relative path in _PATH_VARIABLES made absolute against `cwd` (THEANORC is
    a list: each entry), so that every child reads the files the user meant."""
    for name in _PATH_VARIABLES:
        value = env.get(name)
        if not value:
            continue
        parts = value.split(os.pathsep) if name == "THEANORC" else [value]
        anchored = [p if not p or os.path.isabs(p) else os.path.join(str(cwd), p) for p in parts]
        env[name] = os.pathsep.join(anchored)
    return env


def _as_given(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment the user gave the program: console_main may have started it again
    without the directories on LD_LIBRARY_PATH that would hang its own loader."""
    env = dict(environ)
    if _GIVEN in env:
        env["LD_LIBRARY_PATH"] = env.pop(_GIVEN)
    return env


def _leave_loader_traps() -> None:
    """Start the program again without the directories on LD_LIBRARY_PATH that hold a FIFO or
    a device named like a library (loader_traps.py): the loader would wait on it forever as
    soon as Python imports an extension that needs that library (zlib: libz.so.1). The
    user's value goes along, for the command to judge."""
    from cudnn_setup import loader_traps

    value = os.environ.get("LD_LIBRARY_PATH")
    if not value or _GIVEN in os.environ or not sys.executable:
        return
    kept, found = loader_traps.without_traps(value)
    if not found:
        return
    env = dict(os.environ)
    env[_GIVEN] = value
    if kept is None:
        env.pop("LD_LIBRARY_PATH")
    else:
        env["LD_LIBRARY_PATH"] = kept
    try:
        os.execve(sys.executable, list(sys.orig_argv), env)
    except OSError:
        return  # as it is, then: a command may still hang in the loader


def _usage_error(session: _Session, exc: ArgsError, as_json: bool) -> int:
    """A command line that does not parse: exit 2, its one JSON object under --json, and on
    stderr the usage line, where to find help, the error and the hint when there is one."""
    if as_json and not session.rendered:
        import json

        from cudnn_setup.report import Result

        error = UsageError(exc.message, exc.hint)
        _emit(session.out, json.dumps(_json_safe(Result(exc.command, error=error).to_dict())),
              raw=True)
        session.rendered = True
    for line in exc.shown().splitlines():  # each line made printable (a word given may hold anything)
        _emit(session.err, line)
    if not exc.hint.startswith("see "):
        _emit(session.err, f"hint: {exc.hint}")
    return USAGE


def _sink() -> IO[str]:
    return open(os.devnull, "w", encoding="utf-8")


def _standard_streams() -> None:
    """Descriptors 0, 1 and 2 open, on /dev/null where the caller closed them (`2>&-`), as
    OpenSSH's sanitise_stdfd does: else the first file or pipe the command opens takes the
    number, and what is written to "stderr" (by this process or its children) lands in it."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            os.open(os.devnull, os.O_RDWR)  # the lowest free number: this one
    for name in ("stdin", "stdout", "stderr"):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "r" if name == "stdin" else "w",
                                    encoding="utf-8"))


def _observed() -> bool:
    """Whether a profiler, tracer or coverage tool is attached: through sys.setprofile or
    sys.settrace, or, from Python 3.12, through sys.monitoring (cProfile's way there)."""
    if sys.getprofile() is not None or sys.gettrace() is not None:
        return True
    monitoring = getattr(sys, "monitoring", None)
    return monitoring is not None and any(
        monitoring.get_tool(tool) is not None
        for tool in (monitoring.PROFILER_ID, monitoring.DEBUGGER_ID, monitoring.COVERAGE_ID))


def _sigterm_interrupts() -> None:
    """SIGTERM, from the program's first line, ends the command as Ctrl-C does, with its
    answer: while arguments are parsed and the command's modules load (a quarter second) it
    used to end the process without one. One that was ignored (a parent's choice) stays so."""
    import signal

    for signum in (signal.SIGTERM, signal.SIGHUP):  # SIGHUP: the terminal closed
        if signal.getsignal(signum) is signal.SIG_DFL:
            signal.signal(signum, _on_signal)


def _sigterm_ignored() -> None:
    """The answer is out: a SIGTERM (or SIGHUP) now changes nothing, and no longer the exit
    status."""
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


def console_main() -> None:
    """The program: main() on the process's own argv, environment and streams, then exit.

    When main() returns, the answer is printed and every file the command wrote is closed (and
    synced where it matters), so the process leaves at once: tearing the interpreter down
    module by module costs about 25 ms, an eighth of an install of a small archive. What a
    daemon thread still does is dropped either way. Under a profiler or a tracer (cProfile,
    coverage), which write their results as the interpreter exits, it exits as usual."""
    _standard_streams()
    _leave_loader_traps()
    _sigterm_interrupts()
    code = main()
    _sigterm_ignored()
    if _observed():
        sys.exit(code)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can be said on it
            pass
    os._exit(code)
