"""The Ansible role, run by real ansible-core against a tmp CUDA root on localhost."""
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, clean_env, tree_state

PLAYBOOK = REPO / "tests" / "ansible" / "site.yml"
RECAP = re.compile(r"localhost\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)")
V7 = "cudnn-10.0-linux-x64-v7.4.2.24.tgz"

pytestmark = pytest.mark.skipif(shutil.which("ansible-playbook", path=str(Path(sys.executable).parent))
                                is None, reason="ansible-core is not installed (test extra)")


def play(tmp_path, home, variables, *extra, env_extra=None, playbook=PLAYBOOK):
    vars_file = tmp_path / "vars.json"
    vars_file.write_text(json.dumps(variables))
    env = clean_env(home, **(env_extra or {}), ANSIBLE_ROLES_PATH=str(REPO / "contrib" / "ansible" / "roles"),
                    ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"),
                    ANSIBLE_REMOTE_TEMP=str(tmp_path / "ansible-tmp"),
                    ANSIBLE_NOCOLOR="1", ANSIBLE_RETRY_FILES_ENABLED="0",
                    # each task's module piped into one python on the node, as a fleet runs it:
                    # no mkdir, chmod and rm of a module file per task
                    ANSIBLE_PIPELINING="1")
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
           "-e", f"ansible_python_interpreter={sys.executable}", "-e", f"@{vars_file}",
           str(playbook), *extra]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    m = RECAP.search(done.stdout)
    assert m, done.stdout + done.stderr
    ok, changed, unreachable, failed = map(int, m.groups())
    return done, changed, failed


@pytest.fixture
def variables(archives, cuda_root, home, tmp_path):
    return {"cudnn_setup_install_tool": False, "cudnn_setup_venv": sys.prefix,
            "cudnn_setup_archive_src": str(archives[V7]),
            "cudnn_setup_archive_dest_dir": str(tmp_path / "node-cache"),
            "cudnn_setup_cuda_root": str(cuda_root()),
            "cudnn_setup_theanorc_files": [str(home / ".theanorc")]}


def test_first_run_changes_second_run_does_not(variables, tmp_path, home):
    root = Path(variables["cudnn_setup_cuda_root"])
    done, changed, failed = play(tmp_path, home, variables)
    assert failed == 0 and changed >= 2, done.stdout
    assert (root / "lib64" / "libcudnn.so.7.4.2").is_file()
    assert "cudnn" in (home / ".theanorc").read_text()
    assert "files | pass" in done.stdout  # verify's checks are shown
    done, changed, failed = play(tmp_path, home, variables)
    assert failed == 0 and changed == 0, done.stdout


def test_the_roles_install_imports_no_framework(variables, tmp_path, home):
    """The role shows install's plan only, and its verify task reports the frameworks: the
    install's look ahead at what they would load after its change (each framework imported
    twice, seconds each with torch, on every converge of every node) was never read."""
    site, tries = tmp_path / "site", tmp_path / "tries"
    pkg = site / "cupy"  # a framework the probes find, whose import says so
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(f"open({str(tries)!r}, 'a').write('imported\\n')\n"
                                     "__version__ = '13.0.0'\n")
    variables["cudnn_setup_verify"] = False
    done, changed, failed = play(tmp_path, home, variables,
                                 env_extra={"PYTHONPATH": f"{REPO}:{site}"})
    assert failed == 0 and changed >= 2, done.stdout
    assert (Path(variables["cudnn_setup_cuda_root"]) / "lib64" / "libcudnn.so.7.4.2").is_file()
    assert not tries.exists(), tries.read_text()


def test_check_mode_changes_nothing_and_reports_what_would(variables, tmp_path, home):
    root = Path(variables["cudnn_setup_cuda_root"])
    before = tree_state(root)
    done, changed, failed = play(tmp_path, home, variables, "--check")
    assert failed == 0 and changed >= 2, done.stdout
    assert "create include/cudnn.h" in done.stdout
    assert tree_state(root) == before and not (home / ".theanorc").exists()


