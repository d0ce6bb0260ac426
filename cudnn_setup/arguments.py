"""The command line's grammar, in one table: every command, its arguments and options with their
value names and help sentences. `parse()` reads argv with the standard library's argparse and
returns what to run, or raises `ArgsError` (exit 2); `help_text()` writes a command's help.

Start-up is most of `--version` and `--help`, so this module imports only argparse and
textwrap, and argparse builds the parser of the one command being run: a third-party parser
(typer over click) took longer to import than Python takes to start. argparse is used for
parsing only: its errors are turned into the messages below and its help (whose layout changes
between Python versions) is not used.
"""
from __future__ import annotations

import argparse
import os

PROG = "cudnn-setup"
SUMMARY = ("Install NVIDIA cuDNN from an archive into a CUDA toolkit, configure Theano for it, "
           "and prove that it works.")
WIDTH = 78  # help lines, as wide as they were
HELP_LINE = "Show this message and exit."


class Opt:
    """An option: `flags` ("-o", "--output"), `metavar` (None: a flag, which takes no value),
    `dest` (the command function's keyword), `path` (the value is a Path), `repeat` (may be
    given more than once: a list), `check` (value, environment) -> why it is refused, or None."""

    def __init__(self, *flags: str, metavar: str | None = None, help: str = "",
                 dest: str | None = None, path: bool = False, repeat: bool = False,
                 check=None):
        self.flags, self.metavar, self.help = flags, metavar, help
        self.dest = dest or flags[-1].lstrip("-").replace("-", "_")
        if self.dest in ("from", "json"):  # keywords and the CLI's own flag
            self.dest += "_"
        self.path, self.repeat, self.check = path, repeat, check

    @property
    def name(self) -> str:
        return self.flags[-1]

    def said(self, help: str, **changes) -> Opt:
        """The same option with another help sentence (a command's own meaning of it)."""
        keep = dict(metavar=self.metavar, dest=self.dest, path=self.path, repeat=self.repeat,
                    check=self.check)
        keep.update(changes)
        return Opt(*self.flags, help=help, **keep)


class Arg:
    """A positional argument: `metavar` as shown, `dest`, `required`, `many` (one or more)."""

    def __init__(self, metavar: str, dest: str, help: str, required: bool = True,
                 many: bool = False, path: bool = False):
        self.metavar, self.dest, self.help = metavar, dest, help
        self.required, self.many, self.path = required, many, path


class Command:
    def __init__(self, name: str, target: str, summary: str, arguments: tuple[Arg, ...],
                 options: tuple[Opt, ...]):
        self.name, self.target, self.summary = name, target, summary
        self.arguments, self.options = arguments, options

    def usage(self) -> str:
        shown = []
        for a in self.arguments:
            word = a.metavar + ("..." if a.many and not a.metavar.endswith("...") else "")
            shown.append(word if a.required else f"[{word}]")
        return " ".join([f"Usage: {PROG} {self.name} [OPTIONS]", *shown])


def interpreter(value: str, env) -> str | None:
    """--python must name a program that exists, or a test of Theano there would be
    meaningless."""
    import shutil

    from cudnn_setup.text import escape

    found = shutil.which(value, path=env.get("PATH", os.defpath)) if "/" not in value else (
        value if os.path.isfile(value) and os.access(value, os.X_OK) else None)
    if found is not None:
        return None
    why = ("does not exist" if not os.path.lexists(value) else
           "is not an executable file") if "/" in value else "is not on PATH"
    return f"the interpreter {escape(value)} {why}"


# Every option that takes a value names it (metavar); a flag shows none, so help never
# suggests `--json true`. tests/test_startup.py reads the help of every command.
_RC_DEFAULT = "(default: last entry of $THEANORC, else ~/.theanorc)"
JSON = Opt("--json", help="one JSON object on stdout; human output on stderr")
CUDA_ROOT = Opt("--cuda-root", metavar="DIR", path=True, help="CUDA root (default: discovered)")
THEANORC = Opt("--theanorc", metavar="FILE", path=True,
               help=f"Theano config to write {_RC_DEFAULT}")
