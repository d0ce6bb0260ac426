"""`inspect` describes every generation correctly and refuses every bad archive, all problems listed."""
import io

import pytest

from conftest import run_cli, run_json
from fixtures.generate import GENERATION_SAMPLES, OSX_NAME, SPECS, WINDOWS_NAME
from fixtures.hostile import CASES, build_case, damaged, truncated_xz

EXPECTED = {
    # generation: (cudnn version, layout, library, soname, cuda, static count)
    "R1": ("1.0.0", "flat", "libcudnn.so.6.5.18", "libcudnn.so.6.5", "6.5", 1),
    "v2": ("2.0.0", "flat", "libcudnn.so.6.5.48", "libcudnn.so.6.5", "6.5", 1),
    "v3": ("3.0.7", "cuda", "libcudnn.so.7.0.64", "libcudnn.so.7.0", "7.0", 1),
    "v4-v7": ("7.4.2", "cuda", "libcudnn.so.7.4.2", "libcudnn.so.7", "10.0", 1),
    "8.0-8.3.0": ("8.2.1", "cuda", "libcudnn.so.8.2.1", "libcudnn.so.8", "11.3", 7),
    "8.3.1+": ("8.9.6", "archive", "libcudnn.so.8.9.6", "libcudnn.so.8", "12", 7),
    "9.x": ("9.3.0", "archive", "libcudnn.so.9.3.0", "libcudnn.so.9", "12", 8),
}


@pytest.mark.parametrize("generation", list(GENERATION_SAMPLES))
def test_every_generation_is_described(generation, archives, home):
    done, out = run_json(["inspect", archives[GENERATION_SAMPLES[generation]]], home)
    assert done.returncode == 0, done.stderr
    pkg = out["package"]
    version, layout, lib, soname, cuda, statics = EXPECTED[generation]
    assert out["ok"] is True and out["command"] == "inspect" and out["error"] is None
    assert out["cudnn_version"] == version == pkg["cudnn_version"]
    assert pkg["generation"] == generation
    assert pkg["layout"] == layout
    assert pkg["cuda_version"] == cuda
    assert pkg["complete"] is True and pkg["installable"] is True
    assert pkg["platform"]["elf_machines"] == ["x86_64"]
    main = next(x for x in pkg["libraries"] if x["name"].startswith("libcudnn.so."))
    assert (main["name"], main["soname"]) == (lib, soname)
    assert len(pkg["libraries"]) == len(SPECS[GENERATION_SAMPLES[generation]].stems())
    assert len(pkg["static_libraries"]) == statics
    assert "cudnn.h" in pkg["headers"]
    assert {"name": "libcudnn.so", "target": soname} in pkg["install_links"]
    assert len(pkg["sha256"]) == 64


def test_r1_says_where_its_version_comes_from(archives, home):
    _, out = run_json(["inspect", archives["cudnn-6.5-linux-R1.tgz"]], home)
    assert "no version macros" in out["package"]["version_source"]


def test_human_output_names_chain_and_verdict(archives, home):
    done = run_cli(["inspect", archives[GENERATION_SAMPLES["v3"]]], home)
    assert done.returncode == 0
    assert "libcudnn.so -> libcudnn.so.7.0 -> libcudnn.so.7.0.64" in done.stdout
    assert "installable on this machine" in done.stdout


@pytest.mark.parametrize("name,expect", [
    ("cudnn-11.3-linux-ppc64le-v8.2.1.32.tgz", "this archive is for ppc64le; this machine is x86_64"),
    ("cudnn-linux-sbsa-8.9.6.99_cuda12-archive.tar.xz", "this archive is for aarch64; this machine is x86_64"),
    (OSX_NAME, "this archive is for macOS"),
    (WINDOWS_NAME, "the format of cuDNN for Windows"),
])
def test_other_platforms_are_refused(name, expect, archives, home):
    done, out = run_json(["inspect", archives[name]], home)
    assert done.returncode == 3
    assert out["ok"] is False and out["error"]["exit_code"] == 3
    assert expect in done.stderr
    assert out["error"]["hint"]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_archives_are_refused(case, tmp_path, compiler, home):
    path = build_case(case, tmp_path, compiler)
    done, out = run_json(["inspect", path], home)
    assert done.returncode == 3, (done.stdout, done.stderr)
    assert out["ok"] is False and out["error"]["exit_code"] == 3
    messages = [p["message"] for p in out["package"]["problems"]]
    assert any(case.expect in m for m in messages), messages
    assert case.expect in done.stdout  # every problem is listed for people too
    assert "\x1b" not in done.stdout + done.stderr and "two\nlines" not in done.stdout