def test_verify_reads_the_theanorc_the_role_wrote(variables, tmp_path, home):
    """The verify task ran the theano check under the config of the user the play runs as
    (root's ~/.theanorc on a node, which the role never writes): with no config there, Theano
    1.0.5 could not import, and the play failed although the file it wrote was right."""
    written = tmp_path / "user" / ".theanorc"
    written.parent.mkdir()
    variables.update(cudnn_setup_theanorc_files=[str(written)],
                     cudnn_setup_theano_python=sys.executable)
    done, changed, failed = play(tmp_path, home, variables)
    assert failed == 0 and changed >= 2, done.stdout
    assert re.search(rf"theano \| (pass|warn) \| [^|]*with config {re.escape(str(written))}",
                     done.stdout), done.stdout
    assert not (home / ".theanorc").exists()


def test_a_verify_that_could_not_run_fails_the_host(variables, tmp_path, home):
    """Only verify's exit 1 (a failed check) failed the host: an error, here a
    cudnn_setup_theano_python that does not exist (exit 2), verified nothing, showed no checks
    and the play was ok."""
    missing = tmp_path / "no-such-python"
    variables.update(cudnn_setup_theanorc_files=[], cudnn_setup_theano_python=str(missing))
    done, changed, failed = play(tmp_path, home, variables)
    assert failed == 1, done.stdout
    assert "cudnn-setup verify failed [usage, exit 2]" in done.stdout and str(missing) in done.stdout


def test_what_the_theanorc_writes_warn_of_is_shown(variables, tmp_path, home):
    """A theanorc file Theano does not read there was reported `changed`, and the tool's
    warning saying so was dropped: the fleet's Theano ran without cuDNN, unwarned."""
    elsewhere = tmp_path / "elsewhere.rc"
    variables.update(cudnn_setup_theanorc_files=[str(elsewhere)], cudnn_setup_verify=False)
    done, changed, failed = play(tmp_path, home, variables)
    assert failed == 0 and elsewhere.is_file(), done.stdout
    assert f"Theano does not read {elsewhere} here" in done.stdout, done.stdout


def test_check_mode_on_a_node_without_the_tool_says_so(variables, tmp_path, home):
    """A fleet's first `--check`: check mode installs no tool, and the role then ran the missing
    program and failed every node with a template error ("object of type 'dict' has no
    attribute 'error'"). It says what check mode cannot see, and changes nothing."""
    root = Path(variables["cudnn_setup_cuda_root"])
    venv = tmp_path / "node-venv"
    variables.update(cudnn_setup_install_tool=True, cudnn_setup_venv=str(venv),
                     cudnn_setup_pip_spec=str(REPO))
    before = tree_state(root)
    done, changed, failed = play(tmp_path, home, variables, "--check")
    assert failed == 0 and changed >= 1, done.stdout + done.stderr
    assert f"cudnn-setup is not in {venv} yet" in done.stdout, done.stdout
    assert tree_state(root) == before and not venv.exists()
    assert not (home / ".theanorc").exists()


def test_a_tool_that_answers_no_json_fails_with_what_happened(variables, tmp_path, home):
    """No JSON at all (the tool not where cudnn_setup_venv says) was a template error of the
    lock-held retry; it is the role's own failure, naming the program it ran."""
    missing = tmp_path / "no-venv"
    variables["cudnn_setup_venv"] = str(missing)
    done, changed, failed = play(tmp_path, home, variables)
    assert failed == 1, done.stdout
    assert "Error while evaluating conditional" not in done.stdout, done.stdout
    assert "[no-output, exit" in done.stdout and f"{missing}/bin/cudnn-setup" in done.stdout


def test_bad_archive_fails_the_play_with_the_tools_message(variables, tmp_path, home, compiler):
    from fixtures.hostile import CASES, build_case

    case = next(c for c in CASES if c.name == "traversal")
    variables["cudnn_setup_archive_src"] = str(build_case(case, tmp_path, compiler))
    root = Path(variables["cudnn_setup_cuda_root"])
    before = tree_state(root)
    done, changed, failed = play(tmp_path, home, variables)
    assert failed == 1
    assert "[archive-rejected, exit 3]" in done.stdout and "climbs out with '..'" in done.stdout
    assert tree_state(root) == before


