"""Install by version, the pure part: naming rules, version requests, CUDA variants, the known
releases table and its generator, NVIDIA's redistrib JSON, and a mirror tree built from real
cuDNN-shaped archives."""
import hashlib
import json
import tarfile
import urllib.request
from pathlib import Path

import pytest

from conftest import REPO
from cudnn_setup.facts import cudnn as generations
from cudnn_setup.errors import ARCHIVE_REJECTED, DOWNLOAD_FAILED, USAGE, UsageError
from cudnn_setup.fetch import known_releases, redist
from cudnn_setup.fetch.candidates import (
    Release, UnknownVersion, is_version_request, merge, nearest_versions,
    parse_request, select,
)
from cudnn_setup.fetch.redist import ManifestDamaged, NoVariant
from cudnn_setup.fetch.redistrib_json import parse_redistrib
from fixtures.mirror import STANDARD, MirrorArchive, build_mirror
from httpserver import DirectoryServer

NVIDIA = REPO / "fixtures" / "nvidia"
TABLE = REPO / "cudnn_setup" / "fetch" / "known_releases.json"


# --- naming rules: every layout Spack's url_for_version knows, against NVIDIA's real URLs ------

@pytest.mark.parametrize("version,platform,cuda,path", [
    ("5.1", "linux-x86_64", "8.0", "redist/cudnn/v5.1/cudnn-8.0-linux-x64-v5.1.tgz"),
    ("6.0", "linux-x86_64", "8.0", "redist/cudnn/v6.0/cudnn-8.0-linux-x64-v6.0.tgz"),
    ("7.0.5", "linux-x86_64", "9.0", "redist/cudnn/v7.0.5/cudnn-9.0-linux-x64-v7.tgz"),
    ("7.1.3", "linux-ppc64le", "9.1", "redist/cudnn/v7.1.3/cudnn-9.1-linux-ppc64le-v7.1.tgz"),
    ("7.6.5.32", "linux-x86_64", "10.2", "redist/cudnn/v7.6.5/cudnn-10.2-linux-x64-v7.6.5.32.tgz"),
    ("8.0.5.39", "linux-x86_64", "11.0", "redist/cudnn/v8.0.5/cudnn-11.0-linux-x64-v8.0.5.39.tgz"),
    ("8.1.1.33", "linux-sbsa", "11.2",
     "redist/cudnn/v8.1.1/cudnn-11.2-linux-aarch64sbsa-v8.1.1.33.tgz"),
    ("8.3.3.40", "linux-x86_64", "11.5", "redist/cudnn/v8.3.3/local_installers/11.5/"
     "cudnn-linux-x86_64-8.3.3.40_cuda11.5-archive.tar.xz"),
    ("8.5.0.96", "linux-sbsa", "11.7", "redist/cudnn/v8.5.0/local_installers/11.7/"
     "cudnn-linux-sbsa-8.5.0.96_cuda11-archive.tar.xz"),
    ("8.8.1.3", "linux-ppc64le", "12",
     "cudnn/redist/cudnn/linux-ppc64le/cudnn-linux-ppc64le-8.8.1.3_cuda12-archive.tar.xz"),
    ("9.13.0.50", "linux-sbsa", "13",
     "cudnn/redist/cudnn/linux-sbsa/cudnn-linux-sbsa-9.13.0.50_cuda13-archive.tar.xz"),
    ("9.20.0.48", "windows-x86_64", "12",
     "cudnn/redist/cudnn/windows-x86_64/cudnn-windows-x86_64-9.20.0.48_cuda12-archive.zip"),
    ("9.27.0.42", "windows-arm64", "13.4",  # the direct archive beside 9.27.0's cuda13 variant
     "cudnn/redist/cudnn/windows-arm64/cudnn-windows-arm64-9.27.0.42_cuda13.4-archive.zip"),
])
def test_public_paths_follow_each_layout(version, platform, cuda, path):
    assert redist.public_path(version, platform, cuda) == path
    assert redist.archive_name(version, platform, cuda) == path.rsplit("/", 1)[1]


