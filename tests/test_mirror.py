"""`cudnn-setup mirror`: a directory in NVIDIA's layout built from a copy of NVIDIA's tree (the
fixture mirror of real cuDNN-shaped archives), served over HTTP on 127.0.0.1 and installed from
with --mirror; and built from a PyPI index, whose wheels it repacks and marks as such."""
import hashlib
import json
import shutil

import pytest

from conftest import run_json, tree_state
from cudnn_setup.errors import ARCHIVE_REJECTED
from cudnn_setup.fetch.redistrib_json import parse_redistrib
from fixtures.mirror import STANDARD, build_mirror
from fixtures.wheels import IndexFile, build_wheel, project_json, sha256
from httpserver import DirectoryServer as Served, IndexServer


X86_12, X86_13, SBSA_12 = STANDARD[0], STANDARD[1], STANDARD[2]
NO_FLAGS = ["--no-theanorc", "--no-frameworks"]  # and --python (verify_without_theano)

pytestmark = pytest.mark.usefixtures("verify_without_theano")


@pytest.fixture(scope="module")
def source(tmp_path_factory, compiler):
    return build_mirror(tmp_path_factory.mktemp("nvidia-copy"), cc=compiler)


def build(home, out, *args):
    return run_json(["mirror", out, *args], home)


def test_a_mirror_of_nvidias_tree_serves_install_over_http(source, tmp_path, home, cuda_root):
    out = tmp_path / "fleet"
    done, res = build(home, out, "9.1", "--cuda", "12", "--cuda", "13",
                      "--platform", "linux-x86_64", "--platform", "linux-sbsa",
                      "--from", source.url)
    assert done.returncode == 0, done.stderr
    got = {(r["platform"], r["cuda_variant"]): r for r in res["mirror"]["releases"]}
    assert set(got) == {("linux-x86_64", "cuda12"), ("linux-x86_64", "cuda13"),
                        ("linux-sbsa", "cuda12")}
    assert {r["action"] for r in got.values()} == {"fetched"}
    for archive in (X86_12, X86_13, SBSA_12):
        placed = out / "cudnn" / archive.platform / archive.name
        assert placed.read_bytes() == source.archives[archive.name].read_bytes()
    data = (out / "redistrib_9.1.7.json").read_bytes()
    doc = json.loads(data)
    entry = doc["cudnn"]["linux-x86_64"]["cuda12"]
    assert entry == {"relative_path": f"cudnn/linux-x86_64/{X86_12.name}",
                     "sha256": source.sha256(X86_12.name),
                     "md5": hashlib.md5(source.archives[X86_12.name].read_bytes()).hexdigest(),
                     "size": str(source.archives[X86_12.name].stat().st_size)}
    assert doc["cudnn"]["cuda_variant"] == ["12", "13"]
    assert len(parse_redistrib(data, "file:///m/redistrib_9.1.7.json", "9.1.7")) == 3
    assert 'href="redistrib_9.1.7.json"' in (out / "index.html").read_text()
    assert not list((out / "cudnn").rglob("*.part"))

    root = cuda_root("12.4", "lib")
    with Served(out) as served:
        done, res = run_json(["install", "9.1", "--mirror", served.url, "--cuda-root", root,
                              *NO_FLAGS], home)
    assert done.returncode == 0, done.stderr
    assert res["provenance"]["source"] == "mirror"
    assert res["provenance"]["sha256"] == source.sha256(X86_12.name)
    assert res["provenance"]["repacked_from"] is None
    assert (root / "lib" / "libcudnn.so.9.1.7").is_file()


def test_a_second_run_keeps_what_is_there_and_refetches_what_was_damaged(source, tmp_path, home):
    out = tmp_path / "fleet"
    done, _ = build(home, out, "9.1", "--cuda", "12", "--from", source.url)
    assert done.returncode == 0, done.stderr
    manifest = (out / "redistrib_9.1.7.json").read_bytes()
    done, res = build(home, out, "9.1", "--cuda", "12", "--from", source.url)
    assert [r["action"] for r in res["mirror"]["releases"]] == ["kept"]
    assert res["mirror"]["manifests_written"] == [] and res["changed"] is False
    assert (out / "redistrib_9.1.7.json").read_bytes() == manifest
    placed = out / "cudnn" / "linux-x86_64" / X86_12.name
    placed.write_bytes(b"damaged" + placed.read_bytes()[7:])
    done, res = build(home, out, "9.1", "--cuda", "12", "--from", source.url)
    assert [r["action"] for r in res["mirror"]["releases"]] == ["fetched"]
    assert placed.read_bytes() == source.archives[X86_12.name].read_bytes()


def test_a_download_cut_short_is_resumed_and_nothing_half_written_has_a_final_name(
        source, tmp_path, home):
    out = tmp_path / "fleet"
    archive = source.archives[X86_12.name].read_bytes()
    cache = home / ".cache" / "cudnn-setup"  # the tool's download cache, which mirror shares
    cache.mkdir(parents=True)
    (cache / (X86_12.name + ".part")).write_bytes(archive[:1000])
    with Served(source.root) as served:
        done, res = build(home, out, "9.1", "--cuda", "12", "--from", served.url)
    assert done.returncode == 0, done.stderr
    assert ("/cudnn/linux-x86_64/" + X86_12.name, "bytes=1000-") in served.log
    assert (out / "cudnn" / "linux-x86_64" / X86_12.name).read_bytes() == archive


