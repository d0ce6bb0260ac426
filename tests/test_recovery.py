"""Recovery survives being killed itself: SIGKILL at every step of a recovery (and of the one
after it), then any command: the root is exactly the old tree or exactly the new one. Every step
is `slow`; the default run kills at a sample of them (tests/recovery_driver.py's kill_points)."""
import json
import subprocess
import sys

import pytest

from conftest import REPO
from recovery_driver import kill_points

DRIVER = REPO / "tests" / "recovery_driver.py"


SCENARIOS = pytest.mark.parametrize("scenario,expected", [
    ("install-rollback", "old"),  # an upgrade killed mid-rename: recovery rolls it back
    ("install-forward", "new"),  # killed after its commit point: recovery finishes it, keeping
                                 # the hand-copied cudnn.h it displaced
    ("uninstall-rollback", "old"),
    ("uninstall-forward", "new"),
    ("repair-rollback", "old"),  # the damaged root, as it was
    ("repair-forward", "new"),  # repaired, the changed header kept beside the state
])


def _sweep(scenario, expected, archives, tmp_path, every: int) -> tuple[list, list]:
    archive_dir = next(iter(archives.values())).parent
    done = subprocess.run([sys.executable, str(DRIVER), scenario, str(archive_dir), str(tmp_path),
                           str(every)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert "error" not in result, result
    trace, runs = result["trace"], result["runs"]
    # every step of a whole recovery (every `every`-th: kill_points) was a kill point, then one
    # more n that recovery never met
    assert [r["n"] for r in runs] == kill_points(trace, every)
    assert runs[-1]["n"] == len(trace) + 1
    assert runs[-1]["kills"] == 0 and all(r["kills"] >= 1 for r in runs[:-1])
    assert [r["outcome"] for r in runs] == [expected] * len(runs), runs
    assert not any(r["journal_left"] or r["tx_left"] for r in runs)
    assert all(r["exit"] == 0 for r in runs)
    # the journal is removed before the transaction's dir, and a kill fell between the two
    steps = [f"{name} {path}" for name, path in trace]
    journal = steps.index("unlink .cudnn-setup/journal.json")
    tx = next(i for i, s in enumerate(steps) if s.startswith("remove_tree .cudnn-setup/tx/"))
    assert journal < tx
    assert any(journal + 2 <= r["n"] <= tx + 1 for r in runs)
    if expected == "old":  # a real rollback: several renames undone
        assert sum(name == "replace" for name, _ in trace) >= 4
    if scenario == "install-forward":  # the displaced original moves to the store
        assert ("replace", ".cudnn-setup/originals/include/cudnn.h") in map(tuple, trace)
    if scenario == "repair-forward":  # the changed header moves to the repair's copies
        assert any(name == "replace" and path.startswith(".cudnn-setup/changed/")
                   and path.endswith("/include/cudnn.h") for name, path in trace), trace
    return trace, runs


@pytest.mark.slow
@SCENARIOS
def test_kill_at_every_step_of_recovery(scenario, expected, archives, tmp_path, record_property):
    trace, runs = _sweep(scenario, expected, archives, tmp_path, 1)
    record_property(f"recovery_steps_{scenario}", len(trace))
    record_property(f"recovery_kills_{scenario}", sum(r["kills"] for r in runs))


@SCENARIOS
def test_kill_at_sampled_steps_of_recovery(scenario, expected, archives, tmp_path):
    """The default run's share of the sweep above (`slow`): every third step, the last two and
    each step between the journal's removal and the tx dir's."""
    _sweep(scenario, expected, archives, tmp_path, 3)
