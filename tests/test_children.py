"""Children the tool starts, and what the code they load can do to it: real processes, real
signals, gcc-built libraries whose constructors daemonize, hang, exit or forge the probe's
answer, FIFOs where libraries should be.

Every child runs in a session of its own, in a scratch directory, and is killed as a group at
its limit; a daemon it leaves cannot keep the tool waiting; SIGTERM ends the command with its
JSON; an answer counts only with the run's key; a library or framework that hangs costs one
time limit per command."""
from __future__ import annotations

import importlib.util
import json
import os
import resource
import signal
import subprocess
import sys
import tarfile
import textwrap
import time
from pathlib import Path

import pytest

from conftest import REPO, clean_env, run_json
from cudnn_setup import orphans
from cudnn_setup.checks import load_check
from cudnn_setup.probing import framework_probe
from cudnn_setup.checks.suite import ORDER
from cudnn_setup.child import DRAIN_S, Runner
from cudnn_setup.facts.ldresolve.closure import closure
from cudnn_setup.facts.ldresolve.environment import Environment
from cudnn_setup.facts.ldresolve.loadable import read_object
from cudnn_setup.facts.ldresolve.process import Process
from fixtures import layouts
from fixtures.deplibs import build
from fixtures.generate import GENERATION_SAMPLES

V7 = GENERATION_SAMPLES["v4-v7"]


def by_name(out):
    return {c["name"]: c for c in out["checks"]}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def pids_in(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def kill_all(path: Path) -> None:
    """The daemons a test's library started, each by its id."""
    for pid in pids_in(path):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# --- the runner, with real processes --------------------------------------------------------

DAEMON_PY = """
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:  # a daemon of its own session, holding the child's stdout and stderr
        open(sys.argv[1], "a").write(f"{os.getpid()}\\n")
        time.sleep(300)
    os._exit(0)
print("parent done", flush=True)
"""


def test_a_daemon_holding_the_pipes_does_not_keep_the_runner_waiting(tmp_path):
    pids = tmp_path / "pids"
    start = time.monotonic()
    done = Runner().run([sys.executable, "-c", DAEMON_PY, str(pids)], 60)
    took = time.monotonic() - start
    try:
        assert done.ok and b"parent done" in done.stdout
        assert took < DRAIN_S + 5, f"waited {took:.1f} s for a daemon"
        assert pids_in(pids) and alive(pids_in(pids)[0])  # it escaped the group, as daemons do
    finally:
        kill_all(pids)


def test_a_hung_child_and_its_group_are_killed_at_the_limit(tmp_path):
    script = tmp_path / "hang.sh"
    script.write_text(f"#!/bin/sh\nsleep 300 &\necho $! > {tmp_path}/grandchild\nsleep 300\n")
    script.chmod(0o755)
    start = time.monotonic()
    done = Runner().run([str(script)], 2)
    assert done.timed_out and time.monotonic() - start < 6
    grandchild = pids_in(tmp_path / "grandchild")[0]
    time.sleep(0.2)
    assert not alive(grandchild) or _zombie(grandchild)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except OSError:
        return True


def test_children_run_in_a_scratch_dir_of_their_own(tmp_path):
    done = Runner().run([sys.executable, "-c", "import os; open('dropped', 'w').write('x'); "
                         "print(os.getcwd())"], 30)
    scratch = Path(done.out.strip())
    assert scratch != Path.cwd() and not scratch.exists()  # removed with what was written there
    assert not (Path.cwd() / "dropped").exists()


def test_the_tools_own_probes_run_no_users_site_code(tmp_path, home, cuda_root, archives):
    """The probes that need the standard library only (loading libcudnn, its sub-libraries,
    the driver, the GPU steps) ran with site: a user's sitecustomize (which may import a
    framework, seconds each) ran in every one of them, and their PYTHONPATH could shadow
    ctypes. They now run isolated; the tool itself still starts as the user runs it."""
    site, mark = tmp_path / "site", tmp_path / "mark"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import os, sys\nwith open(os.environ['MARK'], 'a') as f:\n"
        "    f.write(repr(sys.argv) + '\\n')\n")
    root = cuda_root("12.4")
    env = {"PYTHONPATH": f"{site}:{REPO}", "MARK": str(mark)}
    done, out = run_json(["install", archives["cudnn-linux-x86_64-9.3.0.99_cuda12-archive.tar.xz"],
                          "--cuda-root", root, "--no-theanorc", "--no-frameworks", "--no-verify"],
                         home, env, process=True)
    assert done.returncode == 0, out["error"]
    done, out = run_json(["verify", "--cuda-root", root, "--no-theano", "--no-frameworks"], home,
                         env, process=True)
    ran = {c["name"]: c["status"] for c in out["checks"]}
    assert ran["load"] == "pass" and ran["coherence"] == "pass", out["checks"]
    seen = mark.read_text().splitlines()
    assert seen, "the tool itself starts as the user runs it"
    probes = [line for line in seen if "/probes/" in line]
    assert not probes, probes