PYTHON = Opt("--python", metavar="EXE", check=interpreter,
             help="interpreter whose Theano and frameworks are checked (default: the one "
                  "running cudnn-setup)")
LIB_DIR = Opt("--lib-dir", metavar="DIR", path=True,
              help="check the cuDNN in this directory instead of the root's (a copy by hand, "
                   "/usr/lib/<triple>, a wheel's nvidia/cudnn/lib)")
INCLUDE_DIR = Opt("--include-dir", metavar="DIR", path=True,
                  help="its headers (default: where its layout keeps them)")
NO_FRAMEWORKS = Opt("--no-frameworks", help="do not look at what the deep-learning frameworks "
                                            "of --python load")
NO_THEANO = Opt("--no-theano", help="skip the Theano check")
HEADER = Opt("--header", metavar="'NAME: VALUE'", dest="headers", repeat=True,
             help="extra HTTP header, e.g. 'Authorization: Bearer …' (repeatable; never "
                  "printed)")
CACHE = Opt("--cache-dir", metavar="DIR", path=True,
            help="download cache (default: $XDG_CACHE_HOME/cudnn-setup)")
DRY_RUN = Opt("--dry-run", help="print the plan, change nothing")
SHA256 = Opt("--sha256", metavar="HEX", help="expected checksum")
MIRROR = Opt("--mirror", metavar="URL|DIR",
             help="copy of NVIDIA's cudnn/redist/ tree: http(s) URL, file:// URL or directory "
                  "(default: $CUDNN_SETUP_MIRROR, then the config files, then NVIDIA's)")
CUDA = Opt("--cuda", metavar="N", help="CUDA version the build must fit, e.g. 12 (default: the "
                                       "root's)")
FROM = Opt("--from", metavar="nvidia|pypi|MIRROR",
           help="where versions come from: nvidia, pypi (the nvidia-cudnn-cuNN wheels on the "
                "index pip would use), or a mirror's URL or directory (default: --mirror's "
                "order)")
INDEX_URL = Opt("--index-url", metavar="URL",
                help="the PyPI index to read (implies --from pypi; default: pip's: "
                     "PIP_INDEX_URL, pip.conf, pypi.org)")

