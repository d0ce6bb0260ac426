"""Run the hostile-input and fault suites and print the figures of docs/reliability.md.

    .venv/bin/python bench/reliability.py            # the table, then peak memory per case
    .venv/bin/python bench/reliability.py --memory   # only the peak-memory table (20 s)
"""
from __future__ import annotations

import gzip
import json
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SUITES = ["tests/test_inspect.py", "tests/test_install.py", "tests/test_properties.py",
          "tests/test_theanorc.py", "tests/test_download.py", "tests/test_hostile_headers.py",
          "tests/test_faults.py", "tests/test_bytes.py", "tests/test_messages.py"]
GROUPS = [  # (label, test-name prefix, or several)
    ("hostile archives refused by inspect (exit 3, every problem listed)", "test_hostile_archives_are_refused"),
    ("damaged files refused (truncated gz/xz, corrupt, random, empty, bomb)", "test_damaged_files_are_refused"),
    ("other platforms refused (ppc64le, sbsa, macOS, Windows)", "test_other_platforms_are_refused"),
    ("hostile archives given to install: root tree hash unchanged, sentinel intact", "test_rejected_archive_changes_nothing"),
    ("damaged archives given to install: root unchanged", "test_damaged_archive_changes_nothing"),
    ("property test over generated tar streams (150 examples)", "test_tar_streams"),
    ("OSError injected at each filesystem step (install, upgrade, uninstall)", "test_fault_at_each_step"),
    ("full disk during install (a real tmpfs and a real ext4 image, 64 KiB left): exit 5 "
     "`disk-full`, tree intact",
     "test_full_disk_exits_5"),
    ("SIGKILL at fixed steps of an upgrade, then any command", "test_sigkill_mid_install"),
    ("SIGKILL at random moments of a 32 MiB install, until 10 land inside its transaction "
     "(30 at most)",
     "test_sigkill_at_random"),
    ("SIGTERM mid-install rolls back", "test_sigterm_mid_install"),
    ("4 concurrent installs of different versions", "test_concurrent_installs"),
    ("changed files never silently replaced or removed", "test_changed_file_is_never"),
    ("theanorc: duplicate section, duplicate key, no section header: refused untouched",
     "test_ambiguous_files_are_refused"),
    ("theanorc: non-UTF-8 refused untouched", "test_non_utf8"),
    ("theanorc: read-only refused", "test_read_only"),
    ("theanorc: symlink written through", "test_symlinked"),
    ("download: wrong checksum refused, nothing kept", "test_wrong_checksum"),
    # hostile input and faults
    ("hostile tar headers refused by inspect (long names, PAX, chains, sparse)",
     "test_hostile_headers_are_refused"),
    ("hostile tar headers given to install: root tree unchanged, sentinel intact",
     "test_install_of_a_hostile_header_changes_nothing"),
    ("peak RSS of inspect over the header corpus, the bomb, the 9.x sample: under 200 MB",
     "test_peak_memory_stays_bounded"),
    ("GNU, PAX and ustar archives read member for member as tarfile reads them",
     "test_every_tar_format_reads_the_same"),
    ("OSError (EIO) at each filesystem call of every command: one JSON object, documented exit",
     "test_fault_at_every_filesystem_call"),
    ("each errno (ENOSPC, EDQUOT, EACCES, EPERM, EROFS, ENAMETOOLONG, EIO, other): its code",
     "test_each_errno_gets_its_code_and_hint"),
    ("children printing bytes that are not UTF-8 (library, gcc, nvcc, --python)",
     ("test_child_output", "test_library_writing", "test_compiler_output",
      "test_nvcc_version", "test_python_child")),
    ("member names and a root path with byte 0xE9 or a newline, LANG=C and C.UTF-8",
     ("test_member_names_with_byte_e9", "test_root_path_with_byte_e9")),
    ("theanorc: multi-line values merged as Theano reads them (real Theano included)",
     ("test_multiline", "test_real_theano_reads")),
    ("theanorc: duplicate key refused, as Theano's strict ConfigParser stops at it",
     "test_duplicate_key"),
    ("theanorc: FIFO, /dev/zero, directory, socket, oversized: refused without reading",
     ("test_non_regular_files", "test_doctor_never_blocks", "test_oversized_config")),
    ("theanorc: verify and bench do not start Theano on a FIFO; uninstall not failed by it",
     ("test_verify_and_bench_do_not_start", "test_uninstall_is_not_failed")),
    ("theanorc after a committed install: full disk, read-only fs, unreadable: a check fails",
     ("test_full_filesystem", "test_theanorc_on_a_read_only", "test_unreadable_config")),
    ("download: resumed only after a matching 206; refused connections retried; bad URLs",
     ("test_resumed_only", "test_refused_connection", "test_404_and_refused",
      "test_urls_that_do_not_parse", "test_output_dir_holding", "test_header_with_a_newline")),
    ("download: headers and credentials stay behind on a redirect to another host",
     ("test_headers_stay_behind", "test_netrc_is_asked")),
    ("download: cached file without checksum reused only while the server says it is current",
     "test_cached_"),
    ("download: netrc and proxies from the caller's env and home, not the process's",
     ("test_netrc_credentials", "test_proxy_comes")),
    ("messages: read-only root, name too long, missing library, fix printed once, --python",
     ("test_root_on_a_read_only", "test_name_part_too_long", "test_missing_sub_library_is_named",
      "test_ld_library_path_fix", "test_python_that_does_not_exist", "test_ldconfig_registration")),
    ("a bug or a library's error escaping a command, or a broken renderer: one JSON object",
     ("test_errors_that_escape", "test_a_bug_in_rendering")),
]


