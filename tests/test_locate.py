"""Any cuDNN, not only the tool's: the distribution packages' multiarch layout (with Debian's
alternatives links), a pip wheel's directory, and a directory named with --lib-dir, built from
real gcc-built libraries under tmp prefixes; then verify's checks on each."""
import os

import pytest

from conftest import check_facts, tree_state
from cudnn_setup.installation import locate
from cudnn_setup.checks.coherence import check_coherence_with
from cudnn_setup.checks.deps import check_deps_with
from cudnn_setup.checks.elf_check import check_elf
from cudnn_setup.checks.files_check import check_files
from cudnn_setup.checks.versions_check import check_versions
from cudnn_setup.installation.model import Installation
from cudnn_setup.checks.load_check import load_libcudnn
from cudnn_setup.checks.cuda_check import check_cuda_with
from cudnn_setup.checks.loader_check import check_loader_with
from cudnn_setup.errors import UsageError
from cudnn_setup.facts.cuda import CudaRoot
from fixtures import layouts
from fixtures.deplibs import build

SUBS = ["libcudnn.so.9.3.0"] + [f"libcudnn_{s}.so.9.3.0" for s in sorted(layouts.SUB9)]


def test_distribution_layout_is_read_through_the_alternatives_and_never_written(tmp_path, compiler):
    prefix = tmp_path / "root"
    layouts.multiarch(prefix, compiler)
    before = tree_state(prefix)
    inst = locate.find_multiarch(prefix)
    assert inst.origin == "multiarch" and inst.manifest is None
    assert inst.lib_dir == prefix / "usr/lib/x86_64-linux-gnu"
    assert sorted(p.name for p in inst.libraries) == sorted(SUBS)
    assert inst.version == "9.3.0" and inst.generation == "9.x"
    assert inst.include_dir == prefix / "usr/include"  # where <cudnn.h> is found
    header = inst.origin_facts["header"]
    assert header["links"] == [str(prefix / "usr/include/cudnn_version.h"),
                               str(prefix / "etc/alternatives/cudnn_version_h"),
                               str(prefix / "usr/include/x86_64-linux-gnu/cudnn_version_v9.h")]
    assert header["alternatives"] is True
    assert inst.soname_path() == inst.lib_dir / "libcudnn.so.9"
    assert tree_state(prefix) == before


def test_distribution_layout_without_alternatives_uses_the_v9_headers(tmp_path, compiler):
    prefix = tmp_path / "root"
    layouts.multiarch(prefix, compiler, alternatives=False)
    inst = locate.find_multiarch(prefix)
    assert inst.version == "9.3.0"
    assert inst.header_file == prefix / "usr/include/x86_64-linux-gnu/cudnn_version_v9.h"
    assert inst.include_dir == prefix / "usr/include/x86_64-linux-gnu"
    assert inst.origin_facts["header"]["alternatives"] is False


def test_wheel_files_named_by_soname_get_their_version_from_the_header(tmp_path, compiler):
    site = tmp_path / "site"
    layouts.wheel(site, compiler)
    inst = locate.find_wheel(site)
    assert inst.origin == "wheel"
    assert sorted(p.name for p in inst.libraries) == sorted(n.replace(".9.3.0", ".9") for n in SUBS)
    assert inst.version == "9.3.0" and inst.major == 9
    assert inst.library("libcudnn") == site / "nvidia/cudnn/lib/libcudnn.so.9"
    assert inst.origin_facts["wheel"]["name"] == "nvidia-cudnn-cu12"
    assert inst.origin_facts["wheel"]["cuda_major"] == 12
    for h in (site / "nvidia/cudnn/include").iterdir():
        h.unlink()
    inst = locate.find_wheel(site)  # no headers: the wheel's own version
    assert inst.version == "9.3.0" and inst.origin_facts["version_from"] == "wheel metadata"
    assert inst.header_file is None


def test_lib_dir_without_cudnn_is_a_usage_error(tmp_path):
    (tmp_path / "empty").mkdir()
    for where in (tmp_path / "empty", tmp_path / "missing"):
        with pytest.raises(UsageError) as err:
            locate.locate(where)
        assert err.value.code == "no-cudnn" and err.value.exit_code == 2