def test_output_without_end_is_kept_as_a_bounded_tail(tmp_path):
    done = Runner().run([sys.executable, "-c", "import os\nfor _ in range(300): "
                         "os.write(1, b'x' * (1 << 20)); os.write(2, b'y' * (1 << 20))\n"
                         "os.write(1, b'\\nlast line\\n')"], 120)
    assert done.ok and done.stdout.endswith(b"last line\n")
    assert len(done.stdout) <= (4 << 20) + 3 and len(done.stderr) <= (1 << 20) + 3


def test_what_hung_under_a_key_is_not_started_again():
    runner = Runner()
    first = runner.run([sys.executable, "-c", "import time; time.sleep(60)"], 1, key="k",
                       what="sleeping")
    assert first.timed_out
    start = time.monotonic()
    again = runner.run([sys.executable, "-c", "print('ran')"], 30, key="k")
    assert again.returncode is None and again.known and "sleeping did not finish in 1 s" in again.known
    assert time.monotonic() - start < 0.5
    assert runner.run([sys.executable, "-c", "print('ran')"], 30, key="other").ok
    assert Runner().run([sys.executable, "-c", "print('ran')"], 30, key="k").ok  # per command


def test_the_reply_is_written_only_after_the_child_says_it_is_ready():
    code = ("import sys, select\n"
            "early = select.select([sys.stdin], [], [], 0.5)[0]\n"  # what a constructor could read
            "print('early' if early else 'nothing yet', flush=True)\n"
            "print('READY', flush=True)\n"
            "print('got', sys.stdin.readline().strip(), flush=True)\n")
    done = Runner().run([sys.executable, "-c", code], 30, reply=(b"READY", b"secret\n"))
    assert done.out.splitlines() == ["nothing yet", "READY", "got secret"]


def test_a_child_whose_stdout_ends_before_it_is_ready_reads_the_end_of_its_stdin():
    """The ready line can no longer come once stdout has ended (a library's constructor closed
    it; a read of the pipe failed): the child waiting for the reply is not left blocked on its
    stdin until the time limit."""
    code = ("import os, sys\n"
            "os.close(1)\n"
            "sys.exit(4 if sys.stdin.readline() == '' else 0)\n")
    start = time.monotonic()
    done = Runner().run([sys.executable, "-c", code], 20, reply=(b"READY", b"secret\n"))
    assert not done.timed_out and done.returncode == 4, done
    assert time.monotonic() - start < 10


def test_the_end_of_a_command_leaves_a_runners_child_to_its_runner(tmp_path):
    """What a Runner waits for (a probe on another thread) is neither killed nor reaped by the
    subreaper's end: its exit status stays its Runner's; an orphan is ended."""
    from cudnn_setup.child import waited_for
    from cudnn_setup.parallel import Later

    pids = tmp_path / "pids"
    runner = Runner()
    with orphans.Subreaper(waited_for):
        later = Later(runner.run, [sys.executable, "-c", DAEMON_PY + "import time\n"
                                   "time.sleep(2)\nprint('slept', flush=True)", str(pids)], 30)
        deadline = time.monotonic() + 10
        while not pids_in(pids) and time.monotonic() < deadline:
            time.sleep(0.05)
    try:
        done = later.result()
        assert done.ok and b"slept" in done.stdout, done
        assert pids_in(pids) and not alive(pids_in(pids)[0])
    finally:
        kill_all(pids)


# --- libraries whose constructors misbehave, through verify --------------------------------

CTOR_C = r"""
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/types.h>
#include <sys/wait.h>
size_t cudnnGetVersion(void) { return VERSION; }
static void note_pid(pid_t pid) {
    const char *file = getenv("FIXTURE_PIDS");
    if (!file) return;
    FILE *f = fopen(file, "a");
    if (f) { fprintf(f, "%d\n", (int)pid); fclose(f); }
}
static void note(void) { note_pid(getpid()); }
__attribute__((constructor)) static void misbehave(void) {
#if defined(DAEMON)
    pid_t p = fork();
    if (p == 0) {
        setsid();
        pid_t d = fork();
        if (d == 0) {  /* the daemon, with a child of its own: ends with the command */
            pid_t c = fork();
            if (c == 0) { sleep(300); _exit(0); }
            note_pid(c);
            sleep(300);
            _exit(0);
        }
        note_pid(d);  /* written before the constructor returns */
        _exit(0);
    }
    waitpid(p, NULL, 0);
#elif defined(HANG)
    note();
    sleep(300);
#elif defined(EXIT0)
    _exit(0);
#elif defined(FORGE)
    /* what the old probes printed: the load probe's line and the compile program's */
    printf("{\"path\": \"x\", \"cudnnGetVersion\": %d, \"cudnnGetCudartVersion\": 12000}\n",
           VERSION);
    printf("{\"answer_key\": \"guess\", \"answer\": {\"cudnnGetVersion\": %d}}\n", VERSION);
    printf("%d %d\n", VERSION, VERSION);
    fflush(stdout);
    _exit(0);
#endif
}
"""