@pytest.mark.parametrize("version,platform,cuda", [
    ("8.2.0.53", "linux-aarch64", "11.3"),  # no Jetson builds before 8.3.1
    ("8.4.0.27", "linux-x86_64", "11"),  # names before 8.5.0 carry a CUDA minor
    ("9.1.0", "linux-x86_64", "12"),  # an archive name needs the build number
    ("8.1.1.33", "windows-x86_64", "11.2"),  # the rules know Windows names from 8.3.1 only
    ("9.1.0.70", "linux-riscv64", "12"),
])
def test_names_that_do_not_exist_are_refused(version, platform, cuda):
    with pytest.raises(ValueError):
        redist.public_path(version, platform, cuda)


def test_platform_keys_for_machines_and_old_spellings():
    for machine in ("x86_64", "AMD64", "x64", "linux-x86_64"):
        assert redist.platform_key(machine) == "linux-x86_64"
    for machine in ("aarch64", "arm64", "sbsa", "aarch64sbsa", "linux-sbsa", "linux-aarch64sbsa"):
        assert redist.platform_key(machine) == "linux-sbsa"
    assert redist.platform_choice("aarch64", "R36").primary == "linux-aarch64"
    assert redist.platform_key("linux-aarch64") == "linux-aarch64"  # NVIDIA's key for Jetson
    assert redist.platform_key("ppc64le") == "linux-ppc64le"
    with pytest.raises(NoVariant) as err:
        redist.platform_key("riscv64")
    assert err.value.exit_code == ARCHIVE_REJECTED and "riscv64" in err.value.message


# --- CUDA variants ------------------------------------------------------------------------------

def test_variant_names_follow_the_cuda_spelling_of_each_era():
    assert redist.variant_name("9.13.0.50", "13") == "cuda13"
    assert redist.variant_name("8.5.0.96", "11.7") == "cuda11"
    assert redist.variant_name("8.4.0.27", "11.6") == "cuda11.6"
    assert redist.variant_name("7.6.5.32", "10.2") == "cuda10.2"
    assert redist.parse_variant("cuda11.0") == (11, 0) and redist.parse_variant("12") == (12, None)
    with pytest.raises(ValueError):
        redist.parse_variant("cuda-12")


@pytest.mark.parametrize("variant,cuda,fits", [
    ("cuda12", "12.4", True), ("cuda12", "12", True), ("cuda12", "13.0", False),
    ("cuda11", "11.8.0", True), ("cuda11.5", "11.8", True), ("cuda11.5", "12.1", False),
    ("cuda10.2", "10.2", True), ("cuda10.2", "10.1", False), ("cuda10.2", "10", True),
    ("cuda13", "12.9", False),
])
def test_variant_fits_same_major_and_before_11_same_minor(variant, cuda, fits):
    assert redist.variant_fits(variant, cuda) is fits


def test_pick_variant_prefers_the_exact_minor_then_the_nearest_below():
    assert redist.pick_variant(["cuda11.1", "cuda11.0", "cuda10.2"], "11.0") == "cuda11.0"
    assert redist.pick_variant(["cuda11.1", "cuda11.0", "cuda10.2"], "11.4") == "cuda11.1"
    assert redist.pick_variant(["cuda11.1", "cuda11.0", "cuda10.2"], "10.2") == "cuda10.2"
    assert redist.pick_variant(["cuda11.6", "cuda11"], "11.6") == "cuda11.6"
    assert redist.pick_variant(["cuda11.6", "cuda11"], "11.8") == "cuda11"
    assert redist.pick_variant(["cuda11.6", "cuda10.2"], "10.1") is None
    with pytest.raises(UsageError):
        redist.pick_variant(["cuda12"], "twelve")


# --- version requests ---------------------------------------------------------------------------

def test_version_requests_are_numbers_with_one_to_four_parts():
    for text in ("9", "9.17", "9.17.0", "9.17.0.29", "v9.1", " 8.9 "):
        assert is_version_request(text)
    assert parse_request("9.17.0.29").release == (9, 17, 0, 29)
    for text in ("", "9.17.0.29.1", "9.17rc1", "9.x", "1!9", "latest",
                 "cudnn-linux-x86_64-9.1.7.99_cuda12-archive.tar.xz", "./9.1", "https://m/9.1"):
        assert not is_version_request(text)
        with pytest.raises(UsageError) as err:
            parse_request(text)
        assert err.value.exit_code == USAGE


def test_requests_match_whole_parts_not_string_prefixes():
    r = parse_request("9.1")
    assert r.matches("9.1.7.99") and r.matches("9.1.0.70")
    assert not r.matches("9.10.2.21") and not r.matches("9.11.0.98")
    assert parse_request("6.0.0").matches("6.0") and not parse_request("6.0.1").matches("6.0")