def test_lib_dir_with_an_explicit_include_dir_and_two_majors(tmp_path):
    lib, inc = tmp_path / "opt" / "lib", tmp_path / "headers"
    build(lib / "libcudnn.so.8.9.7", "libcudnn.so.8", work=tmp_path / "w8", version=8907)
    build(lib / "libcudnn.so.9.1.0", "libcudnn.so.9", work=tmp_path / "w9", version=90100)
    (lib / "libcudnn.so").symlink_to("libcudnn.so.8.9.7")
    layouts.version_header(inc, (8, 9, 7))
    inst = locate.locate(lib, inc)
    assert inst.origin == "lib-dir" and [p.name for p in inst.libraries] == ["libcudnn.so.8.9.7"]
    assert inst.version == "8.9.7" and inst.include_dir == inc
    assert inst.origin_facts["other_majors"] == [9]
    (lib / "libcudnn.so").unlink()
    assert [p.name for p in locate.locate(lib, inc).libraries] == ["libcudnn.so.9.1.0"]


def test_origin_of_paths():
    from pathlib import Path

    assert locate.origin_of(Path("/x/site-packages/nvidia/cudnn/lib")) == "wheel"
    assert locate.origin_of(Path("/usr/lib/x86_64-linux-gnu")) == "multiarch"
    assert locate.origin_of(Path("/lib/aarch64-linux-gnu")) == "multiarch"
    assert locate.origin_of(Path("/opt/cudnn/lib")) == "lib-dir"
    assert locate.default_include_dirs(Path("/lib/x86_64-linux-gnu")) == [
        Path("/usr/include"), Path("/usr/include/x86_64-linux-gnu")]


@pytest.mark.parametrize("layout", ["multiarch", "wheel"])
def test_verify_checks_run_the_same_way_on_a_cudnn_the_tool_did_not_install(layout, tmp_path, compiler):
    lib = (layouts.multiarch(tmp_path / "root", compiler) if layout == "multiarch"
           else layouts.wheel(tmp_path / "site", compiler))
    root = CudaRoot(tmp_path, "test", "12.4", "test")
    inst = locate.locate(lib, cuda_root=root)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LD_", "CUDA"))}
    files = check_files(inst, check_facts())
    assert files.status == "warn" and "not installed by cudnn-setup" in files.detail
    assert check_elf(inst, check_facts()).status == "pass"
    assert check_versions(inst, check_facts()).status == "pass"
    load, data = load_libcudnn(inst, env)
    assert load.status == "pass" and data.version == 90300 and data.cudnn == "9.3.0"
    assert check_loader_with(inst, env).status == "warn"  # a tmp dir is not on the loader path
    assert check_cuda_with(inst, data).status == "pass"
    assert check_deps_with(inst, env, load_data=data, driver_present=False).status == "pass"
    assert check_coherence_with(inst, env, load_data=data).status == "pass"


def test_a_root_without_cudnn_gives_each_skipped_check_the_real_reason(tmp_path):
    root = CudaRoot(tmp_path / "cuda", "test", "12.4", "test")
    inst = Installation(root=root, lib_dir=tmp_path / "cuda" / "lib64", manifest=None)
    reason = locate.absent(inst)
    assert reason.startswith(f"no cuDNN in {tmp_path / 'cuda'}: no libcudnn.so.N in")
    skipped = locate.skipped_without_cudnn(inst)
    assert set(skipped) == set(locate.NEED_CUDNN)
    assert all(c.status == "skip" and c.detail == reason for c in skipped.values())


def test_lib_dir_of_the_root_itself_is_the_roots_installation(archives, cuda_root, home):
    from conftest import run_json
    from fixtures.generate import GENERATION_SAMPLES

    root = cuda_root(version="12.4")
    done, _ = run_json(["install", archives[GENERATION_SAMPLES["9.x"]], "--cuda-root", root,
                        "--no-theanorc", "--no-verify"], home)
    assert done.returncode == 0, done.stderr
    cuda = CudaRoot(root, "test", "12.4", "test")
    inst = locate.locate(root / "lib64", cuda_root=cuda)
    assert inst.manifest is not None and inst.origin is None and inst.version == "9.3.0"