@pytest.fixture
def tool_venv(tmp_path) -> Path:
    """The tool in a virtualenv of its own, as the role installs it on a node: its dependencies,
    but neither numpy nor Theano, which live in the users' interpreter."""
    import sysconfig

    venv = tmp_path / "tool-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   capture_output=True)
    site = Path(subprocess.run([venv / "bin" / "python", "-c", "import sysconfig; print("
                                "sysconfig.get_paths()['purelib'])"], check=True,
                               capture_output=True, text=True).stdout.strip())
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.lower().startswith(("numpy", "scipy", "theano")):
            (site / entry.name).symlink_to(entry)
    tool = venv / "bin" / "cudnn-setup"
    tool.write_text(f"#!{venv / 'bin' / 'python'}\nimport sys\n"
                    "from cudnn_setup.cli import console_main\nsys.exit(console_main())\n")
    tool.chmod(0o755)
    has_numpy = subprocess.run([venv / "bin" / "python", "-c", "import numpy"],
                               capture_output=True)
    assert has_numpy.returncode != 0
    return venv


def test_the_theanorc_written_lets_the_users_theano_import(variables, tool_venv, tmp_path,
                                                            home):
    """The tool's own venv has no numpy: asked nothing else, the config it wrote lacked the
    [blas] ldflags that Theano 1.0.5 needs under numpy 1.22 or later, and the users' Theano
    (cudnn_setup_theano_python) then failed `import theano` while every task was ok."""
    variables.update(cudnn_setup_venv=str(tool_venv), cudnn_setup_theano_python=sys.executable,
                     cudnn_setup_verify=False)
    done, changed, failed = play(tmp_path, home, variables)
    assert failed == 0 and changed >= 2, done.stdout + done.stderr
    assert "ldflags" in (home / ".theanorc").read_text()
    imported = subprocess.run([sys.executable, "-c", "import theano"], cwd=tmp_path,
                              env=clean_env(home), capture_output=True, text=True, timeout=300)
    assert imported.returncode == 0, imported.stderr[-2000:]


# --- by version, from a mirror of NVIDIA's redist tree on the node's disk ----------------------

@pytest.fixture(scope="module")
def mirror(tmp_path_factory, compiler):
    from fixtures.mirror import build_mirror

    return build_mirror(tmp_path_factory.mktemp("mirror"), cc=compiler)


@pytest.fixture
def by_version(variables, mirror, cuda_root):
    variables.update(cudnn_setup_archive_src="", cudnn_setup_version="9.1",
                     cudnn_setup_mirror=mirror.url,
                     cudnn_setup_cuda_root=str(cuda_root(version="12.4", layout="lib")))
    return variables


# The role's by-version path and its second run are also what the last test below does, from a
# mirror `cudnn-setup mirror` built and served over HTTP: a plain run keeps that one.
@pytest.mark.slow
def test_version_from_a_mirror_installs_the_roots_build_then_changes_nothing(by_version, tmp_path,
                                                                             home):
    root = Path(by_version["cudnn_setup_cuda_root"])
    done, changed, failed = play(tmp_path, home, by_version)
    assert failed == 0 and changed >= 2, done.stdout
    assert (root / "lib" / "libcudnn.so.9.1.7").is_file()
    manifest = json.loads((root / ".cudnn-setup" / "manifest.json").read_text())
    assert manifest["source"]["name"] == "cudnn-linux-x86_64-9.1.7.99_cuda12-archive.tar.xz"
    assert "files | pass" in done.stdout
    done, changed, failed = play(tmp_path, home, by_version)
    assert failed == 0 and changed == 0, done.stdout


def test_the_shipped_playbook_installs_by_version_as_its_readme_says(by_version, tmp_path, home):
    """The README's by-version command runs contrib/ansible/playbook.yml, which pinned the
    sha256 of one 8.9.7 archive for every run: any version given there was refused as a
    checksum mismatch with a --sha256 nobody typed."""
    root = Path(by_version["cudnn_setup_cuda_root"])
    # become: the play's escalation to root; this test runs as the user the nodes' tool would
    done, changed, failed = play(tmp_path, home, by_version, "-e", "ansible_become=false",
                                 playbook=REPO / "contrib" / "ansible" / "playbook.yml")
    assert failed == 0 and changed >= 1, done.stdout
    assert (root / "lib" / "libcudnn.so.9.1.7").is_file()


