"""Kill a transaction, then kill its recovery at every one of its steps, for real.

    python tests/recovery_driver.py SCENARIO ARCHIVE_DIR WORK_DIR [EVERY]

For n = 1, 2, … (with EVERY > 1, a sample of them: kill_points): build a fresh root, run the
scenario's command in a forked child that SIGKILLs itself at a fixed step (leaving a journal),
then run recovery in forked children that SIGKILL themselves at their n-th filesystem step
(twice: the first recovery and the one after it); then run the recovery that install,
uninstall and repair run first (one more, unkilled) and compare the root with the trees before
and after the scenario's command. The sweep ends at the first n that recovery completes without
meeting. Prints one JSON object.

Forked children keep each attempt to milliseconds (no interpreter start); the kills are real
SIGKILLs, and every recovery runs in a process of its own.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from conftest import tree_state  # noqa: E402
from cudnn_setup.errors import SetupError  # noqa: E402
from cudnn_setup.placement import engine as placement  # noqa: E402
from cudnn_setup.placement import repair  # noqa: E402
from cudnn_setup.facts.cuda import find_cuda_root  # noqa: E402
from cudnn_setup.state.transaction import Filesystem  # noqa: E402
from fixtures.generate import GENERATION_SAMPLES, Compiler, make_cuda_root  # noqa: E402

V7 = GENERATION_SAMPLES["v4-v7"]
V9 = GENERATION_SAMPLES["9.x"]
MANUAL = "/* a cudnn.h copied by hand */\n"


class Killer(Filesystem):
    """SIGKILLs this process at its `at`-th filesystem step, counting from the start or, with
    after_commit, from the commit point (the manifest written or removed). Records each step."""

    def __init__(self, at: int | None, after_commit: bool = False):
        self.at = at
        self.step = 0
        self.counting = not after_commit
        self.trace: list[tuple[str, str]] = []

    def _tick(self, name: str, path: Path) -> None:
        self.trace.append((name, str(path)))
        if self.counting:
            self.step += 1
            if self.step == self.at:
                os.kill(os.getpid(), signal.SIGKILL)

    def replace(self, src, dst):
        self._tick("replace", dst)
        super().replace(src, dst)

    def mkdir(self, path):
        self._tick("mkdir", path)
        super().mkdir(path)

    def rmdir(self, path):
        self._tick("rmdir", path)
        super().rmdir(path)

    def makedirs(self, path):
        self._tick("makedirs", path)
        super().makedirs(path)

    def fsync_dir(self, path):
        self._tick("fsync_dir", path)
        super().fsync_dir(path)

    def remove_tree(self, path):
        self._tick("remove_tree", path)
        super().remove_tree(path)

    def write_manifest(self, path, manifest):
        self._tick("write_manifest", path)
        super().write_manifest(path, manifest)
        self.counting = True

    def unlink(self, path):
        self._tick("unlink", path)
        super().unlink(path)
        if path.name == "manifest.json":  # uninstall's commit point
            self.counting = True


def in_child(fn) -> str:
    """Run fn in a forked child: 'killed', 'ok' or 'failed: …'."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            fn()
        except BaseException:
            traceback.print_exc()
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
        return "killed"
    return "ok" if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 else f"failed: {status}"


def without_state(tree: dict) -> dict:
    return {k: v for k, v in tree.items() if not k.startswith(".cudnn-setup")}


