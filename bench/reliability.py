"""Run the hostile-input and fault suites and print the figures of docs/reliability.md.

    .venv/bin/python bench/reliability.py
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SUITES = ["tests/test_inspect.py", "tests/test_install.py", "tests/test_properties.py",
          "tests/test_theanorc.py", "tests/test_download.py"]
GROUPS = [  # (label, test-name prefix)
    ("hostile archives refused by inspect (exit 3, every problem listed)", "test_hostile_archives_are_refused"),
    ("damaged files refused (truncated gz/xz, corrupt, random, empty, bomb)", "test_damaged_files_are_refused"),
    ("other platforms refused (ppc64le, sbsa, macOS, Windows)", "test_other_platforms_are_refused"),
    ("hostile archives given to install: root tree hash unchanged, sentinel intact", "test_rejected_archive_changes_nothing"),
    ("damaged archives given to install: root unchanged", "test_damaged_archive_changes_nothing"),
    ("property test over generated tar streams (150 examples)", "test_tar_streams"),
    ("OSError injected at each filesystem step (install, upgrade, uninstall)", "test_fault_at_each_step"),
    ("full disk (RLIMIT_FSIZE) during install: exit 5, tree intact", "test_full_disk_exits_5"),
    ("SIGKILL at fixed steps of an upgrade, then any command", "test_sigkill_mid_install"),
    ("SIGKILL at 20 random moments of a 32 MiB install", "test_sigkill_at_random"),
    ("SIGTERM mid-install rolls back", "test_sigterm_mid_install"),
    ("4 concurrent installs of different versions", "test_concurrent_installs"),
    ("changed files never silently replaced or removed", "test_changed_file_is_never"),
    ("theanorc: duplicate section, duplicate key, no section header: refused untouched",
     "test_ambiguous_files_are_refused"),
    ("theanorc: non-UTF-8 refused untouched", "test_non_utf8"),
    ("theanorc: read-only refused", "test_read_only"),
    ("theanorc: symlink written through", "test_symlinked"),
    ("download: wrong checksum refused, nothing kept", "test_wrong_checksum"),
]


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "junit.xml"
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               f"--junitxml={xml}", "-o", "junit_family=xunit1", *SUITES],
                              cwd=REPO, capture_output=True, text=True)
        tree = ET.parse(xml)
    stats: dict[str, list] = defaultdict(lambda: [0, 0])
    props: dict[str, str] = {}
    for case in tree.iter("testcase"):
        name = case.get("name", "")
        failed = case.find("failure") is not None or case.find("error") is not None
        skipped = case.find("skipped") is not None
        for label, prefix in GROUPS:
            if name.startswith(prefix) and not skipped:
                stats[label][0] += 1
                stats[label][1] += failed
        for prop in case.iter("property"):
            props[prop.get("name")] = prop.get("value")
    print("| what was tried | cases | failed |")
    print("|---|---|---|")
    for label, _ in GROUPS:
        total, failed = stats[label]
        print(f"| {label} | {total} | {failed} |")
    print()
    if props:
        print("Recorded figures: " + ", ".join(f"{k}={v}" for k, v in sorted(props.items())))
    print(done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-500:])
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