COMMANDS = {c.name: c for c in (
    Command("inspect", "inspect:inspect", "Validate and describe an archive; install nothing.",
            (Arg("ARCHIVE", "archive", "cuDNN archive (.tgz, .tar.xz)", path=True),),
            (CUDA_ROOT.said("also judge whether it fits this CUDA root"), JSON)),
    Command("download", "download:download",
            "Download an archive (or a version's archive or wheel) into the cache (resumable, "
            "checksummed).",
            (Arg("URL|VERSION", "url", "http(s) URL of a cuDNN archive, or a version (9, 9.17, "
                                       "9.17.0.29) to fetch from --from"),),
            (Opt("-o", "--output", metavar="DIR", path=True,
                 help="directory to place the archive in (default: the cache)"),
             SHA256, HEADER, CACHE, FROM, INDEX_URL, MIRROR, CUDA,
             CUDA_ROOT.said("CUDA root whose version picks the build"), JSON)),
    Command("install", "install:install",
            "Install cuDNN from an archive into a CUDA root, configure Theano, verify.",
            (Arg("SOURCE", "source", "archive path, http(s)/file URL, or a version (9, 9.17, "
                                     "9.17.0.29) to fetch"),),
            (CUDA_ROOT, SHA256, THEANORC,
             Opt("--no-theanorc", help="leave Theano's config alone"), PYTHON,
             Opt("--no-verify", help="skip verification"), DRY_RUN,
             Opt("--force", help="reinstall; replace changed files"),
             Opt("--ldconfig", help="register the library dir in /etc/ld.so.conf.d and run "
                                    "ldconfig"),
             HEADER, CACHE, CUDA, MIRROR, FROM, INDEX_URL,
             Opt("--with-deps", help="with --from pypi: also place the cuBLAS/NVRTC libraries "
                                     "the wheel declares and the root lacks, in the same "
                                     "transaction"),
             NO_FRAMEWORKS,
             Opt("--verify-content", help="to tell whether the archive is already installed, "
                                          "hash the installed files (default: their stat)"),
             JSON)),
    Command("uninstall", "uninstall:uninstall",
            "Remove the cuDNN the tool installed and put back what it replaced.", (),
            (CUDA_ROOT, DRY_RUN, Opt("--force", help="also remove files changed since install"),
             JSON)),
    Command("repair", "repair:repair",
            "Put a managed install back as its manifest records it: missing or changed files, "
            "links and modes.", (), (CUDA_ROOT, DRY_RUN, JSON)),
    Command("theanorc", "theanorc:theanorc", "Write the cuDNN settings into Theano's config.", (),
            (CUDA_ROOT, THEANORC, DRY_RUN.said("show the diff, change nothing"), JSON)),
    Command("verify", "verify:verify",
            "Check, layer by layer, that cuDNN is installed right and works.", (),
            (CUDA_ROOT, THEANORC.said(f"Theano config the Theano check reads {_RC_DEFAULT}"),
             PYTHON, NO_THEANO,
             Opt("--deep", help="hash every installed file, even those whose inode, size, "
                                "mtime and ctime are unchanged"),
             LIB_DIR, INCLUDE_DIR, NO_FRAMEWORKS, JSON)),
    Command("doctor", "doctor:doctor",
            "Diagnose cuDNN on this machine; explain a Theano startup line.",
            (Arg("MESSAGE", "message", "a Theano startup line to explain", required=False),),
            (CUDA_ROOT, PYTHON, LIB_DIR, INCLUDE_DIR, JSON)),
    Command("bench", "bench:bench",
            "Theano conv net with cuDNN vs without; cuDNN's algorithm timings on the GPU.", (),
            (CUDA_ROOT, THEANORC.said(f"Theano config the benchmark reads {_RC_DEFAULT}"),
             PYTHON, NO_THEANO.said("only cuDNN's own timings"), JSON)),
    Command("list", "list:list_releases",
            "The cuDNN versions published for this machine, newest first; which one is "
            "installed.", (),
            (CUDA, CUDA_ROOT, MIRROR, FROM, INDEX_URL, HEADER,
             Opt("--platform", metavar="P",
                 help="NVIDIA's platform instead of this machine's: linux-x86_64, linux-sbsa, "
                      "linux-aarch64 (Jetson), linux-ppc64le, windows-x86_64, windows-arm64"),
             JSON)),
    Command("mirror", "mirror:mirror",
            "Build a directory in NVIDIA's redist layout that --mirror and any web server "
            "serve.",
            (Arg("DIR", "directory", "the mirror directory to build or update", path=True),
             Arg("VERSION...", "versions", "versions to hold (9, 9.28, 9.28.0.42)", many=True)),
            (CUDA.said("CUDA major to hold builds for (repeatable; default: the root's)",
                       dest="cudas", repeat=True),
             Opt("--platform", metavar="KEY", dest="platforms", repeat=True,
                 help="NVIDIA platform key, e.g. linux-sbsa (repeatable; default: this "
                      "machine's)"),
             FROM.said("nvidia (default), pypi (wheels repacked in NVIDIA's layout), or another "
                       "mirror's URL or directory"),
             INDEX_URL, HEADER, CUDA_ROOT, JSON)),
)}
TOP_OPTIONS = (Opt("--version", help="print the version"),)


