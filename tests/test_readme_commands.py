"""Every command README.md shows, run the way a reader runs it, with the exit code it promises.

The commands are read from the markdown itself (its code blocks, the "one command" table and
the commands named in its prose), so a command added to the README is run here too, and one the
tool does not accept fails. Each runs as a real process (`python -m cudnn_setup`) in a sandbox:
a home of its own, fabricated CUDA roots, the README's archive names as files in the working
directory, a mirror and a package index on 127.0.0.1. Nothing reaches the network: NVIDIA's own
tree is stood in for by the fleet's mirror setting (CUDNN_SETUP_MIRROR), and every proxy
variable points at a closed port, so a request that escapes the sandbox fails instead of
leaving the machine.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from conftest import REPO
from fixtures.mirror import MirrorArchive, build_mirror
from fixtures.wheels import IndexFile, build_wheel, project_json, sha256
from httpserver import DirectoryServer, IndexServer

README = REPO / "README.md"
TOOL = "cudnn-setup"
PIP_JSON = "application/vnd.pypi.simple.v1+json"
# The releases the README names, as the sandbox's mirror and index publish them: build numbers
# that no published table holds, so only the mirror's manifest and the index vouch for them.
MIRRORED = MirrorArchive("9.28.0.99", "12")
WHEEL = "9.28.0.42"
ROOT_CUDA = "12.4"  # a root the README's 9.28 builds for CUDA 12 fit
# what the README's placeholders stand for in the sandbox (see Sandbox.substitute)
SANDBOX_PATHS = {"/usr/local/cuda": "legacy_root", "/srv/cudnn": "mirror_dir"}


@dataclass
class Shown:
    """One command as the README shows it."""

    argv: list[str]  # after any VAR=value words
    assignments: dict[str, str]
    place: str  # "code", "table" or "prose"
    exit_code: int  # what the README promises: 0 unless it says otherwise beside it
    line: str


def _promised_exit(note: str) -> int:
    found = re.search(r"\bexits? (?:with )?(?:code )?`?(\d+)`?", note)
    return int(found.group(1)) if found else 0


def _command(text: str, place: str, note: str = "") -> Shown | None:
    """`text` as a command line, or None when it is not one (a bare `cudnn-setup install` in a
    sentence names the command, it does not run it)."""
    words = shlex.split(text, comments=True)
    assignments = {}
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
        name, _, value = words.pop(0).partition("=")
        assignments[name] = value
    if not words or words[0] not in (TOOL, "bash"):
        return None
    if place == "prose" and (len(words) < 3 or words[0] != TOOL):
        return None
    comment = text.partition("#")[2]
    return Shown(words, assignments, place, _promised_exit(comment + " " + note), text.strip())


def _sentence(paragraph: str, part: str) -> str:
    """The sentence of `paragraph` that holds `part`."""
    at = paragraph.find(part)
    start = max(paragraph.rfind(". ", 0, at), paragraph.rfind("; ", 0, at)) + 1
    ends = [i for i in (paragraph.find(". ", at), paragraph.find("; ", at)) if i >= 0]
    return paragraph[start:min(ends) if ends else len(paragraph)]


def _tables(tokens) -> list[tuple[list[str], list[list]]]:
    """Each table as (its header's cells, its rows: each a list of the cells' inline tokens)."""
    tables: list[tuple[list[str], list[list]]] = []
    row: list = []
    for i, token in enumerate(tokens):
        if token.type == "table_open":
            tables.append(([], []))
        elif token.type == "tr_open":
            row = []
        elif token.type == "inline" and tokens[i - 1].type in ("th_open", "td_open"):
            row.append(token)
        elif token.type == "tr_close":
            header, rows = tables[-1]
            if header:
                rows.append(row)
            else:
                header += [cell.content for cell in row]
    return tables


def _code(token) -> list[str]:
    return [c.content for c in token.children or [] if c.type == "code_inline"]


def parse(markdown: str) -> tuple[list[Shown], list[str]]:
    """The README's commands in the order a reader meets them (code blocks, the table whose
    column says "one command", code in sentences), and the subcommands its "command" table
    names."""
    tokens = MarkdownIt("commonmark").enable("table").parse(markdown)
    tables = iter(_tables(tokens))
    shown: list[Shown] = []
    names: list[str] = []
    for i, token in enumerate(tokens):
        if token.type == "fence":
            shown += filter(None, (_command(line, "code") for line in token.content.splitlines()))
        elif token.type == "inline" and tokens[i - 1].type == "paragraph_open":
            shown += filter(None, (_command(code, "prose", _sentence(token.content, code))
                                   for code in _code(token)))
        elif token.type == "table_open":
            header, rows = next(tables)
            if "one command" in header:
                for row in rows:
                    note = " ".join(cell.content for cell in row)
                    shown += filter(None, (_command(code, "table", note)
                                           for cell in row for code in _code(cell)))
            elif header[:1] == ["command"]:
                names += [code.split()[0] for row in rows for code in _code(row[0])]
    return shown, names


# --- the extraction itself: it must find what the README shows, not nothing -------------------

def test_the_readme_shows_the_commands_this_test_runs():
    shown, names = parse(README.read_text())
    places = {p: [s.line for s in shown if s.place == p] for p in ("code", "table", "prose")}
    # the quickstart's install, the two scripts, the five "at any time" commands
    assert len(places["code"]) == 8, places["code"]
    # NVIDIA's tree, a mirror, a PyPI index
    assert len(places["table"]) == 3, places["table"]
    # building a fleet's mirror; `cudnn-setup COMMAND --help`
    assert len(places["prose"]) == 2, places["prose"]
    assert [s.argv[:2] for s in shown if s.argv[0] == "bash"] == [
        ["bash", "scripts/demo.sh"], ["bash", "scripts/test.sh"]]
    assert sorted(names) == sorted(
        ["install", "verify", "doctor", "repair", "uninstall", "inspect", "theanorc", "list",
         "download", "mirror", "bench"])


def test_extraction_reads_code_blocks_tables_and_prose_and_the_promised_exit_code():
    markdown = "\n".join([
        "Run `cudnn-setup verify --json` or `cudnn-setup install`. It exits 1: "
        "`cudnn-setup doctor --json x`.", "",
        "```", "X=1 cudnn-setup doctor    # exits 1 when a problem is found", "ls", "```", "",
        "| from | one command | note |", "|---|---|---|", "| here | `cudnn-setup list --cuda 12` |",
        "| there | `cudnn-setup install 1.2 --x` | exits `2` |", "",
        "| name | other |", "|---|---|", "| x | `cudnn-setup bench` |", "",
        "| command | what |", "|---|---|", "| `verify` | checks |", "| `list`, `mirror` | x |",
    ])
    shown, names = parse(markdown)
    assert [(s.place, s.argv, s.assignments, s.exit_code) for s in shown] == [
        ("prose", [TOOL, "verify", "--json"], {}, 0),
        ("prose", [TOOL, "doctor", "--json", "x"], {}, 1),
        ("code", [TOOL, "doctor"], {"X": "1"}, 1),
        ("table", [TOOL, "list", "--cuda", "12"], {}, 0),
        ("table", [TOOL, "install", "1.2", "--x"], {}, 2),
    ]
    assert names == ["verify", "list", "mirror"]


# --- the sandbox -----------------------------------------------------------------------------

@dataclass
class Machine:
    """One reader's machine: a home, a CUDA root (None: the command names its own) and the
    commands run there, one after another."""

    home: Path
    root: Path | None
    runs: list[tuple[Shown, list[str], dict[str, str]]]


class Sandbox:
    """Readers' machines in a tmp dir: homes, a working directory holding the README's
    archives, CUDA roots, and the mirror and index that stand in for NVIDIA's servers."""

    def __init__(self, tmp: Path, theano_cache: Path, cuda_root, archives: dict[str, Path],
                 mirror_url: str, index_url: str):
        self.tmp, self.theano_cache, self.make_root = tmp, theano_cache, cuda_root
        self.archives, self.mirror_url, self.index_url = archives, mirror_url, index_url
        self.cwd = tmp / "cwd"
        self.cwd.mkdir()
        self.legacy_root = cuda_root(version="7.0")  # the quickstart's cuDNN v3 is for CUDA 7.0
        self.mirror_dir = tmp / "srv-cudnn"

    def machine(self, root: Path | None) -> Machine:
        home = self.tmp / f"home{len(list(self.tmp.glob('home*')))}"
        home.mkdir()
        # Theano's compile cache is the test session's (Theano locks it): the conv net's C code
        # is compiled once, not once per home
        (home / ".theano").symlink_to(self.theano_cache, target_is_directory=True)
        return Machine(home, root, [])

    def plan(self, shown: list[Shown], command_names: list[str]) -> list[Machine]:
        """The README's commands on the machines they run on. Each install is one command on a
        machine that has no cuDNN yet; the commands after it look at the root it went into."""
        machines: list[Machine] = []
        for each in shown:
            argv, assignments = self.substitute(each)
            if argv[0] == "install" or not machines:
                root = None if "CUDA_ROOT" in assignments else self.make_root(version=ROOT_CUDA)
                machines.append(self.machine(root))
            if argv == ["COMMAND", "--help"]:  # the placeholder: every command the README lists
                runs = [[name, "--help"] for name in command_names]
            elif argv[0] == "mirror":
                # NVIDIA's tree, the default source, is out of a test's reach: the sandbox's
                # mirror stands in for it
                runs = [[*argv, "--from", self.mirror_url]]
            else:
                runs = [argv]
            machines[-1].runs += [(each, one, assignments) for one in runs]
        return machines

    def env(self, machine: Machine) -> dict[str, str]:
        closed = "http://127.0.0.1:9"  # discard's port: nothing listens there
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("CUDA_", "CUDNN_SETUP_", "THEANO", "LD_LIBRARY_PATH", "XDG_",
                                    "PIP_"))
               and k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")}
        env.update({"HOME": str(machine.home), "PYTHONPATH": str(REPO),
                    "CUDNN_SETUP_MIRROR": self.mirror_url, "PIP_INDEX_URL": self.index_url,
                    "PIP_CONFIG_FILE": os.devnull,
                    "http_proxy": closed, "https_proxy": closed, "HTTP_PROXY": closed,
                    "HTTPS_PROXY": closed, "no_proxy": "127.0.0.1", "NO_PROXY": "127.0.0.1"})
        if machine.root is not None:
            env["CUDNN_SETUP_CUDA_ROOT"] = str(machine.root)
        return env

    def substitute(self, shown: Shown) -> tuple[list[str], dict[str, str]]:
        """The README's command with the sandbox's paths and servers in place of the ones it
        names; files it names that the fixtures build are put in the working directory."""
        def swap(word: str) -> str:
            for placeholder, attribute in SANDBOX_PATHS.items():
                if word == placeholder:
                    return str(getattr(self, attribute))
            if re.fullmatch(r"https?://[^/]+\.lan/.*", word):
                return self.mirror_url
            if word.startswith("/"):  # never a path of the machine running the tests
                pytest.fail(f"the README names {word}: add what stands in for it to "
                            "SANDBOX_PATHS")
            if word in self.archives and not (self.cwd / word).exists():
                shutil.copy(self.archives[word], self.cwd / word)
            return word
        argv = [swap(w) for w in shown.argv[1:]]
        return argv, {k: swap(v) for k, v in shown.assignments.items()}

    def run(self, machine: Machine) -> list[tuple[Shown, list[str], subprocess.CompletedProcess]]:
        done = []
        for shown, argv, assignments in machine.runs:
            env = {**self.env(machine), **assignments}
            done.append((shown, argv, subprocess.run(
                [sys.executable, "-m", "cudnn_setup", *argv], cwd=self.cwd, env=env,
                capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)))
        return done