def wheel_with(tmp_path: Path, compiler, behaviour: str) -> Path:
    """A wheel layout whose libcudnn_ops.so.9 (libcudnn.so.9's DT_NEEDED) has a constructor
    that does `behaviour`."""
    lib = layouts.wheel(tmp_path / "site", compiler)
    src = tmp_path / "ctor.c"
    src.write_text(CTOR_C)
    subprocess.run(["gcc", "-shared", "-fPIC", f"-D{behaviour}", "-DVERSION=90300", str(src),
                    "-o", str(lib / "libcudnn_ops.so.9"), "-Wl,-soname,libcudnn_ops.so.9"],
                   check=True)
    return lib


def verify_lib_dir(lib, root, home, pids=None, **kw):
    extra = {"FIXTURE_PIDS": str(pids)} if pids else {}
    start = time.monotonic()
    done, out = run_json(["verify", "--lib-dir", lib, "--cuda-root", root, "--no-theano",
                          "--no-frameworks"], home, extra, **kw)
    return done, out, time.monotonic() - start


@pytest.mark.parametrize("process", [False, True], ids=["main", "program"])
def test_a_constructor_that_daemonizes_neither_hangs_verify_nor_outlives_it(
        process, tmp_path, compiler, cuda_root, home):
    """The constructor double-forks out of the probe's session, and the daemon forks a child
    of its own: both are ended as verify ends, in main() as in the program."""
    lib = wheel_with(tmp_path, compiler, "DAEMON")
    pids = tmp_path / "pids"
    # a child of the caller's own, older than the command: neither killed nor reaped by it
    own = subprocess.Popen(["sleep", "60"])
    try:
        done, out, took = verify_lib_dir(lib, cuda_root(version="12.4"), home, pids,
                                         process=process)
        assert own.poll() is None
        own.terminate()
        assert own.wait(10) == -signal.SIGTERM
        assert not orphans._get(), "the caller was left a subreaper"
        checks = by_name(out)
        assert checks["load"]["status"] == "pass", checks["load"]
        assert checks["compile"]["status"] in ("pass", "warn"), checks["compile"]
        assert took < 45, f"verify took {took:.0f} s"
        started = pids_in(pids)
        assert started  # the daemon of the load probe at least
        left = [p for p in started if alive(p)]
        assert not left, f"left running after verify: {left}"
    finally:
        kill_all(pids)


def test_a_constructor_that_hangs_costs_one_time_limit(tmp_path, compiler, cuda_root, home,
                                                       monkeypatch):
    monkeypatch.setattr(load_check, "LOAD_TIMEOUT", 4.0)
    lib = wheel_with(tmp_path, compiler, "HANG")
    pids = tmp_path / "pids"
    try:
        done, out, took = verify_lib_dir(lib, cuda_root(version="12.4"), home, pids)
    finally:
        kill_all(pids)
    checks = by_name(out)
    assert [c["name"] for c in out["checks"]] == list(ORDER)
    assert checks["load"]["status"] == "fail" and "did not finish in 4 s" in checks["load"]["detail"]
    for name in ("coherence", "compile"):
        assert checks[name]["status"] == "fail" and "earlier in this run" in checks[name]["detail"], \
            checks[name]
    assert len(pids_in(pids)) == 1, "the hanging library was loaded more than once"
    assert took < 4 * 2 + 20, f"verify took {took:.0f} s"


def test_a_constructor_that_exits_passes_nothing(tmp_path, compiler, cuda_root, home):
    lib = wheel_with(tmp_path, compiler, "EXIT0")
    done, out, _ = verify_lib_dir(lib, cuda_root(version="12.4"), home)
    checks = by_name(out)
    assert done.returncode == 1
    assert checks["load"]["status"] == "fail" and "without a complete answer" in checks["load"]["detail"]
    assert checks["compile"]["status"] == "fail" and "without printing its answer" in \
        checks["compile"]["detail"], checks["compile"]
    assert checks["coherence"]["status"] == "fail"


