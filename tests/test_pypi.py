"""install/list/download --from pypi, end to end: NVIDIA-shaped nvidia-cudnn-cu12 wheels (the
fixture archives' gcc-built ELF libraries, under nvidia/cudnn/) served by a real PEP 691 / PEP
503 index on 127.0.0.1, placed into a CUDA root in NVIDIA's archive layout."""
import base64
import json
import time
from pathlib import Path

import pytest

from conftest import run_json, tree_state
from cudnn_setup.archive import inspect_archive
from cudnn_setup.errors import ARCHIVE_REJECTED, DOWNLOAD_FAILED, USAGE, UsageError
from cudnn_setup.sources.pipconf import PYPI, index_config
from fixtures.mirror import MirrorArchive
from fixtures.wheels import (IndexFile, build_wheel, project_html, project_json, sha256,
                             wheel_files, wheel_name)
from httpserver import IndexServer


PROJECT = "nvidia-cudnn-cu12"
JSON = "application/vnd.pypi.simple.v1+json"
FINAL, OLDER, PRE = "9.1.7.99", "9.0.0.3", "9.2.0.5rc1"
NO_FLAGS = ["--no-theanorc", "--no-frameworks"]  # and --python (verify_without_theano)

pytestmark = pytest.mark.usefixtures("verify_without_theano")


@pytest.fixture(scope="module")
def wheels(tmp_path_factory, compiler):
    out = tmp_path_factory.mktemp("wheels")
    made = {v: build_wheel(out, v, "12", compiler) for v in (FINAL, OLDER, PRE)}
    made["aarch64"] = build_wheel(out / "arm", "9.3.0.1", "12", compiler,
                                  platform="manylinux_2_27_aarch64")
    return made


def entries(wheels, base: str, hashes: bool = True) -> list[IndexFile]:
    return [IndexFile(p.name, f"{base}/files/{p.name}", sha256(p) if hashes else None)
            for p in wheels.values()]


def serve(server: IndexServer, wheels, *, page: str = "json", hashes: bool = True,
          files: list[IndexFile] | None = None) -> str:
    """The project page and the wheels on `server`; returns the index URL."""
    files = entries(wheels, server.base, hashes) if files is None else files
    body = project_json(PROJECT, files) if page == "json" else project_html(PROJECT, files)
    server.routes[f"/simple/{PROJECT}/"] = (JSON if page == "json" else "text/html", body)
    for p in wheels.values():
        server.routes[f"/files/{p.name}"] = ("application/octet-stream", p.read_bytes())
    return server.base + "/simple/"


def install(root, home, index, *extra):
    return run_json(["install", *extra, "--from", "pypi", "--index-url", index,
                     "--cuda-root", root, *NO_FLAGS], home)


def test_install_from_a_json_index_looks_like_nvidias_archive_and_uninstalls_byte_for_byte(
        wheels, cuda_root, home, tmp_path, compiler):
    root = cuda_root("12.4", "lib")
    before = tree_state(root)
    with IndexServer() as server:
        index = serve(server, wheels)
        done, out = install(root, home, index, "9")
    assert done.returncode == 0, done.stderr
    # newest final release: not the pre-release, not the aarch64 wheel
    assert out["release"]["version"] == FINAL and out["release"]["format"] == "wheel"
    assert out["release"]["sha256"] == sha256(wheels[FINAL])
    prov = out["provenance"]
    assert prov["source"] == "pypi" and prov["format"] == "wheel"
    assert prov["sha256"] == sha256(wheels[FINAL])
    assert "the package index http://127.0.0.1" in prov["checksum_from"]
    assert prov["location"].endswith("/files/" + wheels[FINAL].name)
    checks = {c["name"]: c["status"] for c in out["checks"]}
    for name in ("files", "elf", "versions", "load", "coherence", "cuda", "compile"):
        assert checks[name] == "pass", out["checks"]
    manifest = json.loads((root / ".cudnn-setup" / "manifest.json").read_text())
    assert manifest["format"] == 3 and manifest["source"]["provenance"] == prov
    assert manifest["source"]["name"] == wheels[FINAL].name
    wheel_root = {k: v for k, v in tree_state(root).items() if not k.startswith(".cudnn-setup")}

    # The same release as NVIDIA's archive, into a fresh root: the same files, modes and links
    # (the wheel has no static libraries, which the archive has)
    other = cuda_root("12.4", "lib")
    from fixtures.generate import spec_entries, write_archive
    archive = write_archive(tmp_path / MirrorArchive(FINAL, "12").name,
                            spec_entries(MirrorArchive(FINAL, "12").spec(), compiler))
    done, _ = run_json(["install", archive, "--cuda-root", other, *NO_FLAGS], home)
    assert done.returncode == 0, done.stderr
    archive_root = {k: v for k, v in tree_state(other).items()
                    if not k.startswith(".cudnn-setup") and not k.endswith("_static.a")}
    assert wheel_root == archive_root
    assert "lib/libcudnn_ops.so.9.1.7" in wheel_root and wheel_root["lib/libcudnn_ops.so.9"] == (
        "link", "libcudnn_ops.so.9.1.7") and wheel_root["lib/libcudnn.so"] == ("link", "libcudnn.so.9")

    done, out = run_json(["uninstall", "--cuda-root", root], home)
    assert done.returncode == 0 and tree_state(root) == before