def test_nearest_versions_surround_the_request():
    versions = [r.version for r in known_releases.releases()]
    assert nearest_versions(parse_request("8.6.1"), versions, 2) == ["8.7.0.84", "8.6.0.163"]
    newest = sorted(set(versions), key=lambda v: tuple(map(int, v.split("."))), reverse=True)
    assert nearest_versions(parse_request("99"), versions) == newest[:4]


# --- choosing from the known table --------------------------------------------------------------

def _newest_in_table(platform, variant, major):
    rows = [r for r in known_releases.releases() if r.platform == platform
            and r.cuda_variant == variant and r.version.startswith(f"{major}.")]
    return max(rows, key=lambda r: tuple(map(int, r.version.split("."))))


@pytest.mark.parametrize("cuda,variant", [("12.4", "cuda12"), ("13.0", "cuda13"), ("11.8", "cuda11")])
def test_major_request_picks_the_newest_with_this_cuda_variant(cuda, variant):
    got = select(parse_request("9"), known_releases.releases(), "linux-x86_64", cuda)
    assert got.cuda_variant == variant and got.platform == "linux-x86_64"
    assert got == _newest_in_table("linux-x86_64", variant, 9)
    assert got.url() == redist.NVIDIA_COMPUTE + got.public_path
    assert got.url("file:///srv/m/") == f"file:///srv/m/cudnn/linux-x86_64/{got.file_name}"


def test_old_releases_pick_the_build_for_the_root_minor():
    table = known_releases.releases()
    got = select(parse_request("7"), table, "linux-x86_64", "10.1")
    assert got.file_name == "cudnn-10.1-linux-x64-v7.6.5.32.tgz"
    assert got.url() == ("https://developer.download.nvidia.com/compute/redist/cudnn/v7.6.5/"
                         "cudnn-10.1-linux-x64-v7.6.5.32.tgz")
    # NVIDIA's 8.5 to 8.7 manifests list builds for CUDA 10 (Spack has only 8.4's for 10.2)
    assert select(parse_request("8"), table, "linux-x86_64", "10.2").file_name == \
        "cudnn-linux-x86_64-8.7.0.84_cuda10-archive.tar.xz"
    assert select(parse_request("8.4"), table, "linux-x86_64", "10.2").file_name == \
        "cudnn-linux-x86_64-8.4.0.27_cuda10.2-archive.tar.xz"


def test_unknown_version_is_a_usage_error_naming_the_nearest():
    with pytest.raises(UnknownVersion) as err:
        select(parse_request("9.19.0"), known_releases.releases(), "linux-x86_64", "12.4")
    assert err.value.exit_code == USAGE and err.value.code == "unknown-version"
    assert "9.18.1.3" in err.value.hint and "9.19.1.2" in err.value.hint


def test_missing_cuda_major_is_refused_naming_the_variants_that_exist():
    with pytest.raises(NoVariant) as err:
        select(parse_request("9.17"), known_releases.releases(), "linux-x86_64", "11.8")
    assert err.value.exit_code == ARCHIVE_REJECTED and err.value.code == "no-cuda-variant"
    assert "CUDA 11" in err.value.message and "cuda12, cuda13" in err.value.hint
    with pytest.raises(NoVariant) as err:
        select(parse_request("9.17"), known_releases.releases(), "linux-ppc64le", "12.4")
    assert "linux-sbsa, linux-x86_64" in err.value.hint


# --- the known-releases table -------------------------------------------------------------------

def test_table_agrees_with_nvidias_own_manifests():
    for label in ("8.9.7", "9.13.0"):
        path = NVIDIA / f"redistrib_{label}.json"
        listed = parse_redistrib(path.read_bytes(), redist.manifest_url(label), label)
        table = {r.file_name: r for r in known_releases.releases()}
        shared = [r for r in listed if r.file_name in table]
        assert len(shared) >= 4
        assert all(table[r.file_name].sha256 == r.sha256 for r in shared)
        merged = {r.file_name: r for r in merge(table.values(), listed)}
        assert all(merged[r.file_name].size == r.size and merged[r.file_name].md5 for r in shared)