@pytest.fixture(scope="module")
def published(tmp_path_factory, compiler):
    """The README's 9.28 as a mirror of NVIDIA's tree and as an nvidia-cudnn-cu12 wheel."""
    out = tmp_path_factory.mktemp("published")
    mirror = build_mirror(out / "mirror", (MIRRORED,), cc=compiler)
    wheel = build_wheel(out / "wheels", WHEEL, "12", compiler)
    return mirror, wheel


def test_every_readme_command_exits_as_the_readme_promises(published, archives, cuda_root,
                                                           theano_compiledir, tmp_path):
    mirror, wheel = published
    shown, names = parse(README.read_text())
    shown = [s for s in shown if s.argv[0] == TOOL]
    with DirectoryServer(mirror.root) as served, IndexServer() as index:
        index.routes["/simple/nvidia-cudnn-cu12/"] = (PIP_JSON, project_json(
            "nvidia-cudnn-cu12", [IndexFile(wheel.name, f"{index.base}/files/{wheel.name}",
                                            sha256(wheel))]))
        index.routes[f"/files/{wheel.name}"] = ("application/octet-stream", wheel.read_bytes())
        box = Sandbox(tmp_path, theano_compiledir, cuda_root, archives, served.url,
                      index.base + "/simple/")
        machines = box.plan(shown, names)
        # the machines are independent of each other: they run side by side
        with ThreadPoolExecutor(len(machines)) as pool:
            ran = [r for runs in pool.map(box.run, machines) for r in runs]
    wrong = [f"README: {each.line}\nran: {argv}\nexit {done.returncode}, README promises "
             f"{each.exit_code}\n{done.stdout}\n{done.stderr}"
             for each, argv, done in ran if done.returncode != each.exit_code]
    assert not wrong, "\n\n".join(wrong)
    # every command ran (the placeholder once for each command), each place of the README
    assert len(ran) == len(shown) - 1 + len(names) and len(machines) == 4, ran
    assert {s.place for s in shown} == {"code", "table", "prose"}