def test_html_index_list_hides_prereleases_and_other_platforms(wheels, cuda_root, home):
    root = cuda_root("12.4", "lib")
    with IndexServer() as server:
        index = serve(server, wheels, page="html")
        done, out = run_json(["list", "--from", "pypi", "--index-url", index,
                              "--cuda-root", root], home)
    assert done.returncode == 0, done.stderr
    assert [r["version"] for r in out["releases"]] == [FINAL, OLDER]
    assert all(r["format"] == "wheel" and r["source"].startswith("the package index")
               for r in out["releases"])
    assert out["source"]["kind"] == "pypi" and out["mirror"] is None
    assert "1 pre-release or yanked wheel(s) not listed" in done.stderr
    # in the answer too, where a program reads it
    assert any("1 pre-release or yanked wheel(s) not listed" in n for n in out["notes"]), out
    # pip's Accept header: JSON first, HTML accepted
    assert server.requests[0]["accept"].startswith(JSON)


def test_list_for_another_platform_takes_that_platforms_wheels(wheels, cuda_root, home):
    """`list --platform`: the index's wheels must carry that platform's tags, not this
    machine's (NVIDIA publishes no Windows wheel of cuDNN here: none is listed)."""
    root = cuda_root("12.4", "lib")
    with IndexServer() as server:
        index = serve(server, wheels)
        here = run_json(["list", "--from", "pypi", "--index-url", index, "--cuda-root", root],
                        home)[1]
        done, out = run_json(["list", "--from", "pypi", "--index-url", index, "--cuda-root", root,
                              "--platform", "windows-x86_64"], home)
    assert here["releases"] and done.returncode == 0, done.stderr
    assert out["releases"] == [] and out["platforms"] == ["windows-x86_64"]


def test_a_prerelease_is_installed_only_by_its_full_version(wheels, cuda_root, home):
    root = cuda_root("12.4", "lib")
    with IndexServer() as server:
        index = serve(server, wheels)
        done, out = install(root, home, index, "9.2", "--dry-run")
        assert done.returncode == USAGE and out["error"]["code"] == "unknown-version", done.stderr
        done, out = install(root, home, index, PRE, "--dry-run")
    assert done.returncode == 0, done.stderr
    assert out["release"]["version"] == PRE and out["release"]["prerelease"] is True
    assert out["cudnn_version"] == "9.2.0"


def test_a_wheel_without_a_published_hash_is_refused_unless_sha256_is_given(wheels, cuda_root,
                                                                            home):
    root = cuda_root("12.4", "lib")
    before = tree_state(root)
    with IndexServer() as server:
        index = serve(server, wheels, hashes=False)
        done, out = install(root, home, index, "9.1")
        assert done.returncode == ARCHIVE_REJECTED and out["error"]["code"] == "no-checksum"
        assert "--sha256" in out["error"]["hint"]
        assert not [p for p in server.paths() if p.startswith("/files/")]  # never downloaded
        assert tree_state(root) == before
        done, out = install(root, home, index, "9.1", "--sha256", sha256(wheels[FINAL]))
    assert done.returncode == 0, done.stderr
    assert out["provenance"]["checksum_from"] == "--sha256"


