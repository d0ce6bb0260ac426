"""Start-up: what a command imports is what it uses.

Each case runs the CLI in a fresh interpreter and reads back the modules it had loaded when it
exited. `install --no-verify` of a local archive must not load the download stack (requests,
urllib3), rich, a validation library, Theano's config merger or markdown rendering; `--version`
and a command line typer would have nothing to say about load nothing outside the standard
library; `--help`, completion and refusals load typer and what it needs alone (not pydantic,
which typer from 0.29 imports while parsing: pyproject.toml pins 0.28), and no command. The exact set of the tool's own modules an install
loads is pinned, so a new top-level import that drags a layer in fails here and is either made
lazy or added to the list on purpose; so is how many modules parsing adds to Python's own.
"""
import glob
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, clean_env

SAMPLE = REPO / "fixtures" / "samples" / "cudnn-10.0-linux-x64-v7.4.2.24.tgz"

# Run main() as the console script does, then print the modules loaded (stdout is the CLI's,
# so the list goes to a file named by argv[1]).
CHILD = r"""
import atexit, json, sys
out, argv = sys.argv[1], sys.argv[2:]
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
from cudnn_setup.cli import main
sys.exit(main(argv))
"""

# Never for a local install: the network stack, terminal rendering, validation, Theano.
NEVER = {"requests", "urllib3", "charset_normalizer", "idna", "certifi", "rich", "pydantic",
         "pydantic_core", "markdown_it", "pygments", "configupdater", "numpy", "theano",
         "ssl", "http.client", "email.parser", "distro"}
# What parsing the command line may load besides the standard library: typer (with its own
# click) and the two small packages it imports.
PARSER = {"typer", "shellingham", "annotated_doc"}
# The tool's own modules `--version` loads: the grammar, the error codes, text.
VERSION_MODULES = {"cudnn_setup", "cudnn_setup.arguments", "cudnn_setup.cli", "cudnn_setup.errors",
                   "cudnn_setup.grammar", "cudnn_setup.text"}
# and `--help`: the typer application built from the grammar
PARSER_MODULES = VERSION_MODULES | {"cudnn_setup.typer_app"}
# How many modules help or a refusal adds to what Python's own start loads: 99 and 101 with
# typer 0.28.0 on Python 3.11 (typer 0.29.1 adds pydantic: about 250).
PARSER_GROWTH = 115
# And an install of a local .tgz: ELF parsing, version numbers, ISA-L, BLAKE3 (the installed
# files' content hash); not typer, which has nothing to say about a command line that parses.
# msgspec defines the tool's records (with typing_extensions, which it imports).
INSTALL = {"elftools", "packaging", "isal", "blake3", "msgspec", "typing_extensions"}

