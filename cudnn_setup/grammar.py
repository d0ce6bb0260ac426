"""The command line's grammar, in one table: every command, its arguments and options with their
value names, help sentences and environment variables, and the error a command line that does
not fit it raises (`ArgsError`, exit 2). arguments.py reads argv against it; typer_app.py builds
the typer app (help, completion, suggestions) from it. Standard library only: `--version` needs
nothing else.
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
                     "$CUDA_PATH, $CUDA_HOME, nvcc on PATH, /usr/local/cuda, the newest "
                     "/usr/local/cuda-X.Y, /opt/cuda)")
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
            (Arg("ARCHIVE", "archive", "cuDNN archive (.tgz, .tar.xz) or NVIDIA's cuDNN wheel "
                                       "(.whl)", path=True),),
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
            "Install cuDNN from an archive, a wheel or a version into a CUDA root, configure "
            "Theano, verify.",
            (Arg("SOURCE", "source", "an archive (.tgz, .tar.xz) or NVIDIA's cuDNN wheel (.whl), "
                                     "as a path or an http(s)/file URL; or a version (9, 9.17, "
                                     "9.17.0.29) to fetch from NVIDIA, --mirror, or a PyPI "
                                     "index with --from pypi"),),
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
             FORCE_THEANO_CUDNN,
             PYTHON.said("interpreter whose Theano the config serves: its numpy decides "
                         "[blas] ldflags (default: the one running cudnn-setup)"), JSON)),
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


def top_usage() -> str:
    return f"Usage: {PROG} [OPTIONS] COMMAND [ARGS]..."