def test_version_without_a_build_for_the_root_fails_with_the_tools_message(by_version, tmp_path,
                                                                           home):
    by_version["cudnn_setup_version"] = "9.4.2"  # the mirror has it for CUDA 13 only
    root = Path(by_version["cudnn_setup_cuda_root"])
    before = tree_state(root)
    done, changed, failed = play(tmp_path, home, by_version)
    assert failed == 1 and "[no-cuda-variant, exit 3]" in done.stdout
    assert "no build for CUDA 12" in done.stdout
    assert "cuda13" in done.stdout and tree_state(root) == before


def test_archive_or_version_exactly_one_and_quoted(by_version, tmp_path, home):
    """Three nodes of one play, each given one of the mistakes (a version YAML read as a
    number; an archive and a version; neither): each node fails the play with its own
    complaint. One ansible-playbook run for the three, as for a fleet: these checks run on the
    controller, so a run per mistake was a second of its start-up each."""
    mistakes = {"unquoted": ({"cudnn_setup_version": 9.1}, "quote the version"),
                "both": ({"cudnn_setup_archive_src": "x.tgz"}, "not both"),
                "neither": ({"cudnn_setup_version": ""}, "not both")}
    # inventory variables, not extra ones: those would override each node's own
    nodes = {name: {**by_version, **change, "ansible_connection": "local",
                    "ansible_python_interpreter": sys.executable}
             for name, (change, _) in mistakes.items()}
    inventory = tmp_path / "fleet.yml"
    inventory.write_text(json.dumps({"all": {"hosts": nodes}}))  # JSON is YAML
    env = clean_env(home, ANSIBLE_ROLES_PATH=str(REPO / "contrib" / "ansible" / "roles"),
                    ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"), ANSIBLE_NOCOLOR="1",
                    ANSIBLE_RETRY_FILES_ENABLED="0")
    done = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i",
                           str(inventory), "-e", "cudnn_setup_test_hosts=all", str(PLAYBOOK)],
                          env=env, capture_output=True, text=True, timeout=600)
    for name, (_, complaint) in mistakes.items():
        recap = re.search(rf"^{name}\s*:\s*ok=\d+\s+changed=\d+\s+unreachable=0\s+failed=(\d+)",
                          done.stdout, re.M)
        assert recap and recap.group(1) == "1", done.stdout + done.stderr
        fatal = [line for line in done.stdout.splitlines() if line.startswith(f"fatal: [{name}]")]
        assert len(fatal) == 1 and complaint in fatal[0], done.stdout


# --- by version, from a mirror that `cudnn-setup mirror` built ---------------------------------

def test_nodes_are_provisioned_by_version_from_a_mirror_the_command_built(variables, mirror,
                                                                          cuda_root, tmp_path,
                                                                          home):
    from conftest import run_json
    from httpserver import DirectoryServer as Served

    built = tmp_path / "fleet-mirror"
    done, out = run_json(["mirror", built, "9.1", "--cuda", "12", "--from", mirror.url], home)
    assert done.returncode == 0, done.stderr
    root = Path(cuda_root(version="12.4", layout="lib"))
    with Served(built) as served:
        variables.update(cudnn_setup_archive_src="", cudnn_setup_version="9.1",
                         cudnn_setup_mirror=served.url, cudnn_setup_cuda_root=str(root))
        done, changed, failed = play(tmp_path, home, variables)
        assert failed == 0 and changed >= 2, done.stdout
        assert (root / "lib" / "libcudnn.so.9.1.7").is_file()
        manifest = json.loads((root / ".cudnn-setup" / "manifest.json").read_text())
        assert manifest["source"]["provenance"]["source"] == "mirror"
        assert manifest["source"]["provenance"]["location"].startswith(served.url)
        assert "files | pass" in done.stdout
        done, changed, failed = play(tmp_path, home, variables)
        assert failed == 0 and changed == 0, done.stdout