INSTALL_MODULES = {
    "cudnn_setup", "cudnn_setup.archive", "cudnn_setup.archive.decoder_choice",
    "cudnn_setup.archive.decoders", "cudnn_setup.archive.headers",
    "cudnn_setup.archive.library_facts",
    "cudnn_setup.archive.listing",
    "cudnn_setup.archive.package", "cudnn_setup.archive.problems",
    "cudnn_setup.archive.reader", "cudnn_setup.archive.rules", "cudnn_setup.archive.staging",
    "cudnn_setup.trees", "cudnn_setup.archive.xz_index",
    "cudnn_setup.archive.wheel", "cudnn_setup.archive.whole_file", "cudnn_setup.arguments",
    "cudnn_setup.grammar",
    "cudnn_setup.state.trust", "cudnn_setup.state.view", "cudnn_setup.state.writable",
    "cudnn_setup.facts.clients",
    "cudnn_setup.probing", "cudnn_setup.probing.answer_values", "cudnn_setup.probing.driver",
    "cudnn_setup.probing.load_answer",
    "cudnn_setup.probing.probe", "cudnn_setup.child",
    "cudnn_setup.cli", "cudnn_setup.commands", "cudnn_setup.commands.install",
    "cudnn_setup.console", "cudnn_setup.digest", "cudnn_setup.durable", "cudnn_setup.errors",
    "cudnn_setup.facts", "cudnn_setup.facts.composition", "cudnn_setup.facts.cuda",
    "cudnn_setup.facts.cudnn", "cudnn_setup.facts.dependencies", "cudnn_setup.facts.elf",
    "cudnn_setup.facts.gpu_support", "cudnn_setup.facts.host", "cudnn_setup.facts.ldresolve",
    "cudnn_setup.facts.ldresolve.environment", "cudnn_setup.facts.ldresolve.ldconfig",
    "cudnn_setup.facts.ldresolve.loadable", "cudnn_setup.facts.ldresolve.loader_facts",
    "cudnn_setup.facts.ldresolve.process", "cudnn_setup.facts.ldresolve.read_once",
    "cudnn_setup.facts.ldresolve.rpath", "cudnn_setup.facts.ldresolve.runtime_names",
    "cudnn_setup.facts.ldresolve.search",
    "cudnn_setup.facts.loader", "cudnn_setup.facts.mounts", "cudnn_setup.fetch",
    "cudnn_setup.fetch.candidates", "cudnn_setup.fetch.checksums",
    "cudnn_setup.fetch.known_releases", "cudnn_setup.fetch.redist", "cudnn_setup.loader_traps",
    "cudnn_setup.orphans", "cudnn_setup.parallel",
    "cudnn_setup.placement",
    "cudnn_setup.placement.commit", "cudnn_setup.placement.engine",
    "cudnn_setup.placement.fit", "cudnn_setup.placement.judge",
    "cudnn_setup.placement.same_archive", "cudnn_setup.placement.targets",
    "cudnn_setup.private_dirs", "cudnn_setup.records", "cudnn_setup.report", "cudnn_setup.settings", "cudnn_setup.sources",
    "cudnn_setup.sources.base", "cudnn_setup.sources.local", "cudnn_setup.sources.pipconf",
    "cudnn_setup.state", "cudnn_setup.state.changed", "cudnn_setup.state.fields",
    "cudnn_setup.state.files",
    "cudnn_setup.state.journal", "cudnn_setup.state.layout", "cudnn_setup.state.manifest",
    "cudnn_setup.state.observe", "cudnn_setup.state.paths", "cudnn_setup.state.plan",
    "cudnn_setup.state.transaction", "cudnn_setup.steps", "cudnn_setup.steps.by_version",
    "cudnn_setup.steps.command_facts", "cudnn_setup.steps.command_wrapper",
    "cudnn_setup.steps.context",
    "cudnn_setup.steps.fetching", "cudnn_setup.steps.loader_step", "cudnn_setup.text",
    "cudnn_setup.untrusted", "cudnn_setup.urls",
}
# Nor what this install does not use: liblzma's binding is for a .tar.xz, concurrent.futures
# (with logging) for one worker thread.
NOT_FOR_A_TGZ = {"concurrent.futures", "logging", "cudnn_setup.archive.liblzma"}
# None of verify's checks, the frameworks' what-if or Theano's config step: this install has
# neither verify, nor frameworks, nor a .theanorc to write.
NOT_FOR_THIS_INSTALL = {"cudnn_setup.checks.suite", "cudnn_setup.checks.frameworks_check",
                        "cudnn_setup.checks.framework_whatif", "cudnn_setup.checks.coherence",
                        "cudnn_setup.checks.deps", "cudnn_setup.checks.gpu",
                        "cudnn_setup.checks.load_check", "cudnn_setup.checks.compile_check",
                        "cudnn_setup.checks.theano_check",
                        "cudnn_setup.steps.theano_step", "cudnn_setup.theanorc_merge"}


def loaded(tmp_path, home, *argv: str) -> tuple[int, set[str]]:
    out = tmp_path / "modules.json"
    done = subprocess.run([sys.executable, "-c", CHILD, str(out), *argv], cwd=REPO,
                          env=clean_env(home), capture_output=True, timeout=120)
    return done.returncode, set(json.loads(out.read_text()))


