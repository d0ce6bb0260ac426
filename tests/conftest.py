import hashlib
import io
import json
import os
import resource
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from cudnn_setup.cli import main  # noqa: E402
from fixtures import buildcache  # noqa: E402
from cudnn_setup.archive.decoders import CHUNK  # noqa: E402
from fixtures.generate import (SPECS, XZ_FAST, Compiler, build, compress,  # noqa: E402
                               make_cuda_root, spec_entries, tar_bytes, xz_fast)


# The modules that hold the longest tests (Theano's first compiles, the Ansible role's plays, the
# kill sweeps' samples, the README's commands, a second user's runs), by a one-worker run's
# durations: collected first so that under xdist's worksteal they start at once, and the last
# tests left are short ones that the other worker can take over, not one long test while it
# idles.
LONGEST_FIRST = ("test_verify.py", "test_theano_check_as_run.py", "test_ansible.py",
                 "test_install.py", "test_recovery.py", "test_readme_commands.py",
                 "test_children.py", "test_properties.py", "test_state_trust.py")


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    # stable: within a module the tests keep their order, so a module's fixtures stay together
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


# CUDNN_SETUP_TEST_CPU=PREFIX: each process writes PREFIX.<worker>.tsv, one line per test phase
# (setup, call, teardown): the CPU seconds it took, its own and its waited-for children's
# together, then the children's alone, then the wall seconds; and a `collect` line. Ranked by
# CPU, not wall time, which other work on the machine stretches; wall time far above CPU time is
# a test waiting.
CPU_LOG = os.environ.get("CUDNN_SETUP_TEST_CPU")


def clocks() -> tuple[float, float, float]:
    """CPU seconds so far, this process's and its waited-for children's; the children's; and
    the monotonic clock."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    spent = children.ru_utime + children.ru_stime
    return own.ru_utime + own.ru_stime + spent, spent, time.monotonic()


def log_cpu(nodeid: str, phase: str, start: tuple[float, float, float] = (0.0, 0.0, 0.0)) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    total, children, wall = (now - then for now, then in zip(clocks(), start))
    if phase == "collect":
        wall = 0.0
    with open(f"{CPU_LOG}.{worker}.tsv", "a") as log:
        log.write(f"{nodeid}\t{phase}\t{total:.3f}\t{children:.3f}\t{wall:.3f}\n")


def _logged(phase: str):
    """The hook wrapper of one test phase that logs its CPU seconds."""
    @pytest.hookimpl(hookwrapper=True)
    def hook(item):
        start = clocks()
        yield
        log_cpu(item.nodeid, phase, start)

    return hook


if CPU_LOG:
    pytest_runtest_setup = _logged("setup")
    pytest_runtest_call = _logged("call")
    pytest_runtest_teardown = _logged("teardown")

    def pytest_collection_finish(session):
        # the interpreter's start, the plugins' and every test module's imports, and collection
        log_cpu("", "collect")


@pytest.fixture
def refused_port():
    """A port on 127.0.0.1 that refuses connections for the whole test: bound, never listening.
    A port found free and let go could be given to another test's server meanwhile."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


@pytest.fixture(scope="session")
def compiler(tmp_path_factory):
    return Compiler(tmp_path_factory.mktemp("cc"))


@pytest.fixture(scope="session")
def archives(tmp_path_factory, compiler) -> dict[str, Path]:
    """Every generated sample archive, by file name."""
    out = tmp_path_factory.mktemp("archives")
    return {p.name: p for p in build(out, cc=compiler)}


PADDED_NAME = "cudnn-linux-x86_64-9.3.0.99_cuda12-archive"
# Two libraries past the direct-I/O threshold, one not a whole number of chunks (so its last
# write is a short one), and one below it; 12 MiB of incompressible bytes in all.
PADDED = {"libcudnn_engines_precompiled": 6 * CHUNK + 99, "libcudnn_adv": 4 * CHUNK,
          "libcudnn_ops": 2 * CHUNK + 5}