def memory_table() -> None:
    """Peak RSS (VmHWM) of `cudnn-setup inspect`, each in a process of its own, over the header
    corpus and the 64 GiB bomb: what the 200 MB bound is measured on."""
    sys.path.insert(0, str(REPO))
    from fixtures.hostile import HEADER_CASES, bomb_bytes, build_header_case

    print("| case | .tgz bytes | exit | problem reported | peak RSS (MB) |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        paths = [(c.name, build_header_case(c, Path(tmp))) for c in HEADER_CASES]
        bomb = Path(tmp) / "bomb-cudnn-10.0-linux-x64-v7.4.2.24.tgz"
        bomb.write_bytes(gzip.compress(bomb_bytes(), mtime=0))
        paths.append(("bomb-64g-member", bomb))
        for name, path in paths:
            done = subprocess.run([sys.executable, "-c", MEASURE, "inspect", str(path), "--json"],
                                  cwd=REPO, capture_output=True, text=True, timeout=300)
            peak_kb = int(done.stderr.rsplit("PEAK_KB ", 1)[1].split()[0])
            problems = (json.loads(done.stdout).get("package") or {}).get("problems") or [{}]
            first = problems[0].get("code", "-")
            print(f"| {name} | {path.stat().st_size} | {done.returncode} | {first} | "
                  f"{peak_kb / 1024:.0f} |")


# The CLI reporting the high-water mark of its own memory (VmHWM); wait4's ru_maxrss would
# also count the forked copy of this process that exec replaced.
MEASURE = """
import sys
from cudnn_setup.cli import main
code = main(sys.argv[1:])
with open("/proc/self/status") as f:
    peak = next(line.split()[1] for line in f if line.startswith("VmHWM:"))
sys.stderr.write(f"\\nPEAK_KB {peak}\\n")
sys.exit(code)
"""


def main() -> int:
    if "--memory" in sys.argv[1:]:
        memory_table()
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "junit.xml"
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               f"--junitxml={xml}", "-o", "junit_family=xunit1", "-m", "", *SUITES],
                              cwd=REPO, capture_output=True, text=True)
        tree = ET.parse(xml)
    stats: dict[str, list] = defaultdict(lambda: [0, 0])
    props: dict[str, str] = {}
    failures: list[str] = []
    for case in tree.iter("testcase"):
        name = case.get("name", "")
        failed = case.find("failure") is not None or case.find("error") is not None
        if failed:
            why = (case.find("failure") if case.find("failure") is not None
                   else case.find("error"))
            failures.append(f"{name}: {(why.get('message') or '')[:400]}")
        skipped = case.find("skipped") is not None
        for label, prefix in GROUPS:
            if name.startswith(prefix) and not skipped:  # str.startswith takes a tuple too
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
    for failure in failures:
        print(f"FAILED {failure}")
    print(done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-500:])
    print()
    memory_table()
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
