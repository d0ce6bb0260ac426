"""The command line's grammar, in one table: every command, its arguments and options with their
value names, help sentences and environment variables. `parse()` reads argv and returns what to
run, or raises `ArgsError` (exit 2); `help_text()` writes a command's help.

The words are read here once, left to right (linear however many options are given): which are
options, their values, the arguments. typer (cudnn_setup/typer_app.py, built from this table)
then judges a command line cut to one occurrence of each option (click's parser is quadratic in
the number of words), writes help, suggests and completes. `--version` needs none of it, so
typer is imported only past that point.
"""
from __future__ import annotations

import os

PROG = "cudnn-setup"
SUMMARY = ("Install NVIDIA cuDNN from an archive into a CUDA toolkit, configure Theano for it, "
           "and prove that it works.")
HELP_FLAGS = ("-h", "--help")


class Opt:
    """An option: `flags` ("-o", "--output"), `metavar` (None: a flag, which takes no value),
    `dest` (the command function's keyword), `path` (the value is a Path), `repeat` (may be
    given more than once: a list), `check` (value, environment, working directory) -> why it is
    refused, or None; `env` the environment variable shown in help as its default, read here when
    `env_here` (else by the layer below, which knows where it stands among other sources);
    `only_if_given`: the keyword is passed only when the flag is given."""

    def __init__(self, *flags: str, metavar: str | None = None, help: str = "",
                 dest: str | None = None, path: bool = False, repeat: bool = False,
                 check=None, env: str | None = None, env_here: bool = False,
                 only_if_given: bool = False):
        self.flags, self.metavar, self.help = flags, metavar, help
        self.dest = dest or flags[-1].lstrip("-").replace("-", "_")
        if self.dest in ("from", "json"):  # keywords and the CLI's own flag
            self.dest += "_"
        self.path, self.repeat, self.check = path, repeat, check
        self.env, self.env_here, self.only_if_given = env, env_here, only_if_given

    @property
    def name(self) -> str:
        return self.flags[-1]

    def default(self, env) -> str | None:
        """The value when the option is not given: its variable's, where the CLI reads it (an
        empty variable is unset)."""
        return (env.get(self.env) or None) if self.env and self.env_here else None

    def said(self, help: str, **changes) -> Opt:
        """The same option with another help sentence (a command's own meaning of it)."""
        keep = dict(metavar=self.metavar, dest=self.dest, path=self.path, repeat=self.repeat,
                    check=self.check, env=self.env, env_here=self.env_here,
                    only_if_given=self.only_if_given)
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


def interpreter(value: str, env, cwd) -> str | None:
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


SOURCES = ("nvidia", "pypi")


def versions_source(value: str, env, cwd) -> str | None:
    """--from: nvidia, pypi, a URL or a directory that exists. A misspelt source name is not
    taken for a mirror directory (that would fail later as a download, exit 6)."""
    from pathlib import Path

    if value in SOURCES or "://" in value or value.lower().startswith("file:") or (
            Path(cwd or ".") / value).is_dir():
        return None
    return "it is neither nvidia, pypi, a URL nor an existing directory"


def versions_source_hint(value: str) -> str:
    import difflib

    close = difflib.get_close_matches(value.lower(), SOURCES, n=1, cutoff=0.5)
    return (f"did you mean {close[0]}?" if close else
            "give nvidia, pypi, a mirror's URL or an existing mirror directory")


# Every option that takes a value names it (metavar); a flag shows none, so help never
# suggests `--json true`. tests/test_startup.py reads the help of every command.
_RC_DEFAULT = "(default: last entry of $THEANORC, else ~/.theanorc)"
JSON = Opt("--json", help="one JSON object on stdout; human output on stderr")
CUDA_ROOT = Opt("--cuda-root", metavar="DIR", path=True, env="CUDNN_SETUP_CUDA_ROOT", env_here=True,
                help="CUDA root (default: $CUDNN_SETUP_CUDA_ROOT, else discovered: $CUDA_ROOT, "
                     "$CUDA_PATH, $CUDA_HOME, nvcc on PATH, /usr/local/cuda, /opt/cuda)")
THEANORC = Opt("--theanorc", metavar="FILE", path=True,
               help=f"Theano config to write {_RC_DEFAULT}")
FORCE_THEANO_CUDNN = Opt("--force-theano-cudnn",
                         help="write optimizer_including=cudnn even for a cuDNN Theano 1.0.5 "
                              "cannot use (v8 and later), which makes it stop on a GPU")
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
CACHE = Opt("--cache-dir", metavar="DIR", path=True, env="CUDNN_SETUP_CACHE_DIR", env_here=True,
            help="download cache (default: $CUDNN_SETUP_CACHE_DIR, else "
                 "$XDG_CACHE_HOME/cudnn-setup)")