class ArgsError(Exception):
    """A command line that does not parse: exit 2 (USAGE). `command` is the word given as the
    command ("" when none was), `about` the Command whose usage applies (None: the program's),
    `hint` what to do instead."""

    def __init__(self, message: str, command: str = "", about: Command | None = None,
                 hint: str = ""):
        super().__init__(message)
        self.message, self.command, self.about = message, command, about
        self.hint = hint or f"see `{self.help_command()}`"

    def help_command(self) -> str:
        return " ".join([PROG, *([self.about.name] if self.about else []), "--help"])

    def shown(self) -> str:
        """What stderr shows: the usage line, where help is, the error."""
        usage = self.about.usage() if self.about else _top_usage()
        return f"{usage}\nTry '{self.help_command()}' for help.\n\nError: {self.message}"


class Parsed:
    """What the command line asks for: `help` (the text; `code` 0, or 2 when nothing at all
    was given and it goes to stderr), `version`, else `command` and the keyword `values` its
    function takes; `as_json` for --json."""

    def __init__(self, command: Command | None = None, values: dict | None = None,
                 as_json: bool = False, help: str | None = None, version: bool = False,
                 code: int = 0):
        self.command, self.values, self.as_json = command, values or {}, as_json
        self.help, self.version, self.code = help, version, code