def baseline(tmp_path, home, imports: str = "") -> set[str]:
    """The modules Python's own start loads (site and what it imports), for comparison; with
    `imports` ("pathlib, re"), those too. The checkout is on sys.path by a plain .pth line, as
    an installed tool's package is, not by an import hook that loads modules of its own."""
    out = tmp_path / "python-alone.json"
    subprocess.run([sys.executable, "-c", f"import json, sys{', ' + imports if imports else ''}; "
                    "open(sys.argv[1], 'w').write(json.dumps(sorted(sys.modules)))", str(out)],
                   cwd=REPO, env=clean_env(home), check=True, timeout=60)
    return set(json.loads(out.read_text()))


def third_party(modules: set[str]) -> set[str]:
    return {m.split(".")[0] for m in modules} - set(sys.stdlib_module_names) - {
        "cudnn_setup", "__main__", "_distutils_hack", "sitecustomize", "usercustomize"}


def test_local_install_imports_only_what_it_uses(tmp_path, home, cuda_root):
    root = cuda_root("10.0")
    code, modules = loaded(tmp_path, home, "install", str(SAMPLE), "--cuda-root", str(root),
                           "--no-verify", "--no-theanorc", "--no-frameworks", "--json")
    assert code == 0
    assert not modules & NEVER, sorted(modules & NEVER)
    assert not modules & NOT_FOR_A_TGZ, sorted(modules & NOT_FOR_A_TGZ)
    assert third_party(modules) <= INSTALL, sorted(third_party(modules) - INSTALL)
    ours = {m for m in modules if m == "cudnn_setup" or m.startswith("cudnn_setup.")}
    assert ours == INSTALL_MODULES, {"new": sorted(ours - INSTALL_MODULES),
                                     "gone": sorted(INSTALL_MODULES - ours)}
    assert not ours & NOT_FOR_THIS_INSTALL


def test_version_loads_nothing_but_the_grammar(tmp_path, home):
    code, modules = loaded(tmp_path, home, "--version")
    assert code == 0
    assert third_party(modules) == set(), sorted(third_party(modules))
    python_alone = baseline(tmp_path, home)
    # nor what Python's own start does not load and costs milliseconds to import
    assert not (modules - python_alone) & {"typer", "click", "typing", "dataclasses", "inspect"}
    ours = {m for m in modules if m == "cudnn_setup" or m.startswith("cudnn_setup.")}
    assert ours == VERSION_MODULES, sorted(ours ^ VERSION_MODULES)
    # of the standard library, only what those modules import themselves (and the test's atexit)
    theirs = baseline(tmp_path, home, "__future__, atexit, contextlib, errno, os, re, sys, pathlib")
    assert not modules - theirs - ours, sorted(modules - theirs - ours)


@pytest.mark.parametrize("argv", [["--help"], ["-h"], ["install", "--help"], ["verify", "-h"],
                                  ["install", "--json"]])
def test_help_and_refusals_load_typer_alone_and_no_command(tmp_path, home, argv):
    code, modules = loaded(tmp_path, home, *argv)
    assert code == (2 if "--json" in argv else 0)
    assert not modules & NEVER, sorted(modules & NEVER)
    assert third_party(modules) <= PARSER, sorted(third_party(modules) - PARSER)
    ours = {m for m in modules if m == "cudnn_setup" or m.startswith("cudnn_setup.")}
    # a refusal's error hides the secrets of any URL its message quotes (urls.scrub)
    refusal = {"cudnn_setup.report", "cudnn_setup.urls"}
    assert ours <= PARSER_MODULES | refusal, sorted(ours - PARSER_MODULES)
    grown = modules - baseline(tmp_path, home)
    assert len(grown) <= PARSER_GROWTH, (len(grown), sorted(grown))


def test_a_usage_error_loads_no_validation_library(tmp_path, home):
    """Option values are converted by the CLI (str, Path, lists of str), not by pydantic."""
    code, modules = loaded(tmp_path, home, "list", "--json", "true")
    assert code == 2
    assert not modules & {"pydantic", "pydantic_core", "rich", "requests"}