@pytest.fixture(scope="session")
def padded(tmp_path_factory, compiler) -> dict:
    """The 9.3 archive with its libraries padded (PADDED): its tar bytes ("raw"), its files by
    name, and the archive as one xz block ("single"), as 1 MiB xz blocks ("multi", through
    `xz -T2`) and as gzip ("gz"). xz takes seconds over random bytes (even with
    fixtures.generate's FAST_LZMA2), so each form is compressed once for the session, all
    workers together (fixtures/buildcache.py)."""
    out = tmp_path_factory.mktemp("padded")
    entries = spec_entries(SPECS[f"{PADDED_NAME}.tar.xz"], compiler, PADDED)
    raw = tar_bytes(entries)
    forms = {
        "single": (f"{PADDED_NAME}.tar.xz", lambda: xz_fast(raw)),
        "multi": (f"{PADDED_NAME}.tar.xz", lambda: subprocess.run(
            ["xz", "-T2", XZ_FAST, "--block-size=1MiB", "-c"], input=raw, capture_output=True,
            check=True).stdout),
        "gz": (f"{PADDED_NAME}.tgz", lambda: compress(raw, ".tgz")),
    }
    made = {"raw": raw, "files": {e.name: e.data for e in entries if e.type == tarfile.REGTYPE}}
    digest = hashlib.sha256(raw).hexdigest()
    for key, (name, make) in forms.items():
        made[key] = out / key / name
        made[key].parent.mkdir()
        made[key].write_bytes(buildcache.built(buildcache.key_of("padded", key, digest), make))
    return made


def session_dir(tmp_path_factory, name: str) -> Path:
    """A directory of this test session that every xdist worker shares (the workers' common
    base temp dir), or the only process's own."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return tmp_path_factory.mktemp(name)
    shared = tmp_path_factory.getbasetemp().parent / name
    shared.mkdir(exist_ok=True)
    return shared


@pytest.fixture(scope="session", autouse=True)
def build_cache(tmp_path_factory) -> Path:
    """gcc's fixture libraries kept by content for the whole session, all workers together: the
    same library asked for by many tests is compiled once (fixtures/buildcache.py)."""
    directory = session_dir(tmp_path_factory, "gcc-cache")
    buildcache.use(directory)
    yield directory
    buildcache.use(None)


@pytest.fixture(scope="session")
def theano_compiledir(tmp_path_factory) -> Path:
    """One Theano compile cache for the session (Theano locks it itself): the C code of T.exp
    and of the conv net is compiled once, not once per test's home."""
    return session_dir(tmp_path_factory, "theano")


def copy_of_theano_cache(theano_compiledir: Path, to: Path) -> Path:
    """`to`, a copy of the session's Theano compile cache as far as it is warm now: a test whose
    subject is what Theano compiles anew starts from what others compiled, not from nothing.
    Only finished modules are copied (key.pkl, which Theano writes after the .so); one another
    process is still compiling, Theano's own helpers and its lock are made again as needed."""
    def unfinished(directory: str, names: list[str]) -> set[str]:
        if not Path(directory).name.startswith("compiledir_"):
            return set()
        return {n for n in names
                if Path(directory, n).is_dir() and not Path(directory, n, "key.pkl").exists()}
    try:
        shutil.copytree(theano_compiledir, to, symlinks=True, ignore=unfinished)
    except shutil.Error:
        pass  # a file removed while it was copied (Theano cleaning up): the rest is copied
    to.mkdir(exist_ok=True)
    return to