class _Refused(Exception):
    """argparse's own error() (a case not turned into ArgumentError): its message as given."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise _Refused(message)


def parse(argv: list[str], env) -> Parsed:
    """Read argv (the words after the program's name); `env` is the command's environment (the
    PATH --python is looked up in)."""
    if not argv:
        return Parsed(help=help_text(None), code=2)
    first = argv[0]
    if first.startswith("-"):
        before = argv[:argv.index("--")] if "--" in argv else argv
        if "--version" in before:
            return Parsed(version=True)
        if "--help" in before:
            return Parsed(help=help_text(None))
        raise ArgsError(f"No such option: {first}")
    command = COMMANDS.get(first)
    if command is None:
        raise ArgsError(f"No such command '{first}'.", first)
    words = argv[1:]
    if "--help" in (words[:words.index("--")] if "--" in words else words):
        return Parsed(command, help=help_text(command))
    values = _values(command, words, env)
    as_json = values.pop("json_")
    return Parsed(command, values, as_json=as_json)


def _values(command: Command, words: list[str], env) -> dict:
    parser = _Parser(prog=f"{PROG} {command.name}", add_help=False, allow_abbrev=False,
                     exit_on_error=False)
    for opt in command.options:
        if opt.metavar is None:
            parser.add_argument(*opt.flags, dest=opt.dest, action="store_true")
        else:
            parser.add_argument(*opt.flags, dest=opt.dest, metavar=opt.metavar,
                                action="append" if opt.repeat else "store")
    for arg in command.arguments:  # how many is checked below, to say it as the tool does
        parser.add_argument(arg.dest, metavar=arg.metavar, nargs="*" if arg.many else "?")

    def refused(message: str, hint: str = "") -> ArgsError:
        return ArgsError(message, command.name, command, hint)

    try:
        got, extra = parser.parse_known_args(words)
    except argparse.ArgumentError as exc:
        opt = _option(command, exc.argument_name)
        if opt is None:
            raise refused(str(exc)) from None
        if opt.metavar is None:  # --json=true
            raise refused(f"Option '{opt.name}' does not take a value.",
                          _flag_hint(opt.name)) from None
        raise refused(f"Option '{_given(words, opt)}' requires an argument.") from None
    except _Refused as exc:
        raise refused(str(exc)) from None
    unknown = [w for w in extra if w.startswith("-") and w != "-"]
    if unknown:
        raise refused(f"No such option: {unknown[0]}")
    last = command.arguments[-1] if command.arguments else None
    if extra and last is not None and last.many:  # `mirror DIR 9 --cuda 12 9.1`: words after
        setattr(got, last.dest, [*(getattr(got, last.dest) or []), *extra])  # an option
        extra = []
    if extra:
        raise refused(f"Got unexpected extra argument(s) ({' '.join(extra)})",
                      _extra_hint(command, words, extra))
    values = vars(got)
    # An empty word is never a value the tool can use, and as a path it would be the current
    # directory (Path("") is "."): `--cuda-root=` must not mean "here".
    for opt in command.options:
        given = values[opt.dest]
        if opt.metavar is not None and given is not None and "" in (
                given if opt.repeat else [given]):
            raise refused(f"Invalid value for '{opt.name}': it is empty",
                          f"give {opt.metavar} after {opt.name}, or leave the option out")
    for arg in command.arguments:
        value = values[arg.dest]
        if value is not None and "" in (value if arg.many else [value]):
            raise refused(f"Invalid value for '{arg.metavar}': it is empty")
        if arg.required and (value is None or value == []):
            raise refused(f"Missing argument '{arg.metavar}'.")
        if arg.path and value is not None:
            values[arg.dest] = [_path(v) for v in value] if arg.many else _path(value)
    for opt in command.options:
        value = values[opt.dest]
        if opt.repeat and value is None:
            values[opt.dest] = []
        elif opt.path and value is not None:
            values[opt.dest] = _path(value)
        if opt.check is not None and value is not None:
            why = opt.check(value, env)
            if why:
                raise refused(f"Invalid value for '{opt.name}': {why}")
    return values


def _path(value: str):
    from pathlib import Path

    return Path(value)


def _option(command: Command, name: str | None) -> Opt | None:
    """The option an argparse error names ("-o/--output")."""
    names = set((name or "").split("/"))
    return next((o for o in command.options if names & set(o.flags)), None)


def _given(words: list[str], opt: Opt) -> str:
    """The spelling of the option the user gave (-o or --output)."""
    return next((w for w in reversed(words) if w in opt.flags), opt.name)


_BOOL_WORDS = {"true", "false", "yes", "no", "on", "off", "1", "0"}


def _flag_hint(flag: str) -> str:
    return f"{flag} is a flag and takes no value: give {flag} alone, or leave it out"


def _extra_hint(command: Command, words: list[str], extra: list[str]) -> str:
    """`--json true` reads as a value given to a flag; say that flags take none."""
    flags = {f for o in command.options if o.metavar is None for f in o.flags}
    for before, word in zip(words, words[1:]):
        if word in extra and word.lower() in _BOOL_WORDS and before in flags:
            return _flag_hint(before)
    return ""


def _top_usage() -> str:
    return f"Usage: {PROG} [OPTIONS] COMMAND [ARGS]..."


def help_text(command: Command | None) -> str:
    """A command's help (the program's with None), plain text as wide as WIDTH."""
    if command is None:
        rows = [(o.flags[-1], o.help) for o in TOP_OPTIONS] + [("--help", HELP_LINE)]
        return "\n".join([_top_usage(), "", *_wrap(SUMMARY, "  ", "  "), "",
                          "Options:", *_table(rows), "",
                          "Commands:", *_table([(c.name, c.summary) for c in COMMANDS.values()])])
    lines = [command.usage(), "", *_wrap(command.summary, "  ", "  "), ""]
    if command.arguments:
        lines += ["Arguments:", *_table([(a.metavar, a.help + ("  [required]" if a.required
                                                                else ""))
                                         for a in command.arguments]), ""]
    rows = [(", ".join(o.flags) + (f" {o.metavar}" if o.metavar else ""), o.help)
            for o in command.options]
    lines += ["Options:", *_table(rows + [("--help", HELP_LINE)])]
    return "\n".join(lines)


def _table(rows: list[tuple[str, str]]) -> list[str]:
    """Two columns, the second wrapped beside the first (at most 30 wide, as click did)."""
    width = min(max(len(left) for left, _ in rows), 30)
    out = []
    for left, text in rows:
        indent = " " * (2 + width + 2)
        if len(left) > width:
            out.append(f"  {left}")
            out += _wrap(text, indent, indent)
        else:
            out += _wrap(text, f"  {left.ljust(width)}  ", indent)
    return out


def _wrap(text: str, first: str, rest: str) -> list[str]:
    import textwrap

    return textwrap.wrap(text, WIDTH, initial_indent=first, subsequent_indent=rest,
                         break_on_hyphens=False, break_long_words=False) or [first.rstrip()]