COMMANDS = ["inspect", "download", "install", "uninstall", "theanorc", "verify", "doctor",
            "bench", "list", "mirror", "repair"]


@pytest.mark.parametrize("command", COMMANDS)
def test_help_shows_flags_as_flags_and_names_each_value(command):
    import io
    import re

    from cudnn_setup.cli import main

    out = io.StringIO()
    assert main([command, "--help"], env={}, stdout=out, stderr=io.StringIO()) == 0
    text = out.getvalue()
    options_part = text.split("Options:", 1)[1]
    options = re.findall(r"^\s+((?:-\w, )?--[\w-]+)(?: (\S+))?", options_part, re.M)
    assert options
    for name, value in options:
        # a flag shows no value; an option's value is named in capitals (DIR, FILE, N…)
        assert value == "" or not value.startswith("<"), (name, value)
    assert not re.search(r"<(bool|str|path|list\[str\])>", options_part)
    if command in ("verify", "bench"):
        assert "config to write" not in text and "--theanorc FILE" in text
    if command in ("install", "theanorc"):
        assert "Theano config to write" in text


def test_a_flag_given_a_value_says_flags_take_none():
    import io

    from cudnn_setup.cli import main

    out, err = io.StringIO(), io.StringIO()
    assert main(["list", "--json", "true"], env={}, stdout=out, stderr=err) == 2
    error = json.loads(out.getvalue())["error"]
    assert error["code"] == "usage" and "--json is a flag" in error["hint"]
    assert "--json is a flag" in err.getvalue()


def test_one_archive_name_is_looked_up_checking_only_its_entry(monkeypatch):
    """An install of a local archive asks the known-releases table for one name: the entry it
    gets is the whole table's, and a damaged entry of that name is still refused."""
    from cudnn_setup.fetch import known_releases as K

    table = {r.file_name: r for r in K.releases()}
    names = sorted(table)[::37] + ["cudnn-linux-x86_64-0.0.0.0_cuda12-archive.tar.xz"]
    import functools

    # nothing read yet: the one-entry path
    monkeypatch.setattr(K, "load", functools.lru_cache(maxsize=1)(K.load.__wrapped__))
    monkeypatch.setattr(K, "known", K.known.__wrapped__)
    for name in names:
        assert K.known(name) == table.get(name), name
    doc = json.loads(K._text())
    victim = doc["releases"][5]
    victim["sha256"] = "not hex"
    monkeypatch.setattr(K, "_text", lambda: json.dumps(doc))
    with pytest.raises(ValueError, match="sha256 is not 64 lowercase hex digits"):
        K.known(victim["name"])
    doc["releases"].append(dict(doc["releases"][7]))
    with pytest.raises(ValueError, match="listed twice"):
        K.known(doc["releases"][7]["name"])


def interpreter(version: str) -> str:
    """A Python `version` interpreter of this machine that runs (on PATH, or pyenv's), else
    the test is skipped; "" is the one running the tests."""
    if not version:
        return sys.executable
    found = [shutil.which(f"python{version}")] + sorted(
        glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python{version}")))
    for python in filter(None, found):
        if subprocess.run([python, "-c", "pass"], capture_output=True).returncode == 0:
            return python
    pytest.skip(f"no Python {version} on this machine")


@pytest.mark.parametrize("version", ["", "3.12", "3.13"])
def test_under_a_profiler_the_program_exits_so_that_the_profile_is_written(tmp_path, version):
    """The program leaves with os._exit to skip the interpreter's teardown, except where a
    profiler or tracer would lose what it gathered (they write it at exit): from Python 3.12
    cProfile attaches through sys.monitoring, not sys.setprofile (`--version` needs the
    standard library alone, so any interpreter on the machine runs it)."""
    prof = tmp_path / "run.prof"
    done = subprocess.run([interpreter(version), "-m", "cProfile", "-o", str(prof),
                           "-m", "cudnn_setup", "--version"], cwd=REPO, env=clean_env(tmp_path),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "cudnn-setup" in done.stdout
    assert prof.is_file() and prof.stat().st_size > 0