@pytest.fixture(scope="session")
def bare_python(tmp_path_factory) -> Path:
    """An interpreter with the standard library alone (a venv made without pip): verify finds
    neither Theano nor a framework for it, so given as --python its theano and frameworks checks
    skip. For tests that verify installs whose subject is neither: no Theano is started for
    each (a CPU-second or more)."""
    venv = tmp_path_factory.mktemp("bare-python")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   capture_output=True)
    python = venv / "bin" / "python"
    found = subprocess.run([python, "-c", "import importlib.util as u; print(u.find_spec('theano'))"
                            ], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "None", found.stdout
    return python


@pytest.fixture
def verify_without_theano(bare_python, monkeypatch, request):
    """For a module whose installs are not about Theano: its NO_FLAGS name `bare_python`, so the
    verification after each install skips the theano check instead of running Theano's graphs
    (use with `pytestmark = pytest.mark.usefixtures("verify_without_theano")`)."""
    monkeypatch.setattr(request.module, "NO_FLAGS",
                        [*request.module.NO_FLAGS, "--python", str(bare_python)])


@pytest.fixture
def home(tmp_path, theano_compiledir) -> Path:
    """A fresh home. Its ~/.theano, where Theano keeps its compile cache, is the session's."""
    h = tmp_path / "home"
    h.mkdir()
    (h / ".theano").symlink_to(theano_compiledir, target_is_directory=True)
    return h


@pytest.fixture
def cuda_root(tmp_path, compiler):
    """Factory: a fresh minimal CUDA root under tmp_path."""
    count = [0]

    def make(version="10.2", layout="lib64", version_file="txt") -> Path:
        count[0] += 1
        return make_cuda_root(tmp_path / f"cuda{count[0]}", version, layout, version_file, cc=compiler)

    return make


def clean_env(home: Path, **extra) -> dict:
    """The caller's environment for a run of the tool with `home` as its home: no CUDA or Theano
    settings, and no XDG dirs, which would put its download cache and config outside `home`.
    Its TMPDIR is a directory beside `home`: what a run killed with SIGKILL leaves there (its
    children's scratch dirs; nothing can remove them at the time) goes with the test's own."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CUDA_", "THEANO", "LD_LIBRARY_PATH", "CUDNN_SETUP_MIRROR",
                                "XDG_"))}
    tmp = home.parent / "tool-tmp"
    tmp.mkdir(mode=0o1777, exist_ok=True)
    tmp.chmod(0o1777)  # a second user's run writes there too
    env.update({"HOME": str(home), "PYTHONPATH": str(REPO), "TMPDIR": str(tmp), **extra})
    return env


def check_facts(env=None, python: str = sys.executable, gpu=None, **asked):
    """What a check is handed in a command run with `env` (default: none at all): a new
    command's facts of the machine (steps/command_facts.Facts), what verify was asked, and
    `gpu`, the gpu check of the run, if it made one."""
    from cudnn_setup.checks.check_facts import CheckFacts
    from cudnn_setup.child import Runner
    from cudnn_setup.parallel import Later
    from cudnn_setup.steps.command_facts import Facts

    facts = CheckFacts(Facts(env or {}, Path("/nonexistent"), Runner()), python, **asked)
    if gpu is not None:
        facts.started["gpu"] = Later(lambda: gpu)
    return facts


def run_cli(args, home: Path, env_extra=None, timeout=600, process=False,
            **kw) -> subprocess.CompletedProcess:
    """The CLI as a user runs it. In this process through `main(argv)` unless the test needs a
    process boundary: `process=True`, or any subprocess option (preexec_fn for rlimits…)."""
    env = clean_env(home, **(env_extra or {}))
    argv = [str(a) for a in args]
    if process or kw:
        return subprocess.run([sys.executable, "-m", "cudnn_setup", *argv], env=env,
                              capture_output=True, text=True, timeout=timeout, **kw)
    out, err = io.StringIO(), io.StringIO()
    # the system-wide settings file of the machine running the tests is not the test's
    code = main(argv, env=env, home=home, stdout=out, stderr=err,
                system_config=home / "etc-cudnn-setup.conf",
                pip_system_dirs=(home / "etc-pip",))
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


def run_json(args, home: Path, env_extra=None, **kw):
    done = run_cli([*args, "--json"], home, env_extra, **kw)
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, f"expected one JSON line on stdout, got: {done.stdout!r} {done.stderr}"
    return done, json.loads(lines[0])


def tree_state(root: Path, leave_out: str | None = None) -> dict:
    """Everything that makes two trees byte-for-byte equal: types, bytes, modes, link targets;
    without the top directory `leave_out` (not even walked: a command may be changing it)."""
    out = {}
    if not root.exists():
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        if leave_out is not None and dirpath == str(root):
            dirnames[:] = [d for d in dirnames if d != leave_out]
        for name in sorted(dirnames + filenames):
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            st = p.lstat()
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p))
            elif p.is_dir():
                out[rel] = ("dir", oct(st.st_mode & 0o7777))
            else:
                out[rel] = ("file", oct(st.st_mode & 0o7777), hashlib.sha256(p.read_bytes()).hexdigest())
    return out