@pytest.mark.parametrize("edit", ["rename", "duplicate", "reorder", "sha", "extra_key"])
def test_table_edits_by_hand_are_caught(edit):
    doc = json.loads(TABLE.read_text())
    rows = doc["releases"]
    if edit == "rename":
        rows[0]["name"] = rows[0]["name"].replace("_cuda", "_CUDA")
    elif edit == "duplicate":
        rows.insert(1, dict(rows[0]))
    elif edit == "reorder":
        rows[0], rows[-1] = rows[-1], rows[0]
    elif edit == "sha":
        rows[0]["sha256"] = rows[0]["sha256"][:-1]
    else:
        rows[0]["mirror"] = "x"
    with pytest.raises(ValueError):
        known_releases.parse(json.dumps(doc))


# --- NVIDIA's redistrib JSON --------------------------------------------------------------------

def test_nvidias_manifest_lists_every_platform_and_variant():
    listed = parse_redistrib((NVIDIA / "redistrib_9.13.0.json").read_bytes(),
                             "https://user:secret@mirror.example/cudnn/redistrib_9.13.0.json")
    assert {(r.platform, r.cuda_variant) for r in listed} == {
        (p, v) for p in ("linux-x86_64", "linux-sbsa", "linux-aarch64", "windows-x86_64")
        for v in ("cuda12", "cuda13")}
    x86 = next(r for r in listed if r.platform == "linux-x86_64" and r.cuda_variant == "cuda12")
    assert x86.version == "9.13.0.50" and x86.size == 873944756
    assert x86.md5 == "55633b6a710506c4e4d704aef42a5fdd"
    assert x86.relative_path == "cudnn/linux-x86_64/" + x86.file_name
    assert x86.url() == redist.NVIDIA_REDIST + x86.relative_path
    assert "secret" not in x86.source
    assert x86.source == "redistrib_9.13.0.json at https://mirror.example/cudnn/redistrib_9.13.0.json"


def _good():
    return json.loads((NVIDIA / "redistrib_8.9.7.json").read_text())


def _x86(doc):
    return doc["cudnn"]["linux-x86_64"]["cuda12"]