def test_all_problems_are_reported_not_only_the_first(tmp_path, compiler, home):
    from fixtures.hostile import Case, _without
    from fixtures.generate import Entry

    case = Case("many", "", lambda e: _without(e, "cuda/include/cudnn.h")
                + [Entry("/abs", b"x"), Entry("cuda/../up", b"x")])
    done, out = run_json(["inspect", build_case(case, tmp_path, compiler)], home)
    codes = {p["code"] for p in out["package"]["problems"]}
    assert {"no-header", "unsafe-path"} <= codes
    assert sum(p["code"] == "unsafe-path" for p in out["package"]["problems"]) == 2


def test_names_with_escapes_are_printed_escaped(tmp_path, compiler, home):
    case = next(c for c in CASES if c.name == "control-chars")
    done = run_cli(["inspect", build_case(case, tmp_path, compiler)], home)
    assert "evil\\e[31mred.h" in done.stdout
    assert "\x1b" not in done.stdout


@pytest.mark.parametrize("kind,expect", [
    ("truncated", "truncated or corrupt"),
    ("corrupt", "truncated or corrupt"),
    ("random", "is not a tar archive"),
    ("empty", "is not a tar archive"),
    ("bomb", "more than any real cuDNN file"),
])
def test_damaged_files_are_refused(kind, expect, archives, tmp_path, home):
    path = damaged(archives[GENERATION_SAMPLES["v4-v7"]], tmp_path)[kind]
    done, out = run_json(["inspect", path], home)
    assert done.returncode == 3, done.stderr
    assert expect in done.stdout + done.stderr


def test_truncated_xz_is_refused(archives, tmp_path, home):
    path = truncated_xz(archives[GENERATION_SAMPLES["9.x"]], tmp_path)
    done, out = run_json(["inspect", path], home)
    assert done.returncode == 3
    assert "truncated or corrupt" in done.stdout + done.stderr


def test_missing_file_is_a_usage_error(tmp_path, home):
    done, out = run_json(["inspect", tmp_path / "nope.tgz"], home)
    assert done.returncode == 2
    assert "does not exist" in out["error"]["message"]


def test_inspect_of_a_plain_tar(archives, tmp_path, home):
    import gzip

    raw = gzip.decompress(archives[GENERATION_SAMPLES["v3"]].read_bytes())
    plain = tmp_path / "cudnn-7.0-linux-x64-v3.0-prod.tar"
    plain.write_bytes(raw)
    done, out = run_json(["inspect", plain], home)
    assert done.returncode == 0 and out["package"]["compression"] == "tar"


def test_usage_error_is_still_one_json_object(home):
    done, out = run_json(["install", "--bogus-option"], home)
    assert done.returncode == 2 and out["ok"] is False
    assert out["error"]["exit_code"] == 2 and "--bogus-option" in out["error"]["message"]


def test_without_the_xz_binary_python_lzma_decodes(archives, tmp_path, home):
    """No xz on PATH: the in-process decoder (on its read-ahead thread) gives the same answers."""
    no_xz = {"PATH": str(tmp_path / "empty-bin")}
    done, out = run_json(["inspect", archives[GENERATION_SAMPLES["9.x"]]], home, env_extra=no_xz)
    assert done.returncode == 0 and out["package"]["generation"] == "9.x"
    broken = truncated_xz(archives[GENERATION_SAMPLES["9.x"]], tmp_path)
    done, out = run_json(["inspect", broken], home, env_extra=no_xz)
    assert done.returncode == 3 and "truncated or corrupt" in done.stdout + done.stderr