DRY_RUN = Opt("--dry-run", help="print the plan, change nothing")
SHA256 = Opt("--sha256", metavar="HEX", help="expected checksum")
MIRROR = Opt("--mirror", metavar="URL|DIR", env="CUDNN_SETUP_MIRROR",
             help="copy of NVIDIA's cudnn/redist/ tree: http(s) URL, file:// URL or directory "
                  "(default: $CUDNN_SETUP_MIRROR, then the config files, then NVIDIA's)")
CUDA = Opt("--cuda", metavar="N", help="CUDA version the build must fit, e.g. 12 (default: the "
                                       "root's)")
FROM = Opt("--from", metavar="nvidia|pypi|MIRROR", check=versions_source,
           help="where versions come from: nvidia, pypi (the nvidia-cudnn-cuNN wheels on the "
                "index pip would use), or a mirror's URL or directory (default: --mirror's "
                "order)")
INDEX_URL = Opt("--index-url", metavar="URL", env="PIP_INDEX_URL",
                help="the PyPI index to read (implies --from pypi; default: pip's: "
                     "PIP_INDEX_URL, pip.conf, pypi.org)")

# Passed only when given, so that a command built before the flag existed still runs.
FORCE_THEANO_CUDNN.only_if_given = True

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
             FORCE_THEANO_CUDNN,
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
            (CUDA_ROOT, THEANORC, DRY_RUN.said("show the diff, change nothing"),
             FORCE_THEANO_CUDNN, JSON)),
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
        usage = self.about.usage() if self.about else top_usage()
        return f"{usage}\nTry '{self.help_command()}' for help.\n\nError: {self.message}"


class Parsed:
    """What the command line asks for: `help` (the text; `code` 0, or 2 when nothing at all
    was given and it goes to stderr), `version`, `done` (typer answered it already: shell
    completion; `code` its exit code), else `command` and the keyword `values` its function
    takes; `as_json` for --json."""

    def __init__(self, command: Command | None = None, values: dict | None = None,
                 as_json: bool = False, help: str | None = None, version: bool = False,
                 code: int = 0, done: bool = False):
        self.command, self.values, self.as_json = command, values or {}, as_json
        self.help, self.version, self.code, self.done = help, version, code, done


def parse(argv: list[str], env, cwd=None) -> Parsed:
    """Read argv (the words after the program's name); `env` is the command's environment (the
    PATH --python is looked up in, the variables options default to), `cwd` the directory
    relative paths are read from."""
    if not argv:
        return Parsed(help=help_text(None), code=2)
    first = argv[0]
    if first.startswith("-"):
        before = argv[:argv.index("--")] if "--" in argv else argv
        if "--version" in before:
            return Parsed(version=True)
        if any(flag in before for flag in HELP_FLAGS):
            return Parsed(help=help_text(None))
    command = COMMANDS.get(first)
    if command is None:  # the program's own options (completion), or what it does not know
        from cudnn_setup import typer_app

        return Parsed(done=True, code=typer_app.run_top(argv))
    words = Words(command, argv[1:])
    if words.help:
        return Parsed(command, help=help_text(command))
    values = _values(command, words, env, cwd)
    as_json = values.pop("json_")
    return Parsed(command, values, as_json=as_json)


