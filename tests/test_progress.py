"""What a person and a log see while the tool works: steps, waits and bytes on stderr, never on
stdout; a live display on a real terminal (a pty), plain lines at most every 5 s in a pipe; and
a first install of the quickstart's sample that is never silent for longer than that.
"""
import fcntl
import io
import json
import os
import re
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

import pytest


from conftest import REPO, clean_env, run_cli
from cudnn_setup import console
from cudnn_setup.text import plural

SAMPLE = REPO / "fixtures" / "samples" / "cudnn-10.0-linux-x64-v7.4.2.24.tgz"
GRACE = 1.5  # seconds a loaded two-core machine may add to a 5 s beat


def _install_argv(root: Path, home: Path, *extra) -> list[str]:
    return [sys.executable, "-m", "cudnn_setup", "install", str(SAMPLE), "--cuda-root", str(root),
            "--theanorc", str(home / ".theanorc"), *extra]


def _timeline(stream, into: list) -> None:
    for line in iter(stream.readline, ""):
        into.append((time.monotonic(), line.rstrip("\n")))


def _piped(argv: list[str], env: dict, timeout: float = 600):
    """`argv` with stdout and stderr on pipes, as a log sees it: (exit code, stdout, the stderr
    lines each with when it came, and the gaps from the start through each line to the end)."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    started = time.monotonic()
    lines: list = []
    reader = threading.Thread(target=_timeline, args=(proc.stderr, lines))
    reader.start()
    out = proc.stdout.read()
    proc.wait(timeout=timeout)
    reader.join()
    times = [started] + [t for t, _ in lines] + [time.monotonic()]
    return proc.returncode, out, lines, [b - a for a, b in zip(times, times[1:])]


def test_plain_lines_say_a_step_at_once_then_at_most_one_per_beat():
    out = io.StringIO()
    plain = console.Plain(out, every=0.5)
    plain.status("check 13 of 13: theano — compiling")
    assert out.getvalue() == "cudnn-setup: check 13 of 13: theano — compiling\n"
    time.sleep(1.35)  # a long step: named again with how long it has lasted
    beats = out.getvalue().splitlines()[1:]
    assert 1 <= len(beats) <= 3 and all("still going after" in b for b in beats), beats
    update = plain.progress("reading big.tar.xz")
    total = 400 * 10**6
    started = time.monotonic()
    done = 0
    while time.monotonic() - started < 1.6:  # thousands of updates...
        for _ in range(100):  # in bursts, 10 ms apart, as reads come: not a loop spinning
            done = min(total - 1, done + 10**5)  # the CPU for 1.6 s
            update(done, total)
        time.sleep(0.01)
    update(total, total)
    plain.close()
    lines = out.getvalue().splitlines()[1 + len(beats):]
    assert lines[0].startswith("cudnn-setup: reading big.tar.xz: ") and "of 400 MB (" in lines[0]
    assert 2 <= len(lines) <= 6, lines  # ...a handful of lines: the first, one per beat, the end
    assert re.fullmatch(r"cudnn-setup: reading big\.tar\.xz: 400 MB in 1\.[6-9] s", lines[-1]), lines


def test_a_count_said_part_way_says_it_ended_however_short():
    """A read whose first bytes were said ("10 bytes of 366 MB (0%)") and that ended before
    the next beat says it ended, once: a log must not stop at 0 %."""
    out = io.StringIO()
    plain = console.Plain(out, every=5)
    update = plain.progress("reading cudnn.tar.gz")
    update(10, 366 * 10**6)
    update(366 * 10**6, 366 * 10**6)
    update(366 * 10**6, 366 * 10**6)  # the reader and its caller both say the end: said once
    update(2 * 10**6, 366 * 10**6)  # read again from the start: counted and ended again
    update(366 * 10**6, 366 * 10**6)
    plain.close()
    assert out.getvalue().splitlines() == [
        "cudnn-setup: reading cudnn.tar.gz: 10 bytes of 366 MB (0%)",
        "cudnn-setup: reading cudnn.tar.gz: 366 MB in 0.0 s",
        "cudnn-setup: reading cudnn.tar.gz: 2.0 of 366 MB (0%)",
        "cudnn-setup: reading cudnn.tar.gz: 366 MB in 0.0 s"]


def test_when_the_bytes_are_done_the_step_they_belong_to_is_named_again():
    """Reading ends and staging what was read goes on: the log names the step, not silence."""
    out = io.StringIO()
    plain = console.Plain(out, every=0.3)
    plain.status("staging cuDNN 9.28.0 from nvidia_cudnn_cu12-9.28.0.42.whl")
    update = plain.progress("reading nvidia_cudnn_cu12-9.28.0.42.whl")
    update(10, 100)
    update(100, 100)
    said = len(out.getvalue().splitlines())
    time.sleep(1.0)  # the staging, three beats long, with no byte counted
    plain.close()
    after = out.getvalue().splitlines()[said:]
    assert after and all(line.startswith("cudnn-setup: staging cuDNN 9.28.0") and
                         "still going after" in line for line in after), after


class _Tty(io.StringIO):
    def isatty(self):
        return True


def _shown(stream: io.StringIO) -> str:
    import re

    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", stream.getvalue())


def test_on_a_terminal_a_bar_appears_only_for_bytes_that_are_counted(monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    out = _Tty()
    term = console.for_stream(out)
    term.status("installing")
    term.progress("downloading")  # a download that never starts: no bar at all
    reading = term.progress("reading cudnn.tar.xz")
    reading(10**6, 4 * 10**6)
    term._live.refresh()
    term.close()
    shown = _shown(out)
    assert "reading cudnn.tar.xz" in shown and "1.0/4.0 MB" in shown
    assert "downloading" not in shown and "0/?" not in shown


@pytest.mark.parametrize("columns", [40, 80])
def test_a_narrow_terminal_keeps_the_bytes_and_cuts_the_name(monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", str(columns))
    out = _Tty()
    term = console.for_stream(out)
    term.status("placing cuDNN 9.28.0 into /opt/cuda-12.4: 52 changes in one transaction")
    update = term.progress("downloading cudnn-linux-x86_64-9.28.0.42_cuda12-archive.tar.xz")
    update(10**8, 7 * 10**8)
    term._live.refresh()
    term.close()
    lines = [line for line in _shown(out).replace("\r", "\n").splitlines() if line.strip()]
    assert lines and all(len(line) <= columns for line in lines), lines
    assert any("100.0/700.0 MB" in line and line.startswith("downloading cudnn") for line in lines)


def test_amounts_read_as_a_person_reads_them():
    assert console.done_of(120 * 10**6, 364 * 10**6) == "120 of 364 MB (32%)"
    assert console.done_of(512, None) == "512 bytes"
    assert console.done_of(5 * 10**5, 2 * 10**6) == "500 kB of 2.0 MB (25%)"
    assert [plural(n, "library") for n in (0, 1, 2)] == ["0 libraries", "1 library", "2 libraries"]
    assert plural(1, "match") == "1 match" and plural(3, "match") == "3 matches"
    assert plural(2, "key") == "2 keys" and plural(1, "file") == "1 file"


def test_in_a_pipe_every_step_is_a_line_on_stderr_and_never_silent(tmp_path, home, cuda_root):
    """The quickstart's install (scripts/demo.sh), first run, into a log: a line within 5 s of
    the start and then at least every 5 s until it ends; stdout carries only the answer."""
    root = cuda_root("10.0")
    code, out, lines, gaps = _piped(_install_argv(root, home), clean_env(home))
    assert code == 0, out + "\n".join(l for _, l in lines)
    said = [l for _, l in lines]
    assert all(l.startswith("cudnn-setup: ") for l in said), said
    assert any("reading cudnn-10.0-linux-x64-v7.4.2.24.tgz" in l for l in said)
    assert any("placing cuDNN 7.4.2 into" in l for l in said)
    assert any(l.startswith("cudnn-setup: check 1 of 14: files") for l in said)
    assert any(l.startswith("cudnn-setup: check 14 of 14: theano") for l in said)
    assert max(gaps) <= console.EVERY + GRACE, list(zip(gaps, ["(start)"] + said))
    assert "cudnn-setup: " not in out and "installed cuDNN 7.4.2" in out


def test_under_json_stdout_is_the_object_alone_and_the_steps_go_to_stderr(home, cuda_root):
    root = cuda_root("10.0")
    done = subprocess.run(_install_argv(root, home, "--json", "--no-verify"), capture_output=True,
                          text=True, env=clean_env(home), timeout=600)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["command"] == "install"
    assert len(done.stdout.strip().splitlines()) == 1
    assert "cudnn-setup: reading cudnn-10.0" in done.stderr
    # the step the heartbeat names while members are decoded after the bytes are read
    assert "cudnn-setup: staging cudnn-10.0-linux-x64-v7.4.2.24.tgz: reading, checking" in done.stderr
    assert "cudnn-setup: placing cuDNN 7.4.2" in done.stderr


def test_rich_is_imported_only_for_a_terminal(home, archives):
    """In a pipe the plain lines need no rich (its import costs start-up time)."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "cudnn_setup", "inspect",
                           str(SAMPLE)], capture_output=True, text=True, env=clean_env(home),
                          timeout=120)
    assert done.returncode == 0, done.stderr
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines()
                if line.startswith("import time:")}
    assert "cudnn_setup.console" in imported
    assert "rich.live" not in imported and "rich.progress" not in imported