def _reordered(src, dst, order):
    """The same archive, real tar and xz, its members in another order (`order` sorts them)."""
    import lzma
    import tarfile

    with tarfile.open(src) as tin:
        members = [(m, tin.extractfile(m).read() if m.isfile() else None) for m in tin]
    with lzma.open(dst, "wb") as raw, tarfile.open(fileobj=raw, mode="w") as tout:
        for m, data in sorted(members, key=order):
            tout.addfile(m, io.BytesIO(data) if data is not None else None)
    return dst


def test_link_chains_are_printed_as_chains_whatever_the_member_order(archives, home, tmp_path):
    """NVIDIA's 9.1.0 archive lists lib/libcudnn_adv.so.9.1.0, then libcudnn_adv.so, then
    libcudnn_adv.so.9: the chain is still printed from the linker's name to the file."""
    src = archives[GENERATION_SAMPLES["9.x"]]
    # the file first, then the links with the shortest name first (.so before .so.9)
    nvidia = _reordered(src, tmp_path / src.name, lambda mb: (not mb[0].isfile(), len(mb[0].name)))
    done = run_cli(["inspect", nvidia], home)
    assert done.returncode == 0, done.stderr
    assert ("library      libcudnn_adv.so -> libcudnn_adv.so.9 -> libcudnn_adv.so.9.3.0  "
            "(SONAME libcudnn_adv.so.9)") in done.stdout.splitlines()
    assert " <- " not in done.stdout


def test_two_links_straight_to_one_file_are_two_chains(archives, home, tmp_path):
    import lzma
    import tarfile

    src = archives[GENERATION_SAMPLES["9.x"]]
    dst = tmp_path / src.name
    with tarfile.open(src) as tin, lzma.open(dst, "wb") as raw, \
            tarfile.open(fileobj=raw, mode="w") as tout:
        for m in tin:
            if m.issym() and m.name.endswith("/libcudnn_ops.so"):
                m.linkname = "libcudnn_ops.so.9.3.0"  # not through .so.9
            tout.addfile(m, tin.extractfile(m) if m.isfile() else None)
    done = run_cli(["inspect", dst], home)
    assert ("library      libcudnn_ops.so -> libcudnn_ops.so.9.3.0; libcudnn_ops.so.9 -> "
            "libcudnn_ops.so.9.3.0  (SONAME libcudnn_ops.so.9)") in done.stdout.splitlines()


def test_a_file_member_where_an_earlier_member_needs_a_directory_is_refused(tmp_path, home,
                                                                            cuda_root):
    """`lib64/libcudnn.so.7.4.2/cudnn.h` first, then the library `lib64/libcudnn.so.7.4.2`: the
    second is a file where the first needs a directory. Refused before anything is written
    (staging it failed with "File exists", exit 4, found by the property test of tar streams)."""
    import tarfile

    from conftest import tree_state
    from fixtures.generate import SAMPLE_NAME, SAMPLES

    hostile = tmp_path / "cudnn-10.0-linux-x64-v7.4.2.24.tgz"
    with tarfile.open(SAMPLES / SAMPLE_NAME) as src, tarfile.open(hostile, "w:gz") as out:
        first = tarfile.TarInfo("cuda/lib64/libcudnn.so.7.4.2/cudnn.h")
        first.size = 3
        out.addfile(first, io.BytesIO(b"/**"))
        for member in src.getmembers():
            out.addfile(member, src.extractfile(member) if member.isfile() else None)
    root = cuda_root()
    before = tree_state(root)
    done, out = run_json(["install", hostile, "--cuda-root", root, "--no-theanorc"], home)
    assert done.returncode == 3 and out["error"]["code"] == "archive-rejected", done.stderr
    assert any("where an earlier member needs a directory" in p["message"]
               for p in out["error"].get("problems", [])) or \
        "where an earlier member needs a directory" in out["error"]["message"], out["error"]
    assert tree_state(root) == before