# --- the scripts the README runs -------------------------------------------------------------

def test_the_readme_scripts_exist_and_ci_runs_the_test_script():
    shown = [s for s in parse(README.read_text())[0] if s.argv[0] == "bash"]
    for each in shown:
        script = REPO / each.argv[1]
        assert script.is_file(), each.line
        assert subprocess.run(["bash", "-n", str(script)]).returncode == 0, each.line
    ci = (REPO / ".ci" / "run").read_text()
    assert re.search(r"^\s*(exec\s+)?bash scripts/test\.sh\b", ci, re.M), ci


def _venv_up_to_date(venv: Path, extra: str) -> bool:
    """scripts/setup-venv.sh's own test of its stamp, without running it (it would install)."""
    stamp = venv / "cudnn-setup.stamp"
    if not (venv / "bin" / "cudnn-setup").exists() or not stamp.is_file():
        return False
    version = subprocess.run(["python3", "--version"], capture_output=True, text=True)
    key = hashlib.sha256((REPO / "pyproject.toml").read_bytes()
                         + (version.stdout + version.stderr).encode()).hexdigest()
    lines = stamp.read_text().splitlines()
    return lines[:1] == [key] and extra in lines[1:]


def test_the_demo_installs_into_its_sandbox_and_a_second_run_changes_nothing(tmp_path):
    """scripts/demo.sh, twice, from a copy of the checkout that shares its up-to-date .venv.
    Its extra arguments go to `install` (as the README says): --no-verify leaves out the
    verification, which the README's own install command runs in the test above."""
    venv = REPO / ".venv"
    if not _venv_up_to_date(venv, "theano"):
        pytest.skip(".venv is not set up for the demo here (scripts/setup-venv.sh would install)")
    copy = tmp_path / "checkout"
    copy.mkdir()
    for part in ("scripts", "fixtures"):
        shutil.copytree(REPO / part, copy / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", copy)
    (copy / ".venv").symlink_to(venv, target_is_directory=True)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CUDA_", "CUDNN_SETUP_", "THEANO", "LD_LIBRARY_PATH", "XDG_"))}

    def demo(*args):
        return subprocess.run(["bash", "scripts/demo.sh", "--no-verify", *args], cwd=copy,
                              env=env, capture_output=True, text=True, timeout=300,
                              stdin=subprocess.DEVNULL)
    first = demo()
    assert first.returncode == 0, first.stdout + first.stderr
    assert "nothing to install" in first.stderr and "installed cuDNN 7.4.2" in first.stdout
    assert (copy / "sandbox" / "cuda-10.0" / "include" / "cudnn.h").is_file()
    assert "[dnn]" in (copy / "sandbox" / "home" / ".theanorc").read_text()
    again = demo("--json")
    assert again.returncode == 0, again.stdout + again.stderr
    assert json.loads(again.stdout)["changed"] is False