def test_an_archive_that_is_not_what_the_source_vouches_for_is_never_placed(tmp_path, home,
                                                                             compiler):
    bad = build_mirror(tmp_path / "bad", archives=(X86_12,), cc=compiler,
                       wrong_sha256=frozenset({X86_12.name}))
    out = tmp_path / "fleet"
    done, res = build(home, out, "9.1", "--cuda", "12", "--from", bad.url)
    assert done.returncode == ARCHIVE_REJECTED and res["error"]["code"] == "checksum-mismatch"
    assert not (out / "cudnn" / "linux-x86_64" / X86_12.name).exists()
    assert not (out / "redistrib_9.1.7.json").exists()


def test_a_mirror_from_pypi_repacks_marks_and_installs_as_the_mirrors_checksum(
        tmp_path, home, cuda_root, compiler):
    wheel = build_wheel(tmp_path / "wheels", "9.1.7.99", "12", compiler)
    out = tmp_path / "fleet"
    with IndexServer() as index:
        index.routes["/simple/nvidia-cudnn-cu12/"] = (
            "application/vnd.pypi.simple.v1+json",
            project_json("nvidia-cudnn-cu12", [IndexFile(wheel.name, f"{index.base}/f/{wheel.name}",
                                                         sha256(wheel))]))
        index.routes[f"/f/{wheel.name}"] = ("application/octet-stream", wheel.read_bytes())
        done, res = build(home, out, "9.1", "--cuda", "12", "--from", "pypi",
                          "--index-url", index.base + "/simple/")
        assert done.returncode == 0, done.stderr
        (placed,) = res["mirror"]["releases"]
        assert placed["action"] == "repacked"
        assert placed["file_name"] == "cudnn-linux-x86_64-9.1.7.99_cuda12-repack.tar.gz"
        assert placed["repacked_from"] == {"wheel": wheel.name, "sha256": sha256(wheel)}
        # each long step is said as it starts, so a log is never left to guess
        said = [line for line in done.stderr.splitlines() if line.startswith("cudnn-setup: ")]
        steps = ["asking " + index.base + "/simple/ for cuDNN 9.1 (CUDA 12, linux-x86_64)",
                 f"checking the sha256 of {wheel.name}", f"repacking {wheel.name} as "
                 f"{placed['file_name']}", f"reading {placed['file_name']} back as install "
                 "reads it", f"writing the mirror's manifests and index in {out}"]
        at = [next(i for i, line in enumerate(said) if line == "cudnn-setup: " + step)
              for step in steps]
        assert at == sorted(at), said
        asked = len(index.requests)
        done, res = build(home, out, "9.1", "--cuda", "12", "--from", "pypi",
                          "--index-url", index.base + "/simple/")
        assert [r["action"] for r in res["mirror"]["releases"]] == ["kept"]
        assert f"cudnn-setup: checking the mirror's repack {placed['file_name']}" in done.stderr
        assert [r["path"] for r in index.requests[asked:]] == ["/simple/nvidia-cudnn-cu12/"]
    entry = json.loads((out / "redistrib_9.1.7.json").read_text())["cudnn"]["linux-x86_64"]["cuda12"]
    repack = out / "cudnn" / "linux-x86_64" / placed["file_name"]
    assert entry["sha256"] == hashlib.sha256(repack.read_bytes()).hexdigest() != sha256(wheel)
    assert entry["repacked_from"] == placed["repacked_from"]

    root = cuda_root("12.4", "lib")
    before = tree_state(root)
    with Served(out) as served:
        done, res = run_json(["install", "9.1", "--mirror", served.url, "--cuda-root", root,
                              *NO_FLAGS], home)
        assert done.returncode == 0, done.stderr
        assert res["provenance"]["repacked_from"] == placed["repacked_from"]
        assert "the mirror's checksum, not NVIDIA's" in res["provenance"]["checksum_from"]
        done, listed = run_json(["list", "--mirror", served.url, "--cuda-root", root], home)
    assert listed["releases"][0]["repacked_from"] == placed["repacked_from"]
    assert listed["releases"][0]["installed"] is True
    checks = {c["name"]: c["status"] for c in res["checks"]}
    assert checks["files"] == checks["load"] == checks["compile"] == "pass", res["checks"]
    done, _ = run_json(["uninstall", "--cuda-root", root], home)
    assert done.returncode == 0 and tree_state(root) == before


def test_a_repack_under_nvidias_name_is_refused_by_install(tmp_path, home, cuda_root, compiler,
                                                          source):
    """A mirror manifest that marks an archive repacked but names it as NVIDIA's (or the other
    way round) is damaged: the tool never presents a repack as NVIDIA's."""
    out = tmp_path / "fake"
    shutil.copytree(source.root, out)
    path = out / "redistrib_9.1.7.json"
    doc = json.loads(path.read_text())
    doc["cudnn"]["linux-x86_64"]["cuda12"]["repacked_from"] = {
        "wheel": "nvidia_cudnn_cu12-9.1.7.99-py3-none-manylinux_2_27_x86_64.whl", "sha256": "0" * 64}
    path.write_text(json.dumps(doc))
    done, res = run_json(["install", "9.1", "--mirror", out, "--cuda-root", cuda_root("12.4", "lib"),
                          "--dry-run", *NO_FLAGS], home)
    assert done.returncode == 6 and res["error"]["code"] == "manifest-damaged"


def test_mirror_summary_counts_in_words(source, tmp_path, home):
    from conftest import run_cli

    done = run_cli(["mirror", tmp_path / "fleet", "9.1", "--cuda", "12", "--from", source.url],
                   home)
    assert done.returncode == 0, done.stderr
    assert f"mirror {tmp_path / 'fleet'}: 1 archive, 1 manifest written;" in done.stdout, \
        done.stdout