def _on_a_pty(argv: list[str], env: dict, timeout: float = 600,
              columns: int = 200) -> tuple[int, bytes, list]:
    """Run `argv` with stdin, stdout and stderr on a real pseudo-terminal `columns` wide;
    what it wrote, and when each piece came."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: its terminal is the pty
        try:
            os.execve(argv[0], argv, env)
        finally:
            os._exit(127)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    chunks, data = [], b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 1.0)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(time.monotonic())
        data += chunk
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), data, chunks


def test_on_a_terminal_a_live_display_shows_each_step(home, cuda_root):
    root = cuda_root("10.0")
    started = time.monotonic()
    code, data, chunks = _on_a_pty(_install_argv(root, home), clean_env(home))
    text = data.decode("utf-8", "replace")
    assert code == 0, text[-3000:]
    assert "\x1b[" in text  # rich's live display: escape sequences, redrawn in place
    assert "check 14 of 14: theano" in text and "check 4 of 14: load" in text
    assert "cudnn-setup: check" not in text  # not the log's plain lines
    assert "installed cuDNN 7.4.2" in text  # the answer, after the display is gone
    times = [started] + chunks
    assert max(b - a for a, b in zip(times, times[1:])) <= console.EVERY + GRACE


HOLDER = """
import fcntl, os, sys
state = sys.argv[1]
os.makedirs(state, exist_ok=True)
fd = os.open(state, os.O_RDONLY | os.O_DIRECTORY)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.readline()  # held until the test says so
"""


def test_a_wait_for_the_lock_names_its_holder_and_goes_on_being_said(home, cuda_root):
    root = cuda_root("10.0")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(root / ".cudnn-setup")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "locked\n"
        waiter = subprocess.Popen([sys.executable, "-m", "cudnn_setup", "uninstall",
                                   "--cuda-root", str(root)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=clean_env(home))
        lines: list = []
        reader = threading.Thread(target=_timeline, args=(waiter.stderr, lines))
        reader.start()
        deadline = time.monotonic() + 60
        while not any("waiting for the lock" in l for _, l in lines):
            assert time.monotonic() < deadline and waiter.poll() is None, lines
            time.sleep(0.1)
        time.sleep(console.EVERY + 1.5)  # a wait longer than a beat
        holder.stdin.write("release\n")
        holder.stdin.flush()
        out = waiter.stdout.read()
        waiter.wait(timeout=60)
        reader.join()
    finally:
        holder.kill()
        holder.wait()
    said = [l for _, l in lines]
    assert waiter.returncode == 0, said
    first = next(l for l in said if "waiting for the lock" in l)
    assert first.startswith(f"cudnn-setup: waiting for the lock on {root}: held by PID "
                            f"{holder.pid} (")
    assert "running since " in first and "UTC" in first and "up to 300 s" in first
    assert any("still going after" in l and "waiting for the lock" in l for l in said), said
    assert any(l.startswith(f"cudnn-setup: got the lock on {root} after ") for l in said), said
    assert "cudnn-setup:" not in out


def _killed_mid_install(root: Path, archive: Path) -> None:
    """A real install, in a forked child that SIGKILLs itself once the archive is staged and
    judged (when it asks for the driver's facts): what a `kill -9` leaves under .cudnn-setup/tx."""
    from cudnn_setup.placement import engine as placement
    from cudnn_setup.facts.cuda import find_cuda_root

    pid = os.fork()
    if pid == 0:
        try:
            placement.install(placement.Request(
                archive, find_cuda_root({}, root), env={},
                driver=lambda: os.kill(os.getpid(), signal.SIGKILL)))
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


def test_what_a_kill_left_is_reported_by_doctor_then_named_when_removed(home, cuda_root,
                                                                         archives):
    root = cuda_root("12.4")
    archive = archives["cudnn-linux-x86_64-9.3.0.99_cuda12-archive.tar.xz"]
    _killed_mid_install(root, archive)
    tx = root / ".cudnn-setup" / "tx"
    left = [p for p in tx.rglob("*") if p.is_file()]
    assert left, "the kill left no staging: the test did not kill where it means to"
    done = run_cli(["doctor", "--cuda-root", root, "--json"], home)
    problem = next(p for p in json.loads(done.stdout)["problems"] if p["check"] == "state")
    assert problem["severity"] == "warn"
    assert f"in {plural(len(left), 'file')} (tx/" in problem["message"]
    assert "killed before it finished" in problem["message"]
    assert left[0].exists()  # doctor reported them; it removed nothing
    done = run_cli(["uninstall", "--cuda-root", root], home)
    assert done.returncode == 0, done.stderr
    assert "removed what an interrupted run left: " in done.stdout
    assert f"in {plural(len(left), 'file')} (tx/" in done.stdout
    assert not tx.exists()


def test_inspect_says_it_reads_and_verify_numbers_its_checks(home, cuda_root):
    root = cuda_root("10.0")
    done = run_cli(["inspect", SAMPLE], home)
    assert done.returncode == 0
    assert "cudnn-setup: reading cudnn-10.0-linux-x64-v7.4.2.24.tgz" in done.stderr
    assert "cudnn-setup: reading" not in done.stdout
    run_cli(["install", SAMPLE, "--cuda-root", root, "--no-theanorc", "--no-verify"], home)
    done = run_cli(["verify", "--cuda-root", root, "--no-theano", "--no-frameworks"], home)
    steps = [l for l in done.stderr.splitlines() if l.startswith("cudnn-setup: check ")]
    # --no-frameworks: the frameworks are not imported, and the log does not say they are
    assert [s.split(":")[1].strip() for s in steps][:3] == ["check 1 of 12", "check 2 of 12",
                                                            "check 3 of 12"]
    assert len(steps) == 12 and steps[-1].startswith("cudnn-setup: check 12 of 12: clients")
    assert not any("frameworks" in s for s in steps), steps


def test_bench_says_each_step(home, cuda_root, tmp_path):
    from fixtures import libcuda

    # a driver listing a GPU (the stand-in libcuda.so.1: the GPU is what this machine lacks)
    drv = libcuda.build(tmp_path / "drv")
    done = run_cli(["bench", "--cuda-root", cuda_root("10.0"), "--no-theano", "--json"], home,
                   {"LD_LIBRARY_PATH": str(drv), "PATH": f"{tmp_path / 'no-smi'}:/usr/bin:/bin"})
    assert json.loads(done.stdout)["command"] == "bench"
    assert "cudnn-setup: asking the NVIDIA driver about the GPUs" in done.stderr
    assert "cudnn-setup: timing cuDNN's convolution algorithms on the GPU" in done.stderr


def test_bench_without_a_gpu_says_at_once_that_it_has_nothing_to_measure(home, cuda_root):
    """Both Theano runs would use the CPU and cuDNN's timings need a GPU: said up front, with
    no Theano child started (they took two minutes to conclude the same)."""
    start = time.monotonic()
    done = run_cli(["bench", "--cuda-root", cuda_root("10.0"), "--json"], home,
                   {"PATH": "/usr/bin:/bin"}, process=True)
    took = time.monotonic() - start
    out = json.loads(done.stdout)
    assert done.returncode == 0, done.stderr
    checks = {c["name"]: c for c in out["checks"]}
    assert checks["theano-conv"]["status"] == "skip"
    assert "says nothing about cuDNN" in checks["theano-conv"]["detail"]
    assert checks["cudnn-algorithms"]["status"] == "skip"
    assert "no NVIDIA driver" in checks["cudnn-algorithms"]["detail"]
    assert "nothing to measure here: no NVIDIA driver" in done.stderr
    assert "bench step 1 of 2" not in done.stderr
    assert took < 15, took  # a process start and the driver look-up, not a Theano compile


def test_a_slow_download_says_how_far_it_got_every_beat(home, tmp_path):
    """A real HTTP server sending 3 MB at 400 kB/s (about 8 s): in a log, the start, a line
    per beat with how far it got, and the end; not a line per chunk."""
    from httpserver import ArchiveServer

    with ArchiveServer() as server:
        server.files["/cudnn-slow.tgz"] = os.urandom(3 * 10**6)
        server.throttle["/cudnn-slow.tgz"] = 7.5
        done = run_cli(["download", f"{server.base}/cudnn-slow.tgz", "--cache-dir",
                        tmp_path / "cache"], home)
    assert done.returncode == 0, done.stderr
    said = done.stderr.splitlines()
    # the step, from where (the host, not the whole URL), before its bytes are counted
    host = server.base.split("//", 1)[1]
    start = said.index(f"cudnn-setup: downloading cudnn-slow.tgz from {host}")
    lines = [l for l in said[start + 1:] if "downloading cudnn-slow.tgz" in l]
    assert lines[0].startswith("cudnn-setup: downloading cudnn-slow.tgz: ")
    assert 3 <= len(lines) <= 5, lines
    assert any(" of 3.0 MB (" in l for l in lines[1:-1]), lines
    assert lines[-1].startswith("cudnn-setup: downloading cudnn-slow.tgz: 3.0 MB in ")


def test_doctor_calls_staging_under_a_held_lock_a_run_at_work_and_does_not_wait(home,
                                                                                 cuda_root):
    root = cuda_root("10.0")
    staging = root / ".cudnn-setup" / "tx" / "0123456789ab" / "staging"
    staging.mkdir(parents=True)
    (staging / "libcudnn.so.7.4.2").write_bytes(os.urandom(4096))
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(root / ".cudnn-setup")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "locked\n"
        started = time.monotonic()
        done = run_cli(["doctor", "--cuda-root", root, "--json"], home)
        took = time.monotonic() - started
    finally:
        holder.kill()
        holder.wait()
    problem = next(p for p in json.loads(done.stdout)["problems"] if p["check"] == "state")
    assert problem["severity"] == "info"
    assert problem["message"].startswith(f"a cudnn-setup run is working on {root} (PID "
                                         f"{holder.pid} (")
    assert "in 1 file (tx/0123456789ab)" in problem["message"]
    assert "waiting for the lock" not in done.stderr and took < 60
    assert (staging / "libcudnn.so.7.4.2").exists()


def test_a_beat_between_updates_says_the_count_as_it_stands():
    """Updates that come just after each beat's line (the heartbeat wins the race) are not
    lost: the next beat says the count they reached, not the last one written again."""
    out = io.StringIO()
    plain = console.Plain(out, every=0.3)
    update = plain.progress("reading big.tar.xz")
    update(1, 10**9)
    for done in range(10**8, 10**9, 10**8):
        time.sleep(0.2)
        update(done, 10**9)
    time.sleep(0.4)
    plain.close()
    lines = out.getvalue().splitlines()
    assert lines[0] == "cudnn-setup: reading big.tar.xz: 1 bytes of 1000 MB (0%)", lines
    assert "still going" not in " ".join(lines[:-1]), lines  # every beat but a last one moved
    assert any("900 of 1000 MB" in line for line in lines), lines
    counts = [int(line.split(": ")[2].split()[0]) for line in lines if "still going" not in line]
    assert counts == sorted(counts) and len(set(counts)) == len(counts), lines


@pytest.mark.parametrize("no_color", [False, True])
def test_a_40_column_terminal_keeps_step_and_bytes_and_no_color_means_none(no_color, home,
                                                                           cuda_root):
    """An install on a real 40-column pty: every line of the live display fits, cut with an
    ellipsis, the bytes kept; with NO_COLOR set (https://no-color.org) no colour at all."""
    import re

    root = cuda_root("10.0")
    env = clean_env(home, **({"NO_COLOR": "1"} if no_color else {}))
    env.pop("COLUMNS", None)
    code, data, _ = _on_a_pty(_install_argv(root, home, "--no-verify"), env, columns=40)
    text = data.decode("utf-8", "replace")
    assert code == 0, text[-3000:]
    colours = re.findall(r"\x1b\[[0-9;]*m", text)
    assert (not colours) if no_color else colours, colours[:5]
    display = text.split("installed cuDNN 7.4.2")[0]  # the answer after it is not the display's
    lines = [line for line in re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "\n", display)
             .replace("\r", "\n").splitlines() if line.strip()]
    assert lines and all(len(line) <= 40 for line in lines), [l for l in lines if len(l) > 40]
    assert any(line.lstrip("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏ ").startswith("placing cuDNN 7.4.2") for line in lines)


def test_verify_of_a_root_without_cudnn_announces_only_what_runs(home, cuda_root):
    """No cuDNN: the checks that need one are skipped, and the log never says it is loading
    libcudnn or running a convolution."""
    done = run_cli(["verify", "--cuda-root", cuda_root("10.0"), "--no-theano"], home)
    assert done.returncode == 1
    steps = [l for l in done.stderr.splitlines() if l.startswith("cudnn-setup: check ")]
    assert steps and all(" of 4: " in s for s in steps), steps
    assert not any("convolution" in s or "loading libcudnn" in s for s in steps), steps