def test_a_constructor_that_prints_the_answer_cannot_forge_it(tmp_path, compiler, cuda_root, home):
    lib = wheel_with(tmp_path, compiler, "FORGE")
    done, out, _ = verify_lib_dir(lib, cuda_root(version="12.4"), home)
    checks = by_name(out)
    assert done.returncode == 1
    for name in ("load", "compile", "coherence"):
        assert checks[name]["status"] == "fail", checks[name]
    assert "cudnnGetVersion() = 90300" not in checks["load"]["detail"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_while_a_child_hangs_ends_the_command_with_its_json(sig, tmp_path, compiler,
                                                                     cuda_root, home):
    lib = wheel_with(tmp_path, compiler, "HANG")
    pids = tmp_path / "pids"
    env = clean_env(home, FIXTURE_PIDS=str(pids))
    proc = subprocess.Popen([sys.executable, "-m", "cudnn_setup", "verify", "--lib-dir", str(lib),
                             "--cuda-root", str(cuda_root(version="12.4")), "--no-theano",
                             "--json"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not pids_in(pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert pids_in(pids), "the load probe never loaded the library"
        proc.send_signal(sig)
        sent = time.monotonic()
        out, err = proc.communicate(timeout=30)
        assert time.monotonic() - sent < 10
    finally:
        if proc.poll() is None:
            proc.kill()
        kill_all(pids)
    answer = json.loads(out.decode())
    # verify only looks: interrupted, it exits 1, never 5 ("rolled back")
    assert proc.returncode == 1 and answer["error"]["code"] == "interrupted", err[-2000:]
    time.sleep(0.3)
    assert all(not alive(p) or _zombie(p) for p in pids_in(pids))  # its group was killed


# --- FIFOs where libraries should be ------------------------------------------------------

@pytest.mark.parametrize("what", ["FIFO", "character device"])
def test_a_fifo_or_device_named_libcudnn_so_7_in_a_lib_dir(what, tmp_path, archives, cuda_root,
                                                           home):
    with tarfile.open(archives[V7]) as tar:
        tar.extractall(tmp_path / "x", filter="data")
    lib = tmp_path / "x" / "cuda" / "lib64"
    (lib / "libcudnn.so.7").unlink()
    if what == "FIFO":
        os.mkfifo(lib / "libcudnn.so.7")
    else:
        (lib / "libcudnn.so.7").symlink_to("/dev/zero")
    done, out, took = verify_lib_dir(lib, cuda_root(), home, timeout=120, process=True)
    checks = by_name(out)
    assert [c["name"] for c in out["checks"]] == list(ORDER)
    assert checks["load"]["status"] == "fail" and what in checks["load"]["detail"]
    assert what in checks["compile"]["detail"]
    assert took < 30, f"verify took {took:.0f} s"


def test_a_fifo_reached_through_runpath_as_a_dt_needed(tmp_path, cuda_root, home):
    lib = layouts.built_set(tmp_path / "cudnn", tmp_path / "w")  # libcudnn.so.9: RUNPATH $ORIGIN,
    (lib / "libcudnn_ops.so.9").unlink()  # DT_NEEDED libcudnn_ops.so.9
    os.mkfifo(lib / "libcudnn_ops.so.9")
    done, out, took = verify_lib_dir(lib, cuda_root(version="12.4"), home, timeout=120,
                                     process=True)
    checks = by_name(out)
    assert [c["name"] for c in out["checks"]] == list(ORDER)
    assert checks["load"]["status"] == "fail" and "FIFO" in checks["load"]["detail"]
    assert checks["deps"]["status"] == "fail"
    assert took < 30, f"verify took {took:.0f} s"


def test_a_fifo_libz_on_ld_library_path_is_not_opened(tmp_path):
    lib = build(tmp_path / "lib" / "libuser.so.1", "libuser.so.1", work=tmp_path / "w",
                runtime="libz.so.1")
    (tmp_path / "trap").mkdir()
    os.mkfifo(tmp_path / "trap" / "libz.so.1")
    env = Environment(ld_library_path=str(tmp_path / "trap"))
    start = time.monotonic()
    deps = closure([lib], env)
    assert time.monotonic() - start < 5
    z = next(d for d in deps if d.name.startswith("libz.so"))
    assert not z.resolution.found and "FIFO" in z.resolution.error


def test_a_child_whose_ld_library_path_holds_a_fifo_is_not_started(tmp_path):
    (tmp_path / "trap").mkdir()
    os.mkfifo(tmp_path / "trap" / "libz.so.1")
    env = {**os.environ, "LD_LIBRARY_PATH": f"/nonexistent:{tmp_path / 'trap'}"}
    start = time.monotonic()
    done = Runner().run([sys.executable, "-c", "import zlib"], 5, env)  # ld.so opens libz.so.1
    assert time.monotonic() - start < 2
    assert done.returncode is None and not done.timed_out
    assert f"{tmp_path / 'trap' / 'libz.so.1'} on LD_LIBRARY_PATH is a FIFO" in done.known


@pytest.mark.parametrize("command", ["verify", "doctor", "install"])
def test_a_fifo_libz_on_ld_library_path_costs_no_time_limit(command, tmp_path, archives,
                                                            compiler, cuda_root, home):
    """The program's own Python loads libz.so.1 (zlib) and so do gcc and every Python child:
    with a FIFO of that name on LD_LIBRARY_PATH each of them would wait on it forever."""
    trap = tmp_path / "trap"
    trap.mkdir()
    os.mkfifo(trap / "libz.so.1")
    root = cuda_root()
    lib = layouts.wheel(tmp_path / "site", compiler)
    args = {"verify": ["verify", "--lib-dir", lib, "--cuda-root", cuda_root(version="12.4"),
                       "--no-theano"],
            "doctor": ["doctor", "--cuda-root", root],
            "install": ["install", archives[V7], "--cuda-root", root, "--no-theanorc"]}[command]
    start = time.monotonic()
    done, out = run_json(args, home, {"LD_LIBRARY_PATH": f"{trap}:/nonexistent"},
                         process=True, timeout=90)
    assert time.monotonic() - start < 30
    assert done.returncode in (0, 1), done.stderr[-2000:]
    if command != "doctor":
        compile_ = by_name(out)["compile"]
        assert compile_["status"] == "fail" and f"{trap}/libz.so.1" in compile_["detail"]
        assert "FIFO" in compile_["detail"], compile_  # the user's LD_LIBRARY_PATH, judged


# --- the loader emulation's budget ----------------------------------------------------------

@pytest.fixture(scope="module")
def many_needed(tmp_path_factory):
    """A real library with 300 DT_NEEDED entries (none of them present any more) and a RUNPATH
    of 20,000 directories."""
    work = tmp_path_factory.mktemp("many")
    stub_c = work / "stub.c"
    stub_c.write_text("int stub_value(void) { return 1; }\n")
    subprocess.run(["gcc", "-fPIC", "-c", str(stub_c), "-o", str(work / "stub.o")], check=True)
    deps = work / "deps"
    deps.mkdir()
    # one stub without a SONAME under 300 names: the linker records each as the name it was
    # found by (libneed7.so), as it records a SONAME, with one ld run instead of 300
    subprocess.run(["ld", "-shared", str(work / "stub.o"), "-o", str(work / "stub.so")],
                   check=True)
    for i in range(300):
        os.link(work / "stub.so", deps / f"libneed{i}.so")
    runpath = ":".join(f"/nonexistent-cudnn-setup/d{i}" for i in range(20_000))
    opts = work / "link.opts"
    opts.write_text(f"-rpath={runpath}\n--enable-new-dtags\n--no-as-needed\n"
                    + "".join(f"-l:libneed{i}.so\n" for i in range(300)))
    out = work / "libmany.so.1"
    subprocess.run(["gcc", "-shared", "-fPIC", str(stub_c), "-o", str(out), "-Wl,-soname,libmany.so.1",
                    f"-L{deps}", f"-Wl,@{opts}"], check=True)
    for p in deps.iterdir():
        p.unlink()
    return out


def test_300_needed_by_20000_runpath_entries_stops_at_the_first_missing_one(many_needed):
    obj = read_object(many_needed)
    assert len(obj.needed) >= 300 and len(obj.runpath) == 20_000
    start = time.monotonic()
    deps = closure([many_needed], Environment())
    took = time.monotonic() - start
    assert took < 10, f"{took:.1f} s"
    missing = [d for d in deps if not d.resolution.found]
    assert [d.name for d in missing] == ["libneed0.so"]  # where ld.so stops
    assert "cannot open shared object file" in missing[0].resolution.error


def test_the_search_budget_gives_a_verdict(tmp_path):
    # every directory exists: nothing is skipped, so the budget is what ends the search
    dirs = [tmp_path / f"d{i}" for i in range(2000)]
    for d in dirs:
        d.mkdir()
    lib = build(tmp_path / "libx.so.1", "libx.so.1", work=tmp_path / "w",
                runpath=":".join(f"$ORIGIN/{d.name}" for d in dirs))
    proc = Process(Environment(), budget=1000)
    res, _ = proc.find("libnothere.so.1", proc.find(str(lib), None)[1])
    assert not res.found and "gave up after looking at 1000 paths" in res.error
    assert proc.spent


# --- frameworks: hang, print without end, write into the working directory -----------------

def fake_framework(site: Path, body: str) -> None:
    """A pure-Python `cupy` (importable, found by the probe's list) whose import runs `body`."""
    pkg = site / "cupy"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(textwrap.dedent(body) + "\n__version__ = '13.0.0'\n")


def import_recorded(site: Path, tries: Path, then: str) -> None:
    """A fake framework whose import writes a line to `tries` (the time and its
    LD_LIBRARY_PATH), then runs `then`."""
    fake_framework(site, f"""
        import os, time
        open({str(tries)!r}, "a").write(f"{{time.monotonic()}} {{os.environ.get('LD_LIBRARY_PATH', '')}}\\n")
        {then}
    """)


def frameworks_env(site: Path, **extra) -> dict:
    return {"PYTHONPATH": os.pathsep.join([str(REPO), str(site)]), **extra}


def test_a_framework_whose_import_hangs_costs_one_time_limit_per_install(tmp_path, archives,
                                                                         cuda_root, home,
                                                                         monkeypatch):
    """install imports each framework as things are and with the new directory first on
    LD_LIBRARY_PATH, side by side, and verify takes the first report: a hanging import is
    tried once in each environment, both at once, and never again, so it costs one limit
    (verify's own checks, Theano's first compile among them, come after it)."""
    limit = 8.0
    monkeypatch.setattr(framework_probe, "DEFAULT_TIMEOUT", limit)
    site = tmp_path / "site"
    tries = tmp_path / "tries"
    import_recorded(site, tries, "time.sleep(300)")
    root = cuda_root()
    done, out = run_json(["install", archives[V7], "--cuda-root", root, "--no-theanorc"], home,
                         frameworks_env(site))
    lines = tries.read_text().splitlines()
    paths = [line.split(" ", 1)[1] if " " in line else "" for line in lines]
    assert len(paths) == len(set(paths)) <= 2, f"the hanging import was tried again: {lines}"
    fw = by_name(out)["frameworks"]
    assert f"did not finish in {limit:.0f} s" in fw["detail"], fw
    # the two environments' imports start together: the next test


def test_install_imports_the_frameworks_as_they_are_and_with_the_change_side_by_side(
        tmp_path, archives, cuda_root, home):
    """The what-if's two imports of a framework (as things are, and with the library
    directory first on LD_LIBRARY_PATH) start together: neither waits for the other."""
    site = tmp_path / "site"
    tries = tmp_path / "tries"
    import_recorded(site, tries, "time.sleep(4)")
    root = cuda_root()
    done, out = run_json(["install", archives[V7], "--cuda-root", root, "--no-theanorc",
                          "--no-verify"], home, frameworks_env(site))
    assert done.returncode == 0, done.stderr
    lines = [line.split(" ", 1) for line in tries.read_text().splitlines()]
    assert len(lines) == 2, lines
    (t1, env1), (t2, env2) = sorted((float(t), e) for t, e in lines)
    firsts = sorted(e.split(":")[0] for e in (env1, env2))
    assert firsts[0] == "" and firsts[1].startswith(str(root)), lines
    assert t2 - t1 < 3, f"the second import started {t2 - t1:.1f} s after the first"
    what_if = out["frameworks_what_if"]
    assert [w["framework"] for w in what_if] == ["cupy"], what_if


def test_install_verifies_while_the_frameworks_are_imported_for_its_advice(
        tmp_path, archives, cuda_root, home):
    """Off the loader path the loader step only advises, so verify's checks start beside the
    what-if's imports: a framework whose import takes seconds sees Theano's check running."""
    if importlib.util.find_spec("theano") is None:
        pytest.skip("the theano extra is not installed")
    site = tmp_path / "site"
    seen = tmp_path / "seen"
    fake_framework(site, f"""
        import os, time
        def theano_running():
            for pid in os.listdir("/proc"):
                try:
                    if b"theano_graph" in open(f"/proc/{{pid}}/cmdline", "rb").read():
                        return True
                except OSError:
                    pass
            return False
        deadline = time.monotonic() + 30
        while not theano_running() and time.monotonic() < deadline:
            time.sleep(0.05)
        open({str(seen)!r}, "a").write(f"{{theano_running() or time.monotonic() < deadline}}\\n")
    """)
    root = cuda_root()
    done, out = run_json(["install", archives[V7], "--cuda-root", root], home,
                         frameworks_env(site))
    assert done.returncode == 0, done.stderr
    assert seen.read_text().split() == ["True", "True"], "verify waited for the what-if"
    checks = [c["name"] for c in out["checks"]]
    assert checks[:2] == ["ldconfig", "theanorc"] and checks[2:] == list(ORDER), checks
    assert {c["name"]: c for c in out["checks"]}["frameworks"]["data"]["frameworks"], out


def test_a_framework_printing_300_mb_fills_no_file(tmp_path, home, compiler, cuda_root):
    site = tmp_path / "site"
    fake_framework(site, """
        import os
        for _ in range(300):
            os.write(1, b"x" * (1 << 20))
            os.write(2, b"y" * (1 << 20))
    """)
    lib = layouts.wheel(tmp_path / "wheel", compiler)

    def small_files():  # nothing this command writes may grow past 64 MiB
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 20, 64 << 20))

    done = subprocess.run([sys.executable, "-m", "cudnn_setup", "verify", "--lib-dir", str(lib),
                           "--cuda-root", str(cuda_root(version="12.4")), "--no-theano",
                           "--json"], env=clean_env(home, **frameworks_env(site)),
                          capture_output=True, timeout=300, preexec_fn=small_files)
    fw = by_name(json.loads(done.stdout))["frameworks"]
    entry = fw["data"]["frameworks"][0]
    assert "SIGXFSZ" not in fw["detail"] and "died" not in entry["reason"], fw


@pytest.mark.parametrize("process", [False, True], ids=["main", "program"])
def test_a_framework_that_daemonizes_on_import_does_not_outlive_verify(process, tmp_path, home,
                                                                       compiler, cuda_root):
    site = tmp_path / "site"
    pids = tmp_path / "pids"
    fake_framework(site, f"""
        import os, time
        if os.fork() == 0:
            os.setsid()
            daemon = os.fork()
            if daemon == 0:
                os.closerange(0, 3)
                time.sleep(300)
                os._exit(0)
            open({str(pids)!r}, "a").write(f"{{daemon}}\\n")  # before the import goes on
            os._exit(0)
        os.wait()
    """)
    lib = layouts.wheel(tmp_path / "wheel", compiler)
    try:
        done, out = run_json(["verify", "--lib-dir", lib, "--cuda-root", cuda_root(version="12.4"),
                              "--no-theano"], home, frameworks_env(site), process=process,
                             timeout=300)
        assert "frameworks" in by_name(out), out
        started = pids_in(pids)
        assert started, "the framework was never imported"
        left = [p for p in started if alive(p)]
        assert not left, f"left running after verify: {left}"
    finally:
        kill_all(pids)


def test_a_framework_import_writes_nothing_into_the_callers_directory(tmp_path, home, compiler,
                                                                     cuda_root):
    site = tmp_path / "site"
    fake_framework(site, "open('written-by-import', 'w').write('x')")
    lib = layouts.wheel(tmp_path / "wheel", compiler)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    subprocess.run([sys.executable, "-m", "cudnn_setup", "verify", "--lib-dir", str(lib),
                    "--cuda-root", str(cuda_root(version="12.4")), "--no-theano", "--json"],
                   env=clean_env(home, **frameworks_env(site)), capture_output=True,
                   timeout=300, cwd=cwd)
    assert list(cwd.iterdir()) == []


def test_a_refused_install_leaves_no_child_and_no_scratch_dir_behind(tmp_path, home, cuda_root):
    """The driver probe starts with the install, on a thread of its own, in a session of its
    own. An install refused while it still runs (here NVML never answers, as on a machine
    whose GPU fell off the bus) must not leave it running, orphaned, nor its scratch dir."""
    from fixtures import libcuda, libnvml

    drv = tmp_path / "drv"
    libcuda.build(drv)
    libnvml.build(drv, hang=True)
    archive = tmp_path / "cudnn-10.0-linux-x64-v7.4.2.24.tgz"
    payload = tmp_path / "payload"
    payload.write_bytes(os.urandom(40 << 20))  # read long enough for the probe to have started
    # stored, not deflated: zlib writes random bytes as stored blocks at any level, so the
    # install reads the same archive; only the search that finds nothing to compress goes
    with tarfile.open(archive, "w:gz", compresslevel=0) as tar:
        for _ in range(2):  # the library twice: refused once the archive is read
            tar.add(payload, "cuda/lib64/libcudnn.so.7.4.2")
    scratch, pidfile = tmp_path / "tmp", tmp_path / "nvml.pid"
    scratch.mkdir()
    done, out = run_json(["install", archive, "--cuda-root", cuda_root(), "--no-theanorc"], home,
                         {"LD_LIBRARY_PATH": str(drv), "TMPDIR": str(scratch),
                          "FIX_NVML_PIDFILE": str(pidfile)}, process=True, timeout=120)
    assert done.returncode == 3 and out["error"]["code"] == "archive-rejected", done.stderr
    deadline = time.monotonic() + 30
    while not pidfile.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    pid = int(pidfile.read_text())  # the probe was started, and hung in nvmlInit
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and os.path.exists(f"/proc/{pid}"):
        time.sleep(0.1)
    alive = os.path.exists(f"/proc/{pid}")
    if alive:
        os.kill(pid, signal.SIGKILL)
    assert not alive, "the driver probe was left running"
    assert not list(scratch.glob("cudnn-setup-child-*"))


def test_a_runner_starts_no_child_after_its_command_ended(tmp_path):
    """A thread a command left behind (the driver probe's second step, once end() killed the
    first) starts nothing after the end; the next command begins with the runner usable."""
    from cudnn_setup.child import Runner

    runner = Runner(scratch_parent=tmp_path)
    runner.end()
    marker = tmp_path / "ran"
    done = runner.run(["touch", str(marker)], timeout=10)
    assert done.interrupted and "the command had ended" in done.error
    assert not marker.exists() and not list(tmp_path.glob("cudnn-setup-child-*"))
    runner.begin()
    assert runner.run(["touch", str(marker)], timeout=10).returncode == 0 and marker.exists()


def test_a_commands_end_waits_for_the_scratch_dirs_of_the_threads_it_left(tmp_path):
    """A check still running on a thread when its command ends (a fault ended the command
    first) removed its scratch dir after the command had returned: a caller looking at the
    disk then met a directory vanishing under it. end() kills the child and returns only once
    the thread's own clean-up has run, and no scratch dir is made after it."""
    import threading

    from cudnn_setup.child import CommandEnded

    runner = Runner(scratch_parent=tmp_path)
    killed = threading.Event()

    def check() -> None:
        with runner.scratch("cudnn-setup-compile-") as tmp:
            (tmp / "check.c").write_text("int main(void){return 0;}")
            done = runner.run(["sleep", "30"], 60)  # a scratch dir of its own, inside
            killed.set() if done.returncode != 0 else None
            time.sleep(0.4)  # a slow clean-up, still the thread's own

    thread = threading.Thread(target=check, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while len(list(tmp_path.iterdir())) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(list(tmp_path.iterdir())) == 2
    started = time.monotonic()
    runner.end()
    assert killed.is_set() and list(tmp_path.iterdir()) == []
    assert time.monotonic() - started < 5
    with pytest.raises(CommandEnded):
        with runner.scratch():
            pass
    assert list(tmp_path.iterdir()) == []
    thread.join(5)


def test_a_child_that_leaves_a_deep_tree_in_its_scratch_dir_is_no_exit_70(tmp_path):
    """shutil.rmtree of the scratch dir recursed once per level: an interpreter (`--python`)
    that made 1,500 nested directories there ended verify with RecursionError, exit 70."""
    from cudnn_setup.trees import remove_tree
    try:
        with Runner(scratch_parent=tmp_path) as runner:
            # one mkdir makes all 1,500 levels (a 3,000-byte relative path), not one each
            done = runner.run(["sh", "-c", 'mkdir -p "$1" && echo made', "sh",
                               "/".join(["d"] * 1500)], 60)
        assert done.returncode == 0 and b"made" in done.stdout
        assert not list(tmp_path.iterdir())  # the scratch dir went, all 1,500 levels of it
    finally:  # pytest's own clean-up of old runs recurses too: leave no such tree behind
        for left in tmp_path.iterdir():
            remove_tree(left)


def _interrupt_while_compiling(argv: list[str], env: dict, seen: Path, tmp: Path) -> int:
    """The tool run with `argv`, Ctrl-C'd once its compiler has written `seen` (the name of the
    temporary file it made in its $TMPDIR): the command says it was interrupted, that file was
    in a scratch dir of the command's in `tmp`, and `tmp` is left empty. Its exit status."""
    proc = subprocess.Popen([sys.executable, "-m", "cudnn_setup", *argv, "--json"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not seen.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert seen.exists(), proc.communicate(timeout=30)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert json.loads(out)["error"]["code"] == "interrupted", err
    made = Path(seen.read_text().strip())
    assert made.parent.parent == tmp and made.parent.name.startswith("cudnn-setup-compile-")
    assert not list(tmp.iterdir()), "left in the user's temporary directory"
    return proc.returncode


def test_a_compiler_ended_with_verify_leaves_no_temporary_file(tmp_path, home, cuda_root):
    """A C compiler writes temporary files of its own into $TMPDIR (gcc's cc*.s and cc*.o) and
    leaves them there when it is killed. The compile check gives it its scratch dir as TMPDIR,
    removed with the command, so a verify interrupted while it compiles leaves the user's
    temporary directory as it was. The compiler here makes its temporary file as gcc does
    first, then waits to be ended; the same check with gcc itself passes in the other tests."""
    root = cuda_root("10.0")
    done, _ = run_json(["install", REPO / "fixtures" / "samples" /
                        "cudnn-10.0-linux-x64-v7.4.2.24.tgz", "--cuda-root", root, "--no-verify",
                        "--no-theanorc"], home)
    assert done.returncode == 0, done.stderr
    tmp, seen = tmp_path / "tmp", tmp_path / "cc-tmpdir"
    tmp.mkdir()
    cc = tmp_path / "cc"
    cc.write_text(f'#!/bin/sh\nmktemp "${{TMPDIR:-/tmp}}/ccXXXXXX.s" > {seen}.part\n'
                  f'mv {seen}.part {seen}\nsleep 60\nexec gcc "$@"\n')
    cc.chmod(0o755)
    assert _interrupt_while_compiling(["verify", "--cuda-root", str(root), "--no-theano",
                                       "--no-frameworks"],
                                      clean_env(home, CC=str(cc), TMPDIR=str(tmp)), seen, tmp) == 1


def test_a_blas_link_ended_with_theanorc_leaves_no_temporary_file(tmp_path, home, cuda_root):
    """The same for the link that proves a BLAS for Theano's `[blas] ldflags`: the compiler's
    temporary files go in a scratch dir of the command's, so `theanorc` interrupted while it
    links leaves the user's temporary directory as it was. The BLAS is a real library the
    linker finds through LIBRARY_PATH; `cc` makes its temporary file as gcc does, then waits."""
    root = cuda_root("10.0")
    done, _ = run_json(["install", REPO / "fixtures" / "samples" /
                        "cudnn-10.0-linux-x64-v7.4.2.24.tgz", "--cuda-root", root, "--no-verify",
                        "--no-theanorc"], home)
    assert done.returncode == 0, done.stderr
    libs, bindir, tmp, seen = (tmp_path / n for n in ("libs", "bin", "tmp", "cc-tmpfile"))
    for d in (libs, bindir, tmp):
        d.mkdir()
    subprocess.run(["gcc", "-shared", "-fPIC", "-x", "c", "-", "-o", str(libs / "libopenblas.so")],
                   input=b"void dgemm_(void) {}\n", check=True)
    cc = bindir / "cc"
    cc.write_text('#!/bin/sh\ncase "$*" in *-print-file-name=*) exec gcc "$@";; esac\n'
                  f'mktemp "${{TMPDIR:-/tmp}}/ccXXXXXX.s" > {seen}.part\n'
                  f'mv {seen}.part {seen}\nsleep 60\nexec gcc "$@"\n')
    cc.chmod(0o755)
    env = clean_env(home, TMPDIR=str(tmp), LIBRARY_PATH=str(libs))
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', os.defpath)}"
    # nothing written yet: a command that writes says it rolled back (exit 5)
    assert _interrupt_while_compiling(["theanorc", "--cuda-root", str(root)], env, seen, tmp) == 5