DAMAGE = {
    "not json": lambda d: b"<html>404</html>",
    "array": lambda d: [d],
    "label asked": lambda d: d.update(release_label="8.9.6"),
    "product": lambda d: d.update(release_product="cuda"),
    "no cudnn": lambda d: d.pop("cudnn"),
    "short version": lambda d: d["cudnn"].update(version="8.9.7"),
    "version of another release": lambda d: d["cudnn"].update(version="8.9.6.50"),
    "variant list": lambda d: d["cudnn"].update(cuda_variant="11,12"),
    "climbs out": lambda d: _x86(d).update(relative_path="cudnn/linux-x86_64/../../../etc/passwd"),
    "absolute": lambda d: _x86(d).update(relative_path="/" + _x86(d)["relative_path"]),
    "backslash": lambda d: _x86(d).update(relative_path=_x86(d)["relative_path"].replace("/", "\\")),
    "other directory": lambda d: _x86(d).update(relative_path="x/" + _x86(d)["relative_path"]),
    "other version": lambda d: _x86(d).update(
        relative_path=_x86(d)["relative_path"].replace("8.9.7.29", "8.9.6.50")),
    "other variant": lambda d: _x86(d).update(
        relative_path=_x86(d)["relative_path"].replace("_cuda12", "_cuda11")),
    "short sha256": lambda d: _x86(d).update(sha256=_x86(d)["sha256"][:63]),
    "sha256 not hex": lambda d: _x86(d).update(sha256="g" * 64),
    "md5": lambda d: _x86(d).update(md5="0" * 31),
    "size zero": lambda d: _x86(d).update(size="0"),
    "size words": lambda d: _x86(d).update(size="large"),
    "size huge": lambda d: _x86(d).update(size=str(17 << 30)),
    "size bool": lambda d: _x86(d).update(size=True),
    "no sha256": lambda d: _x86(d).pop("sha256"),
    "variant key": lambda d: d["cudnn"]["linux-x86_64"].update(gpu12=_x86(d)),
    "platform key": lambda d: d["cudnn"].update({"../linux": {}}),
    "platform list": lambda d: d["cudnn"].update({"linux-riscv64": ["x"]}),
    "name not text": lambda d: d["cudnn"].update(name=7),
    "no archives": lambda d: [d["cudnn"].pop(k) for k in
                              ("linux-x86_64", "linux-ppc64le", "linux-sbsa", "windows-x86_64")],
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_damaged_manifests_are_refused(case):
    doc = _good()
    result = DAMAGE[case](doc)
    data = result if isinstance(result, bytes) else json.dumps(
        result if isinstance(result, list) and case == "array" else doc).encode()
    with pytest.raises(ManifestDamaged) as err:
        parse_redistrib(data, "http://127.0.0.1:8000/redistrib_8.9.7.json", "8.9.7")
    assert err.value.exit_code == DOWNLOAD_FAILED and err.value.code == "manifest-damaged"
    assert "redistrib_8.9.7.json" in err.value.message


def test_duplicate_keys_nan_and_oversize_are_refused():
    text = (NVIDIA / "redistrib_8.9.7.json").read_text()
    sha = _x86(_good())["sha256"]
    forged = text.replace(f'"sha256": "{sha}",', f'"sha256": "{sha}", "sha256": "{"0" * 64}",')
    for data in (forged.encode(), text.replace('"860967256"', "NaN").encode(),
                 text.encode() + b" " * (1 << 20)):
        with pytest.raises(ManifestDamaged):
            parse_redistrib(data, "file:///m/redistrib_8.9.7.json")


def test_a_manifest_contradicting_the_table_is_refused():
    doc = _good()
    _x86(doc)["sha256"] = "0" * 64
    listed = parse_redistrib(json.dumps(doc).encode(), "file:///m/redistrib_8.9.7.json")
    with pytest.raises(ManifestDamaged) as err:
        merge(known_releases.releases(), listed)
    assert "cudnn-linux-x86_64-8.9.7.29_cuda12-archive.tar.xz" in err.value.message
    assert "known table" in err.value.message


# --- mirror URLs --------------------------------------------------------------------------------

def test_mirror_urls_name_the_redist_level(tmp_path):
    assert redist.normalize_mirror("http://mirror.lan:8080/nvidia/cudnn/redist") == \
        "http://mirror.lan:8080/nvidia/cudnn/redist/"
    assert redist.manifest_url("9.1.7", "http://m/r/") == "http://m/r/redistrib_9.1.7.json"
    assert redist.manifest_url("9.13.0") == \
        "https://developer.download.nvidia.com/compute/cudnn/redist/redistrib_9.13.0.json"
    assert redist.manifest_label("9.13.0.50") == "9.13.0" and redist.manifest_label("6.0") == "6.0.0"
    spaced = tmp_path / "my mirror"
    url = redist.normalize_mirror(str(spaced))
    assert url == spaced.as_uri() + "/" and redist.local_path(url) == spaced
    assert redist.normalize_mirror("rel/dir", cwd=tmp_path) == (tmp_path / "rel/dir").as_uri() + "/"
    file_url = redist.mirror_url(url, "cudnn/linux-x86_64/a b.tar.xz")
    assert redist.local_path(file_url) == spaced / "cudnn/linux-x86_64/a b.tar.xz"
    assert redist.local_path("https://m/x") is None


@pytest.mark.parametrize("mirror", ["ftp://m/r/", "rel/dir", "http:///r/", "http://m/r/?x=1",
                                    "http://m/r/#top", "file://fileserver/share/redist/"])
def test_unusable_mirrors_are_usage_errors(mirror):
    with pytest.raises(UsageError):
        redist.normalize_mirror(mirror)


@pytest.mark.parametrize("path", ["../x.tar.xz", "/etc/passwd", "cudnn//x", "cudnn/./x", "a\\b",
                                  "cudnn/%2e%2e/x", "", "cudnn/x\n.tar.xz"])
def test_mirror_paths_cannot_climb_out(path):
    with pytest.raises(ValueError):
        redist.mirror_url("http://m/r/", path)


def test_remote_file_urls_are_refused():
    with pytest.raises(UsageError):
        redist.local_path("file://fileserver/share/redist/")


# --- a mirror tree of real cuDNN-shaped archives ------------------------------------------------

@pytest.fixture(scope="session")
def mirror(tmp_path_factory, compiler):
    return build_mirror(tmp_path_factory.mktemp("mirror"), cc=compiler)


def _from_mirror(m, url):
    out = []
    for label in sorted(m.manifests):
        manifest = redist.local_path(redist.manifest_url(label, url))
        out += parse_redistrib(manifest.read_bytes(), manifest.as_uri(), label)
    return out


def test_mirror_holds_nvidia_shaped_archives_the_table_does_not_know(mirror):
    table = {r.file_name for r in known_releases.releases()}
    assert sorted(mirror.manifests) == ["9.1.7", "9.4.2"]
    for archive in STANDARD:
        path = mirror.root / "cudnn" / archive.platform / archive.name
        assert archive.name not in table and path.is_file()
        facts = generations.parse_archive_name(archive.name)
        assert (facts.cudnn_version, facts.cuda_version) == (archive.version, archive.cuda)
        with tarfile.open(path) as tar:
            names = set(tar.getnames())
        major_minor_patch = ".".join(archive.version.split(".")[:3])
        assert f"{archive.top}/lib/libcudnn.so.{major_minor_patch}" in names
        assert f"{archive.top}/lib/libcudnn_engines_precompiled.so.9" in names
        assert f"{archive.top}/include/cudnn_version.h" in names


def test_mirror_manifests_vouch_for_their_archives(mirror):
    listed = _from_mirror(mirror, mirror.url)
    assert {r.file_name for r in listed} == {a.name for a in STANDARD}
    for r in listed:
        path = redist.local_path(r.url(mirror.url))
        data = path.read_bytes()
        assert (hashlib.sha256(data).hexdigest(), hashlib.md5(data).hexdigest(), len(data)) == (
            r.sha256, r.md5, r.size)
        assert r.source.startswith(f"redistrib_{r.version[:5]}.json at file://")


def test_version_resolution_against_the_mirror(mirror):
    listed = merge(known_releases.releases(), _from_mirror(mirror, mirror.url))
    mirror_only = [r for r in listed if r.source != "known table"]
    got = select(parse_request("9"), mirror_only, "linux-x86_64", "12.8")
    assert (got.version, got.cuda_variant) == ("9.1.7.99", "cuda12")
    assert select(parse_request("9"), mirror_only, "linux-x86_64", "13.0").version == "9.4.2.99"
    got = select(parse_request("9.1"), listed, "linux-sbsa", "12.2")
    assert got.file_name == "cudnn-linux-sbsa-9.1.7.99_cuda12-archive.tar.xz"
    with pytest.raises(NoVariant) as err:  # the mirror's 9.1.7 has no CUDA 11 build
        select(parse_request("9.1"), mirror_only, "linux-x86_64", "11.8")
    assert "cuda12, cuda13" in err.value.hint


def test_mirror_with_a_wrong_checksum(tmp_path, compiler):
    bad = MirrorArchive("9.1.7.99", "12")
    m = build_mirror(tmp_path, (bad,), cc=compiler, wrong_sha256=frozenset({bad.name}))
    (r,) = _from_mirror(m, m.url)
    assert r.sha256 != m.sha256(bad.name)
    assert r.size == m.archives[bad.name].stat().st_size


def test_mirror_without_manifests(tmp_path, compiler):
    m = build_mirror(tmp_path, STANDARD[:1], cc=compiler, manifests=False)
    assert not list(tmp_path.glob("*.json")) and m.manifests == {}
    assert (tmp_path / "cudnn" / "linux-x86_64" / STANDARD[0].name).is_file()


def test_mirror_served_over_http_lists_and_serves_its_manifests(mirror):
    with DirectoryServer(mirror.root) as server:
        base = redist.normalize_mirror(server.base)
        with urllib.request.urlopen(base, timeout=10) as page:
            labels = redist.listed_labels(page.read().decode())
        assert labels == ["9.4.2", "9.1.7"]
        url = redist.manifest_url("9.1.7", base)
        with urllib.request.urlopen(url, timeout=10) as f:
            listed = parse_redistrib(f.read(), url, "9.1.7")
        got = select(parse_request("9.1"), listed, "linux-x86_64", "12.4")
        with urllib.request.urlopen(got.url(base), timeout=10) as f:
            assert hashlib.sha256(f.read()).hexdigest() == got.sha256


def test_release_to_dict_has_every_field():
    r = Release("9.1.7.99", "cuda12", "linux-x86_64", "n", "cudnn/linux-x86_64/n", "0" * 64)
    assert set(r.to_dict()) == {"version", "cuda_variant", "platform", "file_name",
                                "relative_path", "sha256", "md5", "size", "source", "flavour",
                                "provenance"}
    assert Path(redist.local_path(r.url("file:///m/"))) == Path("/m/cudnn/linux-x86_64/n")
