"""mypy over the typed modules (pyproject's [tool.mypy] `files`): the answers read from children
are typed records there, so a misspelt field is an error before anything runs. A few seconds on
two cores, from a cache in the test's own directory."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent  # mypy comes with the test extra


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """One cache for both runs: the second reads the package's types from it."""
    return tmp_path_factory.mktemp("mypy-cache")


def mypy(cache: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(cache), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_the_typed_modules_pass(cache):
    done = mypy(cache)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_misspelt_field_is_an_error(cache, tmp_path):
    """The check above can fail: the same configuration finds a misspelt field of an answer."""
    wrong = tmp_path / "wrong.py"
    wrong.write_text("from cudnn_setup.probing.driver import DriverFacts\n"
                     "from cudnn_setup.checks.framework_entry import FrameworkEntry\n\n"
                     "def f(facts: DriverFacts, entry: FrameworkEntry) -> object:\n"
                     "    return facts.cuda_driver_verison, entry.loader.sonmae\n")
    done = mypy(cache, str(wrong))
    assert done.returncode == 1
    assert '"DriverFacts" has no attribute "cuda_driver_verison"' in done.stdout
    assert 'has no attribute "sonmae"' in done.stdout


def test_a_misspelt_field_in_a_replace_is_an_error(cache, tmp_path):
    """A record changed with replace() is checked as one built: the driver probe's own module,
    with one field of its replace() misspelt and another given a number, fails."""
    source = (ROOT / "cudnn_setup" / "probing" / "driver.py").read_text()
    right = 'replace(facts, driver_version=nvml.driver_version, driver_version_from="NVML")'
    assert source.count(right) == 1
    wrong = tmp_path / "driver_wrong.py"
    wrong.write_text(source.replace(right, 'replace(facts, driver_version=13000, '
                                           'driver_version_form="NVML")'))
    done = mypy(cache, str(wrong))
    assert done.returncode == 1, done.stdout + done.stderr
    assert 'Unexpected keyword argument "driver_version_form"' in done.stdout
    assert 'Argument "driver_version" to "replace" of "DriverFacts" has incompatible type ' \
           '"int"' in done.stdout


def test_every_module_of_checks_and_facts_is_judged():
    """The verification layers, the child protocol and the facts are all in mypy's list (by
    file or by directory), so a new module there is typed from its first commit."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 on; CI runs one
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    listed, excluded = config["files"], config.get("exclude", [])
    unjudged = []
    for package in ("checks", "facts", "probing"):
        for path in sorted((ROOT / "cudnn_setup" / package).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            if not any(name == f or (f.endswith("/") and name.startswith(f)) for f in listed) \
                    or any(re.search(x, name) for x in excluded):
                unjudged.append(name)
    assert not unjudged, unjudged