def test_the_installed_release_again_with_its_sha256_given_is_neither_fetched_nor_read(
        wheels, cuda_root, home, monkeypatch):
    """An index that publishes no hash: the user's --sha256 vouches for the archive, and when
    the manifest's is that one, with every file as recorded, nothing is downloaded or read."""
    from cudnn_setup.placement import judge

    root = cuda_root("12.4", "lib")
    given = sha256(wheels[FINAL])
    with IndexServer() as server:
        index = serve(server, wheels, hashes=False)
        done, out = install(root, home, index, "9.1", "--sha256", given)
        assert done.returncode == 0 and out["changed"] is True, done.stderr
        server.requests.clear()
        monkeypatch.setattr(judge, "read_package", lambda *a, **k: pytest.fail("read again"))
        done, out = install(root, home, index, "9.1", "--sha256", given.upper())
        assert done.returncode == 0 and out["changed"] is False, done.stderr
        assert not [p for p in server.paths() if p.startswith("/files/")], server.paths()
        assert any("its published sha256 (--sha256)" in n for n in out["install"]["notes"]), out
        # another --sha256 is not the installed archive's: fetched, and refused as a mismatch
        monkeypatch.undo()
        done, out = install(root, home, index, "9.1", "--sha256", "0" * 64)
    assert done.returncode == ARCHIVE_REJECTED and out["error"]["code"] == "checksum-mismatch"


def test_a_wrong_hash_on_the_index_is_a_mismatch_and_changes_nothing(wheels, cuda_root, home):
    root = cuda_root("12.4", "lib")
    before = tree_state(root)
    with IndexServer() as server:
        files = entries(wheels, server.base)
        files = [IndexFile(f.name, f.url, "0" * 64 if f.name == wheels[FINAL].name else f.sha256)
                 for f in files]
        index = serve(server, wheels, files=files)
        done, out = install(root, home, index, "9.1")
    assert done.returncode == ARCHIVE_REJECTED and out["error"]["code"] == "checksum-mismatch"
    assert tree_state(root) == before


def test_an_index_without_the_project_is_a_clear_error(cuda_root, home):
    root = cuda_root("12.4", "lib")
    with IndexServer() as server:
        done, out = install(root, home, server.base + "/simple/", "9.1")
    assert done.returncode == USAGE and out["error"]["code"] == "unknown-version"
    assert f"has no project {PROJECT}" in out["error"]["message"]
    # one sentence: "no P wheel matches 9.1: INDEX has no project P", not "on INDEX has no …"
    assert out["error"]["message"].startswith(f"no {PROJECT} wheel matches 9.1: ")


def test_a_version_only_for_another_platform_names_the_platform(wheels, cuda_root, home):
    root = cuda_root("12.4", "lib")
    with IndexServer() as server:
        done, out = install(root, home, serve(server, wheels), "9.3", "--dry-run")
    assert done.returncode == ARCHIVE_REJECTED and out["error"]["code"] == "no-cuda-variant"
    assert "manylinux_2_27_aarch64" in out["error"]["hint"]


def test_an_index_of_ten_thousand_files_is_read_in_one_linear_pass(wheels, cuda_root, home):
    root = cuda_root("12.4", "lib")
    with IndexServer() as server:
        files = entries(wheels, server.base)
        names = [f"nvidia_cudnn_cu12-8.{i // 100}.{i % 100}.1-py3-none-win_amd64.whl"
                 for i in range(10_000)]
        files += [IndexFile(name, f"{server.base}/files/{name}", f"{i:064x}")
                  for i, name in enumerate(names)]
        for page in ("json", "html"):
            index = serve(server, wheels, page=page, files=files)
            started = time.monotonic()
            done, out = install(root, home, index, "9", "--dry-run")
            assert done.returncode == 0, done.stderr
            assert out["release"]["version"] == FINAL
            assert time.monotonic() - started < 20


def test_credentials_in_the_index_url_are_sent_and_never_shown(wheels, cuda_root, home):
    root = cuda_root("12.4", "lib")
    with IndexServer() as server:
        server.basic = ("fleet", "s3cret-pw")
        index = serve(server, wheels).replace("http://", "http://fleet:s3cret-pw@")
        done, out = install(root, home, index, "9.1", "--dry-run")
    assert done.returncode == 0, done.stderr
    want = "Basic " + base64.b64encode(b"fleet:s3cret-pw").decode()
    assert server.requests[0]["authorization"] == want
    assert "s3cret-pw" not in done.stdout + done.stderr