class Scenario:
    """A root before a command, the command, where it is killed."""

    def __init__(self, name: str, archives: Path, cc: Compiler):
        self.name = name
        self.archives = archives
        self.cc = cc
        self.uninstall = name.startswith("uninstall")
        self.repair = name.startswith("repair")
        self.after_commit = name.endswith("forward")
        # a repair of three paths: killed at its last put, after the other two
        self.kill_at = 1 if self.after_commit else (13 if self.uninstall else
                                                    11 if self.repair else 30)

    def setup(self, path: Path):
        make_cuda_root(path, "10.2", cc=self.cc)
        (path / "include" / "cudnn.h").write_text(MANUAL)
        root = find_cuda_root({}, path)
        if self.name != "install-forward":
            placement.install(placement.Request(self.archives / V7, root))
        if self.repair:  # a library deleted, a link re-pointed, the header changed by hand
            lib = path / "lib64"
            (lib / "libcudnn.so.7.4.2").unlink()
            (lib / "libcudnn.so.7").unlink()
            (lib / "libcudnn.so.7").symlink_to("elsewhere.so")
            header = path / "include" / "cudnn.h"
            header.write_bytes(header.read_bytes() + b"/* patched */\n")
        return root

    def command(self, root, fs):
        if self.uninstall:
            placement.uninstall(root, fs=fs)
        elif self.repair:
            repair.repair(root, lambda manifest: self.archives / V7, fs=fs)
        elif self.name == "install-forward":  # a first install: the hand copy goes to the store
            placement.install(placement.Request(self.archives / V7, root), fs=fs)
        else:  # an upgrade; 9.x is built for another CUDA major than the root's: forced
            placement.install(placement.Request(self.archives / V9, root, force=True), fs=fs)


def kill_points(trace: list, every: int) -> list[int]:
    """The n a sweep kills at, given the steps of one whole recovery: 1, 2, … len(trace) and
    one more that recovery never meets; with every > 1 only each every-th of them from 1, the
    last two, and each n that kills between the journal's removal and the tx dir's (the order
    of those two is what an earlier release got wrong)."""
    total = len(trace) + 1
    if every == 1:
        return list(range(1, total + 1))
    steps = [f"{name} {path}" for name, path in trace]
    journal = steps.index("unlink .cudnn-setup/journal.json")
    tx = next(i for i, s in enumerate(steps) if s.startswith("remove_tree .cudnn-setup/tx/"))
    between = range(journal + 2, tx + 2)  # killed at step n: steps 1 … n-1 were made
    return sorted(set(range(1, total + 1, every)) | set(between) | {total - 1, total})


def sweep(scenario: Scenario, work: Path, every: int = 1) -> dict:
    reference = scenario.setup(work / "reference")
    old = without_state(tree_state(reference.path))
    scenario.command(reference, None)
    new = without_state(tree_state(reference.path))
    assert old != new
    runs = []
    trace: list = []
    points = [1]  # the rest once the trace of a whole recovery says how many steps it has
    while len(runs) < len(points):
        n = points[len(runs)]
        root = scenario.setup(work / f"root{n}")
        killed = in_child(lambda: scenario.command(root, Killer(scenario.kill_at,
                                                                  scenario.after_commit)))
        journal = root.path / ".cudnn-setup" / "journal.json"
        if killed != "killed" or not journal.exists():
            return {"error": f"the command was not left half done ({killed})"}
        if n == 1:  # the steps of one whole recovery, for the record
            probe = scenario.setup(work / "trace")
            in_child(lambda: scenario.command(probe, Killer(scenario.kill_at,
                                                            scenario.after_commit)))
            tracer = Killer(None)
            placement.recover_pending(probe, fs=tracer)
            trace = [(name, os.path.relpath(p, probe.path)) for name, p in tracer.trace]
            points = kill_points(trace, every)
        kills = 0  # recovery killed at its n-th step, and the recovery after it too
        while kills < 2 and in_child(
                lambda: placement.recover_pending(root, fs=Killer(n))) == "killed":
            kills += 1
        try:  # what install, uninstall and repair do first, under the lock
            placement.recover_pending(root)
            code = 0
        except SetupError as exc:
            code = exc.exit_code
        state = without_state(tree_state(root.path))
        outcome = "old" if state == old else "new" if state == new else "mixed"
        runs.append({"n": n, "kills": kills, "outcome": outcome, "exit": code,
                     "journal_left": journal.exists(),
                     "tx_left": (root.path / ".cudnn-setup" / "tx").exists()})
        if kills == 0:
            break
    return {"trace": trace, "runs": runs}


if __name__ == "__main__":
    name, archives, work = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    every = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    (work / "cc").mkdir(parents=True, exist_ok=True)
    print(json.dumps(sweep(Scenario(name, archives, Compiler(work / "cc")), work, every)))