class Words:
    """A command's words read once, left to right: each option's values (`given`, by dest, in
    order, with the spelling used), the arguments, and `judge`: the same command line with each
    option once and one word of a repeatable argument, which is what typer is handed (what it
    would refuse in the whole line it refuses in this one)."""

    def __init__(self, command: Command, words: list[str]):
        takes_value = {f: o for o in command.options if o.metavar is not None for f in o.flags}
        flags = {f: o for o in command.options if o.metavar is None for f in o.flags}
        self.given: dict[str, list[tuple[str, str | None]]] = {}
        self._repeat: dict[str, bool] = {}
        self.arguments: list[str] = []
        self.help = False
        self.words = words
        unknown: list[str] = []
        i, n = 0, len(words)
        while i < n:
            word = words[i]
            i += 1
            if word == "--":
                self.arguments += words[i:]
                break
            name, eq, value = word.partition("=") if word.startswith("--") else (word, "", "")
            if word in takes_value:
                if i == n or _an_option(words[i]):  # `--cuda-root --json`: never the value
                    raise ArgsError(f"Option '{word}' requires an argument.", command.name,
                                    command)
                self._add(takes_value[word], word, words[i])
                i += 1
            elif eq and name in takes_value:
                self._add(takes_value[name], name, value)
            elif word in flags:
                self._add(flags[word], word, None)
            elif word in HELP_FLAGS:
                self.help = True
            elif _an_option(word):  # unknown, `--json=yes`, `-oDIR`: typer judges it
                unknown.append(word)
            else:
                self.arguments.append(word)
        fixed = [a for a in command.arguments if not a.many]
        many = len(command.arguments) > len(fixed)
        shown = self.arguments[:len(fixed) + 1] if many else self.arguments
        options = []
        for dest, values in self.given.items():
            spelling, value = values[0] if self._repeat[dest] else values[-1]
            options.append(spelling if value is None else f"{_long(command, dest)}={value}")
        self.judge = [*unknown, *options, "--", *shown]
        self.command, self.unknown = command, unknown

    def values(self, env) -> dict | None:
        """The keyword values, read without typer where typer would have nothing to say: no
        word it would refuse (an unknown option, a value given to a flag), the arguments there
        and not too many. None: typer judges (tests/test_arguments.py holds both to the same
        answers)."""
        command, count = self.command, len(self.arguments)
        needed = sum(a.required for a in command.arguments)
        many = any(a.many for a in command.arguments)
        if self.unknown or count < needed or (not many and count > len(command.arguments)):
            return None
        values: dict = {}
        for opt in command.options:
            got = [value for _, value in self.given.get(opt.dest, [])]
            if opt.metavar is None:
                values[opt.dest] = bool(got)
            elif opt.repeat:
                values[opt.dest] = got
            else:
                values[opt.dest] = got[-1] if got else opt.default(env)
        for i, arg in enumerate(command.arguments):
            values[arg.dest] = self.arguments[i:] if arg.many else (
                self.arguments[i] if i < count else None)
        return values

    def _add(self, opt: Opt, spelling: str, value: str | None) -> None:
        self._repeat[opt.dest] = opt.repeat
        self.given.setdefault(opt.dest, []).append((spelling, value))


def _an_option(word: str) -> bool:
    """What argparse took for an option: a dash and more, but not a negative number."""
    if not word.startswith("-") or word == "-":
        return False
    try:
        float(word)
        return False
    except ValueError:
        return True


def _long(command: Command, dest: str) -> str:
    return next(o.name for o in command.options if o.dest == dest)


def _values(command: Command, words: Words, env, cwd) -> dict:
    values = words.values(env)
    if values is None:
        values = _judged(command, words, env)

    def refused(message: str, hint: str = "") -> ArgsError:
        return ArgsError(message, command.name, command, hint)

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
        if arg.path and value is not None:
            values[arg.dest] = [_path(v) for v in value] if arg.many else _path(value)
    for opt in command.options:
        value = values[opt.dest]
        if opt.path and value is not None:
            values[opt.dest] = _path(value)
        if opt.check is not None and value is not None:
            why = opt.check(value, env, cwd)
            if why:
                hint = versions_source_hint(value) if opt.check is versions_source else ""
                raise refused(f"Invalid value for '{opt.name}': {why}", hint)
        if opt.only_if_given and not value:
            del values[opt.dest]
    return values


def _judged(command: Command, words: Words, env) -> dict:
    """The values as typer reads them (or its refusal, with the tool's hints)."""
    from cudnn_setup import typer_app

    try:
        values = typer_app.judge(command, words.judge, env)
    except ArgsError as exc:
        if exc.message.endswith("does not take a value."):  # --json=yes
            exc.hint = _flag_hint(exc.message.split("'")[1])
        elif exc.message.startswith("Got unexpected extra argument"):  # --json true
            exc.hint = _extra_hint(command, words.words) or exc.hint
        raise
    # what typer saw once, as given: every value of a repeatable option, every argument
    for opt in command.options:
        if opt.repeat:
            values[opt.dest] = [v for _, v in words.given.get(opt.dest, [])] or (
                list(values[opt.dest] or []))
    last = command.arguments[-1] if command.arguments else None
    if last is not None and last.many:
        values[last.dest] = words.arguments[len(command.arguments) - 1:]
    return values


def _path(value: str):
    from pathlib import Path

    return Path(value)


_BOOL_WORDS = {"true", "false", "yes", "no", "on", "off", "1", "0"}


def _flag_hint(flag: str) -> str:
    return f"{flag} is a flag and takes no value: give {flag} alone, or leave it out"


def _extra_hint(command: Command, words: list[str]) -> str:
    """`--json true` reads as a value given to a flag; say that flags take none."""
    flags = {f for o in command.options if o.metavar is None for f in o.flags}
    for before, word in zip(words, words[1:]):
        if word.lower() in _BOOL_WORDS and before in flags:
            return _flag_hint(before)
    return ""


def top_usage() -> str:
    return f"Usage: {PROG} [OPTIONS] COMMAND [ARGS]..."


def help_text(command: Command | None) -> str:
    """A command's help (the program's with None), as typer writes it."""
    from cudnn_setup import typer_app

    return typer_app.help_text(command)