def test_netrc_credentials_reach_the_index(wheels, cuda_root, home):
    root = cuda_root("12.4", "lib")
    (home / ".netrc").write_text("machine 127.0.0.1 login fleet password n3trc-pw\n")
    (home / ".netrc").chmod(0o600)
    with IndexServer() as server:
        server.basic = ("fleet", "n3trc-pw")
        done, out = install(root, home, serve(server, wheels), "9.1", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "n3trc-pw" not in done.stdout + done.stderr


def test_pip_configuration_picks_the_index(wheels, cuda_root, home):
    root = cuda_root("12.4", "lib")
    with IndexServer() as server:
        index = serve(server, wheels)
        conf = home / ".config" / "pip" / "pip.conf"
        conf.parent.mkdir(parents=True)
        conf.write_text(f"[global]\nindex-url = {index}\n")
        done, out = run_json(["install", "9.1", "--from", "pypi", "--cuda-root", root,
                              "--dry-run", *NO_FLAGS], home)
    assert done.returncode == 0, done.stderr
    assert out["release"]["version"] == FINAL and server.requests


def test_index_config_follows_pips_order(tmp_path):
    home, etc = tmp_path / "home", tmp_path / "etc"
    (etc / "xdg" / "pip").mkdir(parents=True)
    (home / ".config" / "pip").mkdir(parents=True)
    (etc / "xdg" / "pip" / "pip.conf").write_text("[global]\nindex-url = https://xdg/simple\n")
    assert index_config({}, home, system_dirs=(etc,)).urls == ("https://xdg/simple/",)
    (etc / "pip.conf").write_text("[global]\nindex-url = https://etc/simple\n"
                                  "extra-index-url = https://extra1/ https://extra2/\n")
    got = index_config({}, home, system_dirs=(etc,))
    assert got.urls == ("https://etc/simple/", "https://extra1/", "https://extra2/")
    (home / ".config" / "pip" / "pip.conf").write_text(
        "[global]\nindex-url = https://user/simple\n[install]\nindex-url = https://inst/simple\n")
    assert index_config({}, home, system_dirs=(etc,)).urls[0] == "https://inst/simple/"
    env = {"PIP_INDEX_URL": "https://env/simple", "PIP_EXTRA_INDEX_URL": "https://e2/"}
    got = index_config(env, home, system_dirs=(etc,))
    assert got.urls == ("https://env/simple/", "https://e2/")
    assert got.origins == ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL")
    assert index_config(env, home, "https://flag/simple", (etc,)).urls[0] == "https://flag/simple/"
    # PIP_CONFIG_FILE skips the user's files; os.devnull turns it off
    only = tmp_path / "only.conf"
    only.write_text("[global]\nindex-url = https://only/simple\n")
    assert index_config({"PIP_CONFIG_FILE": str(only)}, home,
                        system_dirs=(etc,)).urls[0] == "https://only/simple/"
    (etc / "pip.conf").unlink()
    (etc / "xdg" / "pip" / "pip.conf").unlink()
    (home / ".config" / "pip" / "pip.conf").unlink()
    assert index_config({}, home, system_dirs=(etc,)).urls == (PYPI + "/",)


def test_a_broken_pip_configuration_is_a_usage_error(tmp_path):
    home = tmp_path / "home"
    (home / ".config" / "pip").mkdir(parents=True)
    (home / ".config" / "pip" / "pip.conf").write_text("index-url = no section\n")
    with pytest.raises(UsageError, match="cannot be parsed"):
        index_config({}, home, system_dirs=(tmp_path / "etc",))
    (home / ".config" / "pip" / "pip.conf").write_text("[global]\nindex-url = ftp://x/simple\n")
    with pytest.raises(UsageError, match="not an http"):
        index_config({}, home, system_dirs=(tmp_path / "etc",))


def test_download_a_version_from_the_index(wheels, home, tmp_path):
    with IndexServer() as server:
        index = serve(server, wheels)
        done, out = run_json(["download", "9.1", "--from", "pypi", "--index-url", index,
                              "--cuda", "12", "-o", tmp_path / "out"], home)
    assert done.returncode == 0, done.stderr
    assert Path(out["path"]) == tmp_path / "out" / wheels[FINAL].name
    assert sha256(Path(out["path"])) == sha256(wheels[FINAL])
    assert out["provenance"]["source"] == "pypi"


def test_a_file_index_is_read_as_pip_reads_it(wheels, cuda_root, home, tmp_path):
    root = cuda_root("12.4", "lib")
    index = tmp_path / "simple"
    (index / PROJECT).mkdir(parents=True)
    files = [IndexFile(p.name, p.as_uri(), sha256(p)) for p in wheels.values()]
    (index / PROJECT / "index.html").write_bytes(project_html(PROJECT, files))
    done, out = install(root, home, index.as_uri(), "9.1")
    assert done.returncode == 0, done.stderr
    assert out["provenance"]["location"] == wheels[FINAL].as_uri()


# --- hostile wheels -------------------------------------------------------------------------

def test_a_wheel_whose_headers_disagree_with_its_name_is_refused(tmp_path, compiler):
    files = wheel_files("9.1.7.99", "12", compiler)
    fake = build_wheel(tmp_path / "x", "9.4.0.1", "12", compiler, files=files)
    pkg = inspect_archive(fake)
    assert not pkg.installable
    assert any(p.code == "version-mismatch" for p in pkg.problems)


def test_a_wheel_member_whose_size_lies_is_refused(tmp_path, compiler):
    """The declared size (both zip headers) says 4 GiB; the data ends long before: corrupt."""
    import struct
    import zipfile
    good = build_wheel(tmp_path / "a", "9.1.7.99", "12", compiler)
    data = bytearray(good.read_bytes())
    with zipfile.ZipFile(good) as z:
        local = z.getinfo("nvidia/cudnn/lib/libcudnn_ops.so.9").header_offset
    struct.pack_into("<I", data, local + 22, 0xFFFFFFF0)
    patched = False
    for at in range(len(data) - 46, 0, -1):
        if data[at:at + 4] == b"PK\x01\x02" and struct.unpack_from("<I", data, at + 42)[0] == local:
            struct.pack_into("<I", data, at + 24, 0xFFFFFFF0)
            patched = True
            break
    assert patched
    lying = tmp_path / "b" / good.name
    lying.parent.mkdir()
    lying.write_bytes(bytes(data))
    pkg = inspect_archive(lying)
    assert not pkg.installable
    assert any(p.code == "corrupt" for p in pkg.problems), pkg.problems


def test_a_wheel_member_past_the_limits_stops_the_read_before_it_is_decoded(tmp_path, compiler):
    from cudnn_setup.archive.package import wanted
    from cudnn_setup.archive.rules import Limits
    from cudnn_setup.archive.wheel import read
    good = build_wheel(tmp_path / "a", "9.1.7.99", "12", compiler)
    (tmp_path / "staging").mkdir()
    listing, _ = read(good, tmp_path / "staging", wanted, Limits(member_bytes=4096))
    assert [p.code for p in listing.problems] == ["too-large"]
    assert listing.sha256 is None  # not a whole read: nothing vouches for it


def test_the_wheel_name_of_another_project_is_not_a_cudnn_wheel(tmp_path, compiler):
    from cudnn_setup.archive.wheel import parse_name
    assert parse_name(wheel_name("9.1.7.99")).cuda_major == 12
    assert parse_name("nvidia_cublas_cu12-12.4.5.8-py3-none-manylinux2014_x86_64.whl") is None
    assert parse_name("nvidia_cudnn_cu12-9.1.7.99.tar.gz") is None


def test_another_projects_wheel_is_refused_as_such(tmp_path, home, cuda_root, compiler):
    other = build_wheel(tmp_path / "x", "9.1.7.99", "12", compiler)
    renamed = tmp_path / "nvidia_cublas_cu12-12.4.5.8-py3-none-manylinux_2_27_x86_64.whl"
    renamed.write_bytes(other.read_bytes())
    done, out = run_json(["install", renamed, "--cuda-root", cuda_root("12.4", "lib"),
                          *NO_FLAGS], home)
    assert done.returncode == ARCHIVE_REJECTED and "not NVIDIA's cuDNN wheel" in out["error"]["message"]


def test_a_yanked_wheel_is_picked_only_by_its_full_version(wheels, cuda_root, home):
    root = cuda_root("12.4", "lib")
    with IndexServer() as server:
        files = [IndexFile(f.name, f.url, f.sha256, yanked=f.name == wheels[FINAL].name)
                 for f in entries(wheels, server.base)]
        index = serve(server, wheels, files=files)
        done, out = install(root, home, index, "9", "--dry-run")
        assert done.returncode == 0, done.stderr
        assert out["release"]["version"] == OLDER  # 9.1.7.99 is yanked
        done, out = install(root, home, index, FINAL, "--dry-run")
    assert done.returncode == 0 and out["release"]["version"] == FINAL
    assert out["release"]["yanked"] is True


@pytest.mark.parametrize("page,kind,complaint", [
    (b"{not json", JSON, "not valid JSON"),
    (b'{"meta": {"api-version": "2.0"}, "files": []}', JSON, "api-version"),
    (json.dumps({"meta": {"api-version": "1.0"}, "files": [
        {"filename": "nvidia_cudnn_cu12-9.1.7.99-py3-none-manylinux_2_27_x86_64.whl",
         "url": "x.whl", "hashes": {"sha256": "not-hex"}}]}).encode(), JSON, "not 64 hex"),
    (json.dumps({"meta": {"api-version": "1.0"}, "files": [
        {"filename": "nvidia_cudnn_cu12-9.1.7.99-py3-none-manylinux_2_27_x86_64.whl",
         "url": "javascript:alert(1)", "hashes": {}}]}).encode(), JSON, "not http(s) or file"),
    (b'<a href="ftp://x/nvidia_cudnn_cu12-9.1.7.99-py3-none-manylinux_2_27_x86_64.whl">'
     b'nvidia_cudnn_cu12-9.1.7.99-py3-none-manylinux_2_27_x86_64.whl</a>', "text/html",
     "not http(s) or file"),
    (b"PK\x03\x04", "application/zip", "neither PEP 691 JSON nor HTML"),
])
def test_a_damaged_index_page_is_refused_naming_the_index(cuda_root, home, page, kind, complaint):
    root = cuda_root("12.4", "lib")
    before = tree_state(root)
    with IndexServer() as server:
        server.routes[f"/simple/{PROJECT}/"] = (kind, page)
        done, out = install(root, home, server.base + "/simple/", "9.1")
    assert done.returncode == DOWNLOAD_FAILED and out["error"]["code"] == "index-damaged"
    assert complaint in out["error"]["message"] and "127.0.0.1" in out["error"]["message"]
    assert tree_state(root) == before


def test_an_index_page_past_its_size_bound_is_not_read_on(cuda_root, home):
    from cudnn_setup.sources import simple_api
    root = cuda_root("12.4", "lib")
    with IndexServer() as server:
        server.routes[f"/simple/{PROJECT}/"] = ("text/html", b" " * (simple_api.MAX_PAGE_BYTES + 10))
        done, out = install(root, home, server.base + "/simple/", "9.1")
    assert done.returncode == DOWNLOAD_FAILED and "larger than" in out["error"]["message"]


def cublas_wheel(out: Path, compiler) -> Path:
    """An nvidia-cublas-cu12-shaped wheel: gcc-built libcublas.so.12 and libcublasLt.so.12."""
    import zipfile
    from fixtures.generate import SUB_C
    out.mkdir(parents=True, exist_ok=True)
    path = out / "nvidia_cublas_cu12-12.4.5.8-py3-none-manylinux_2_27_x86_64.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for stem in ("libcublas", "libcublasLt"):
            data = compiler.build(SUB_C, {"FIX_SYMBOL": stem + "Create"}, f"{stem}.so.12")
            z.writestr(f"nvidia/cublas/lib/{stem}.so.12", data)
        z.writestr("nvidia/cublas/include/cublas.h", "/* header, not placed */\n")
        z.writestr("nvidia_cublas_cu12-12.4.5.8.dist-info/METADATA",
                   "Metadata-Version: 2.1\nName: nvidia-cublas-cu12\nVersion: 12.4.5.8\n")
    return path


def _install_with_cublas(root, home, wheels, cublas):
    """install 9.1 --with-deps from an index serving the cuDNN wheels and `cublas`."""
    with IndexServer() as server:
        index = serve(server, wheels)
        server.routes["/simple/nvidia-cublas-cu12/"] = (JSON, project_json("nvidia-cublas-cu12", [
            IndexFile(cublas.name, f"{server.base}/files/{cublas.name}", sha256(cublas))]))
        server.routes[f"/files/{cublas.name}"] = ("application/octet-stream", cublas.read_bytes())
        return install(root, home, index, "9.1", "--with-deps")


def test_with_deps_places_the_declared_cublas_in_the_same_transaction(wheels, cuda_root, home,
                                                                     tmp_path, compiler):
    root = cuda_root("12.4", "lib")
    before = tree_state(root)
    cublas = cublas_wheel(tmp_path / "dep", compiler)
    done, out = _install_with_cublas(root, home, wheels, cublas)
    assert done.returncode == 0, done.stderr
    (dep,) = out["provenance"]["with_deps"]
    assert dep["wheel"] == cublas.name and dep["sha256"] == sha256(cublas)
    lib = root / "lib"
    assert (lib / "libcublasLt.so.12").is_file() and (lib / "libcublas.so.12").is_file()
    assert (lib / "libcublasLt.so").readlink() == Path("libcublasLt.so.12")
    assert not (root / "include" / "cublas.h").exists()
    manifest = json.loads((root / ".cudnn-setup" / "manifest.json").read_text())
    assert {"lib/libcublasLt.so.12", "lib/libcublasLt.so"} <= {f["path"] for f in manifest["files"]}
    assert manifest["source"]["provenance"]["with_deps"] == [dep]
    done, out = run_json(["uninstall", "--cuda-root", root], home)
    assert done.returncode == 0 and tree_state(root) == before


def test_with_deps_leaves_a_library_the_root_has(wheels, cuda_root, home):
    root = cuda_root("12.4", "lib")
    (root / "lib" / "libcublasLt.so.12").write_bytes(b"the toolkit's own")
    with IndexServer() as server:
        done, out = install(root, home, serve(server, wheels), "9.1", "--with-deps", "--no-verify")
    assert done.returncode == 0, done.stderr
    assert out["provenance"]["with_deps"] == []
    assert "the root has cuBLASLt already" in done.stderr
    assert (root / "lib" / "libcublasLt.so.12").read_bytes() == b"the toolkit's own"
    assert not [p for p in server.paths() if "cublas" in p]


def test_a_command_makes_one_http_client_and_one_waiting_budget(wheels, cuda_root, home,
                                                                tmp_path, compiler, monkeypatch):
    """install --from pypi --with-deps read the index, the cuDNN wheel and a dependency's with
    a new client each time, so it could wait 60 s per client on silent servers, not 60 s in all."""
    from cudnn_setup.fetch import http

    made = []
    real = http.Client.__init__

    def counted(self, *args, **kwargs):
        real(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(http.Client, "__init__", counted)
    root = cuda_root("12.4", "lib")
    cublas = cublas_wheel(tmp_path / "dep", compiler)
    done, out = _install_with_cublas(root, home, wheels, cublas)
    assert done.returncode == 0, done.stderr
    assert len(made) == 1, f"{len(made)} clients made"
    assert len({id(c.budget) for c in made}) == 1


def test_a_version_only_for_other_cuda_majors_names_the_nearest(wheels, cuda_root, home,
                                                                   tmp_path, compiler):
    """Asked for CUDA 11, with builds for 12 and 13 only: the hint names 12, the major nearest
    the root's, not the newest."""
    cu13 = build_wheel(tmp_path / "cu13", FINAL, "13", compiler)
    root = cuda_root("11.8", "lib")
    with IndexServer() as server:
        index = serve(server, wheels)
        server.routes["/simple/nvidia-cudnn-cu13/"] = (JSON, project_json(
            "nvidia-cudnn-cu13", [IndexFile(cu13.name, f"{server.base}/files/{cu13.name}",
                                            sha256(cu13))]))
        server.routes[f"/files/{cu13.name}"] = ("application/octet-stream", cu13.read_bytes())
        done, out = install(root, home, index, FINAL, "--dry-run")
    assert done.returncode == ARCHIVE_REJECTED and out["error"]["code"] == "no-cuda-variant"
    assert "its wheels are for CUDA 12, 13: pass --cuda 12 " in out["error"]["hint"], out
