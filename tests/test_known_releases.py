"""The known-releases table: its generator (NVIDIA's manifests merged with Spack's package, each
entry with its provenance), its loader's checks, the manifest reader's platform objects (a
direct archive, per-CUDA variants, both at once), and how a Jetson picks its builds."""
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

from conftest import REPO
from cudnn_setup.steps.context import Context
from cudnn_setup.commands.list import list_releases
from cudnn_setup.errors import ARCHIVE_REJECTED, USAGE
from cudnn_setup.facts.host import tegra_evidence
from cudnn_setup.fetch import known_releases, redist
from cudnn_setup.fetch.candidates import parse_request, select
from cudnn_setup.fetch.redist import ManifestDamaged, NoVariant
from cudnn_setup.fetch.redistrib_json import parse_redistrib
from cudnn_setup.fetch.remote import Reader
from cudnn_setup.fetch.resolve import Tree, catalog, ranked, resolve
from httpserver import ArchiveServer

SCRIPT = REPO / "scripts" / "update-known-releases.py"
TABLE = REPO / "cudnn_setup" / "fetch" / "known_releases.json"
INPUTS = REPO / "data" / "known-releases"
MANIFESTS = INPUTS / "manifests"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _manifest(label: str) -> dict:
    return json.loads((MANIFESTS / f"redistrib_{label}.json").read_text())


def _rows():
    return known_releases.parse(TABLE.read_text())[1]


def _by_name():
    return {r["name"]: r for r in _rows()}


# --- the committed table ------------------------------------------------------------------------

def test_committed_table_is_what_the_script_makes_from_the_inputs_it_names():
    done = subprocess.run([sys.executable, str(SCRIPT), "-o", "-"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == TABLE.read_text(), \
        "regenerate with scripts/update-known-releases.py instead of editing the table"


def test_every_input_is_recorded_with_its_commit_and_the_hash_of_its_bytes():
    prov, rows = known_releases.parse(TABLE.read_text())
    named = json.loads((INPUTS / "sources.json").read_text())
    files = {"spack": named["spack"]["file"], **{
        m["path"].rsplit("/", 1)[1]: m["file"] for m in named["manifests"]}}
    assert set(prov["sources"]) == set(files)
    for sid, src in prov["sources"].items():
        data = (INPUTS / files[sid]).read_bytes()
        assert src["file_sha256"] == hashlib.sha256(data).hexdigest(), sid
        assert src["url"] == f"{src['repository']}/blob/{src['commit']}/{src['path']}"
        assert len(src["commit"]) == 40
    used = {s for r in rows for s in r["provenance"]}
    assert used == set(prov["sources"])


def test_table_covers_every_platform_and_both_flavours():
    rows = _rows()
    assert {r["platform"] for r in rows} == set(redist.PLATFORMS)
    assert {r["flavour"] for r in rows} == {"cudnn", "cudnn_jit"}
    jit = [r for r in rows if r["flavour"] == "cudnn_jit"]
    assert jit and all(r["url_path"].startswith("cudnn/redist/cudnn_jit/") for r in jit)
    assert all(r["name"].startswith("cudnn_jit-") and r["md5"] and r["size"] for r in jit)
    assert all(r["name"].endswith(".zip") for r in rows if r["platform"].startswith("windows"))


# Every release a manifest was found for (data/known-releases/sources.json), Spack's or not.
FOUND = sorted(p.name.removeprefix("redistrib_").removesuffix(".json")
               for p in MANIFESTS.glob("redistrib_*.json"))


@pytest.mark.parametrize("label", FOUND)
def test_table_holds_every_archive_each_manifest_lists(label):
    by_name = _by_name()
    listed = parse_redistrib((MANIFESTS / f"redistrib_{label}.json").read_bytes(),
                             f"file:///m/redistrib_{label}.json")
    assert any(r.platform == "linux-x86_64" for r in listed)
    for r in listed:  # every archive the manifest lists is in the table, with its checksum
        row = by_name[r.file_name]
        assert (row["sha256"], row["md5"], row["size"]) == (r.sha256, r.md5, r.size)
        assert f"redistrib_{label}.json" in row["provenance"]


# Releases Spack never added, each found in NVIDIA's manifest (9.18.0, 9.19.0, 9.21.1, 9.23 to
# 9.26 and 9.28 were not found in any public copy: see data/known-releases/README.md).
NOT_IN_SPACK = ["8.8.0.121_cuda12", "8.9.1.23_cuda12", "8.9.2.26_cuda12", "8.9.3.28_cuda12",
                "8.9.4.25_cuda12", "8.9.6.50_cuda12", "9.0.0.312_cuda12",
                "9.1.0.70_cuda12", "9.1.1.17_cuda11", "9.2.1.18_cuda12", "9.3.0.75_cuda12",
                "9.4.0.58_cuda12", "9.5.0.50_cuda12", "9.7.0.66_cuda12", "9.22.0.52_cuda13",
                "9.27.0.42_cuda12", "8.5.0.96_cuda10"]


@pytest.mark.parametrize("build", NOT_IN_SPACK)
def test_releases_spack_lacks_come_from_manifests(build):
    row = _by_name()[f"cudnn-linux-x86_64-{build}-archive.tar.xz"]
    assert "spack" not in row["provenance"] and row["md5"] and row["size"]


def test_an_archive_both_sources_list_names_both_and_keeps_spacks_url():
    by_name = _by_name()
    both = by_name["cudnn-linux-x86_64-9.20.0.48_cuda13-archive.tar.xz"]
    assert both["provenance"] == ["redistrib_9.20.0.json", "spack"]
    assert both["md5"] == "f0ea39c5411bf356a139b55fa3db69d3" and both["size"] == 673041224
    old = by_name["cudnn-linux-x86_64-8.5.0.96_cuda11-archive.tar.xz"]
    assert old["provenance"] == ["redistrib_8.5.0.96.json", "redistrib_8.5.0.json", "spack"]
    assert old["url_path"].startswith("redist/cudnn/v8.5.0/local_installers/11.7/")
    only_manifest = by_name["cudnn-linux-x86_64-8.5.0.96_cuda10-archive.tar.xz"]
    assert only_manifest["url_path"] == "cudnn/redist/cudnn/linux-x86_64/" + only_manifest["name"]
    spack_only = by_name["cudnn-linux-x86_64-9.21.0.82_cuda13-archive.tar.xz"]
    assert spack_only["provenance"] == ["spack"] and spack_only["md5"] is None


def test_jetson_builds_are_in_the_table():
    by_name = _by_name()
    for name in ("cudnn-linux-aarch64-9.20.0.48_cuda12-archive.tar.xz",
                 "cudnn-linux-aarch64-9.12.0.46_cuda13-archive.tar.xz",
                 "cudnn-linux-aarch64-9.13.0.50_cuda12-archive.tar.xz"):
        assert by_name.get(name, {}).get("platform") == "linux-aarch64", name


def test_no_synthetic_archive_that_tests_install_bears_a_published_name():
    """A fixture installed under a name the table knows would be refused for its checksum."""
    from fixtures.generate import GENERATION_SAMPLES
    from fixtures.mirror import STANDARD
    names = set(GENERATION_SAMPLES.values()) | {a.name for a in STANDARD}
    assert not names & {r.file_name for r in known_releases.releases()}


def test_loaded_releases_carry_flavour_and_provenance():
    release = known_releases.known("cudnn_jit-linux-sbsa-9.27.0.42_cuda13-archive.tar.xz")
    assert release.flavour == "cudnn_jit" and release.provenance == ("redistrib_9.27.0.json",)
    assert release.relative_path == "cudnn_jit/linux-sbsa/" + release.file_name
    assert release.url() == redist.NVIDIA_COMPUTE + "cudnn/redist/" + release.relative_path
    line = known_releases.provenance_line("cudnn-linux-x86_64-9.20.0.48_cuda13-archive.tar.xz")
    assert "redistrib_9.20.0.json (NixOS/nixpkgs@4b4faa6)" in line
    assert "Spack cudnn package (spack/spack-packages@f3ec6a4)" in line


def _edit(doc, how):
    rows = doc["releases"]
    jit = next(r for r in rows if r["flavour"] == "cudnn_jit")
    both = next(r for r in rows if len(r["provenance"]) > 1)
    if how == "unknown source":
        rows[0]["provenance"] = ["redistrib_9.99.0.json"]
    elif how == "unsorted provenance":
        both["provenance"].reverse()
    elif how == "no provenance":
        rows[0]["provenance"] = []
    elif how == "md5":
        jit["md5"] = "x" * 32
    elif how == "size bool":
        jit["size"] = True
    elif how == "size text":
        jit["size"] = str(jit["size"])
    elif how == "flavour":
        jit["flavour"] = "cudnn_samples"
    elif how == "jit under cudnn":
        jit["url_path"] = jit["url_path"].replace("/cudnn_jit/", "/cudnn/")
    elif how == "windows tarball":
        win = next(r for r in rows if r["platform"] == "windows-x86_64")
        win["name"] = win["name"].replace(".zip", ".tar.xz")
    elif how == "source url":
        doc["provenance"]["sources"]["spack"]["commit"] = COMMIT
    elif how == "unused source":
        doc["provenance"]["sources"]["redistrib_9.99.0.json"] = dict(
            doc["provenance"]["sources"]["redistrib_9.27.0.json"])
    elif how == "source kind":
        doc["provenance"]["sources"]["spack"]["kind"] = "nvidia-redistrib"
    elif how == "old format":
        doc["format"] = 1
    elif how == "correction":
        doc["provenance"]["corrections"][0]["kept"] = "0" * 64


@pytest.mark.parametrize("how", ["unknown source", "unsorted provenance", "no provenance", "md5",
                                 "size bool", "size text", "flavour", "jit under cudnn",
                                 "windows tarball", "source url", "unused source",
                                 "source kind", "old format", "correction"])
def test_loader_checks_every_new_field(how):
    doc = json.loads(TABLE.read_text())
    _edit(doc, how)
    with pytest.raises(ValueError):
        known_releases.parse(json.dumps(doc))


# --- the generator on synthetic inputs ----------------------------------------------------------

SPACK_PY = '''\
from pathlib import Path
Path(__file__).with_name("EXECUTED").write_text("the generator ran this file")

_versions = {
    "9.20.0.48-13": {"Linux-x86_64": "%(x13)s", "Linux-aarch64": "%(s13)s"},
    "8.6.0.163-11.8": {"Linux-x86_64": "%(c)s", "Linux-ppc64le": "%(d)s"},
    "7.6.5.32-10.1": {"Linux-x86_64": "%(f)s", "Darwin-x86_64": "%(g)s"},
}


class Cudnn(Package):
    def url_for_version(self, version):
        layouts = [Version("8.3.1"), Version("7.2"), Version("7.1"), Version("7.0"),
                   Version("8.8.0"), Version("8.5.0")]
        templates = [
            "https://developer.download.nvidia.com/compute/cudnn/redist/cudnn/{0}/cudnn-{0}-{1}_cuda{2}-archive.tar.xz",
            "https://developer.download.nvidia.com/compute/redist/cudnn/v{0}/cudnn-{1}-{2}_cuda{3}-archive.tar.xz",
            "https://developer.download.nvidia.com/compute/redist/cudnn/v{0}/cudnn-{1}-{2}-v{3}.tgz",
        ]
        return layouts, templates
'''
M920 = _manifest("9.20.0")
SHAS = {"x13": M920["cudnn"]["linux-x86_64"]["cuda13"]["sha256"],
        "s13": M920["cudnn"]["linux-sbsa"]["cuda13"]["sha256"],
        **{k: hashlib.sha256(k.encode()).hexdigest() for k in "cdfg"}}


def _inputs(tmp_path, spack=SPACK_PY % SHAS, manifests=("9.20.0", "9.27.0"), docs=None):
    """A sources file naming a Spack file and manifests, beside copies of them."""
    (tmp_path / "m").mkdir(exist_ok=True)
    (tmp_path / "package.py").write_text(spack)
    entries = []
    for label in manifests:
        doc = (docs or {}).get(label)
        text = json.dumps(doc, indent=4) if doc else (
            MANIFESTS / f"redistrib_{label}.json").read_text()
        (tmp_path / "m" / f"redistrib_{label}.json").write_text(text)
        entries.append({"repository": "https://github.com/NixOS/nixpkgs",
                        "path": f"pkgs/cudnn/redistrib_{label}.json", "commit": COMMIT,
                        "file": f"m/redistrib_{label}.json"})
    sources = {"spack": {"repository": "https://github.com/spack/spack-packages",
                         "path": "packages/cudnn/package.py", "commit": COMMIT,
                         "commit_date": "2026-04-21T15:31:25+02:00", "file": "package.py"},
               "manifests": entries}
    path = tmp_path / "sources.json"
    path.write_text(json.dumps(sources))
    return path


def _run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True,
                          text=True, timeout=120)


def test_script_merges_manifests_with_spack(tmp_path):
    out = tmp_path / "known.json"
    done = _run("--sources", _inputs(tmp_path), "-o", out)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "EXECUTED").exists()  # Spack's file is read, never run
    prov, rows = known_releases.parse(out.read_text())
    by_name = {r["name"]: r for r in rows}
    assert prov["skipped"] == {"spack Darwin-x86_64": 1}
    assert prov["sources"]["spack"]["file_sha256"] == hashlib.sha256(
        (tmp_path / "package.py").read_bytes()).hexdigest()
    assert by_name["cudnn-linux-x86_64-9.20.0.48_cuda13-archive.tar.xz"]["provenance"] == [
        "redistrib_9.20.0.json", "spack"]
    assert by_name["cudnn-linux-x86_64-9.20.0.48_cuda12-archive.tar.xz"]["provenance"] == [
        "redistrib_9.20.0.json"]
    assert by_name["cudnn-10.1-linux-x64-v7.6.5.32.tgz"]["provenance"] == ["spack"]
    # 9.27.0's mixed windows-arm64 object: its cuda13 variant and its direct cuda13.4 archive
    arm = {r["cuda_variant"] for r in rows if r["platform"] == "windows-arm64"}
    assert arm == {"cuda13", "cuda13.4"}
    assert {r["flavour"] for r in rows if r["version"] == "9.27.0.42"} == {"cudnn", "cudnn_jit"}
    assert [r["version"] for r in rows][:2] == ["9.27.0.42", "9.27.0.42"]
    assert _run("--sources", tmp_path / "sources.json", "-o", "-").stdout == out.read_text()


def test_script_refuses_inputs_that_disagree(tmp_path):
    out = tmp_path / "known.json"
    forged = dict(SHAS, x13="0" * 64)
    done = _run("--sources", _inputs(tmp_path, spack=SPACK_PY % forged), "-o", out)
    assert done.returncode == 1 and "redistrib_9.20.0.json" in done.stderr, done.stderr
    assert "spack give sha256 " + "0" * 64 in done.stderr and not out.exists()
    # two manifests listing one archive with different sizes
    doc = _manifest("8.5.0")
    doc["cudnn"]["linux-sbsa"]["cuda11"]["size"] = "683894697"
    done = _run("--sources", _inputs(tmp_path, manifests=("8.5.0", "8.5.0.96"),
                                     docs={"8.5.0": doc}), "-o", out)
    assert done.returncode == 1 and "size" in done.stderr and not out.exists(), done.stderr


def test_script_corrects_a_spack_checksum_that_belongs_to_another_archive(tmp_path):
    """Spack's 8.9.5.30 gives the sbsa archive the Jetson build's sha256 (its one aarch64 key
    stands for both); the same mistake, made here for 9.20.0, is corrected from NVIDIA's
    manifest and recorded, where any other disagreement stops the script."""
    jetson = M920["cudnn"]["linux-aarch64"]["cuda12"]["sha256"]
    spack = SPACK_PY.replace('"8.6.0.163-11.8"', f'"9.20.0.48-12": {{"Linux-aarch64": "{jetson}"}},'
                                                  '\n    "8.6.0.163-11.8"') % SHAS
    out = tmp_path / "known.json"
    done = _run("--sources", _inputs(tmp_path, spack=spack), "-o", out)
    assert done.returncode == 0, done.stderr
    prov, rows = known_releases.parse(out.read_text())
    sbsa = next(r for r in rows if r["name"] == "cudnn-linux-sbsa-9.20.0.48_cuda12-archive.tar.xz")
    assert sbsa["sha256"] == M920["cudnn"]["linux-sbsa"]["cuda12"]["sha256"]
    assert sbsa["provenance"] == ["redistrib_9.20.0.json"]
    assert prov["corrections"] == [{
        "name": sbsa["name"], "source": "spack", "sha256": jetson,
        "is_the_sha256_of": "cudnn-linux-aarch64-9.20.0.48_cuda12-archive.tar.xz",
        "kept": sbsa["sha256"], "from": "redistrib_9.20.0.json"}]


def test_the_committed_table_records_spacks_8_9_5_mix_up():
    prov = known_releases.parse(TABLE.read_text())[0]
    fixed = {c["name"]: c for c in prov["corrections"]}
    c = fixed["cudnn-linux-sbsa-8.9.5.30_cuda12-archive.tar.xz"]
    assert c["is_the_sha256_of"] == "cudnn-linux-aarch64-8.9.5.30_cuda12-archive.tar.xz"
    assert known_releases.known_sha256(c["name"]) == c["kept"] != c["sha256"]


@pytest.mark.parametrize("change,complaint", [
    (('Version("8.5.0")]', 'Version("8.5.0"), Version("9.5.0")]'), "changes layout at"),
    (("v{3}.tgz", "v{3}.tar.gz"), "URL templates changed"),
    (('"Linux-ppc64le": "%(d)s"', '"Linux-riscv64": "%(d)s"'), "unknown platform"),
    (('"%(c)s"', '"not-a-sha"'), "not a sha256"),
    (('"7.6.5.32-10.1"', '"7.6.5.32"'), "unexpected version key"),
    (('"9.20.0.48-13"', '"9.20.0.48-13.0"'), "named for a CUDA major"),
    (("_versions = {", "_versions = dict(x=1) or {"), "not a literal"),
])
def test_script_refuses_a_spack_file_it_does_not_understand(tmp_path, change, complaint):
    out = tmp_path / "known.json"
    done = _run("--sources", _inputs(tmp_path, spack=SPACK_PY.replace(*change) % SHAS), "-o", out)
    assert done.returncode == 1 and complaint in done.stderr, done.stderr
    assert not out.exists() and not (tmp_path / "EXECUTED").exists()


@pytest.mark.parametrize("edit,complaint", [
    (lambda s: s["manifests"][0].update(commit="abc"), "40 hex"),
    (lambda s: s["manifests"][0].update(file="../../etc/passwd"), "not a plain relative path"),
    (lambda s: s["manifests"][0].update(repository="https://evil.example/x"), "GitHub URL"),
    (lambda s: s["manifests"].append(dict(s["manifests"][0])), "two inputs are named"),
    (lambda s: s["manifests"][0].pop("commit"), "needs exactly"),
    (lambda s: s["manifests"][1].update(file="m/missing.json"), "missing.json"),
])
def test_script_refuses_a_bad_sources_file(tmp_path, edit, complaint):
    path = _inputs(tmp_path)
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))
    out = tmp_path / "known.json"
    done = _run("--sources", path, "-o", out)
    assert done.returncode == 1 and complaint in done.stderr, done.stderr
    assert not out.exists()


def test_script_fetches_each_input_from_its_repository_at_its_commit(tmp_path):
    path = _inputs(tmp_path)
    doc = json.loads(path.read_text())
    server = ArchiveServer()
    for src in [doc["spack"], *doc["manifests"]]:
        repo = src["repository"].removeprefix("https://github.com/")
        server.files[f"/{repo}/{src['commit']}/{src['path']}"] = (tmp_path / src["file"]).read_bytes()
    local = _run("--sources", path, "-o", "-")
    for src in [doc["spack"], *doc["manifests"]]:
        (tmp_path / src["file"]).unlink()  # nothing left on disk to read
    with server:
        fetched = _run("--sources", path, "--fetch", "--raw-base", server.base + "/", "-o", "-")
    assert fetched.returncode == 0, fetched.stderr
    assert fetched.stdout == local.stdout
    asked = {r["path"] for r in server.requests}
    assert f"/NixOS/nixpkgs/{COMMIT}/pkgs/cudnn/redistrib_9.27.0.json" in asked


# --- the manifest reader's platform objects, on NVIDIA's real formats ---------------------------

def _parse(doc, label=None):
    return parse_redistrib(json.dumps(doc).encode(), "file:///m/redistrib_x.json", label)


def test_direct_archive_per_platform():
    """8.x's format: a platform maps straight to its one archive (no release_label)."""
    listed = parse_redistrib((MANIFESTS / "redistrib_8.5.0.96.json").read_bytes(),
                             "file:///m/redistrib_8.5.0.96.json", "8.5.0")
    assert {(r.platform, r.cuda_variant) for r in listed} == {
        (p, "cuda11") for p in ("linux-x86_64", "linux-ppc64le", "linux-sbsa", "windows-x86_64")}
    x86 = next(r for r in listed if r.platform == "linux-x86_64")
    assert x86.sha256 == "5454a6fd94f008728caae9adad993c4e85ef36302e26bce43bea7d458a5e7b6d"
    assert x86.size == 692647752 and x86.md5 == "2c7878f9c383117918695e7f98a9aa86"


def test_variants_per_platform():
    listed = _parse(_manifest("9.22.0"), "9.22.0")
    cudnn = {(r.platform, r.cuda_variant) for r in listed if r.flavour == "cudnn"}
    assert cudnn == {(p, v) for p in ("linux-x86_64", "linux-sbsa", "windows-x86_64")
                     for v in ("cuda12", "cuda13")}
    jit = {(r.platform, r.cuda_variant) for r in listed if r.flavour == "cudnn_jit"}
    assert jit == {(p, v) for p in ("linux-x86_64", "linux-sbsa") for v in ("cuda12", "cuda13")}


def test_a_platform_holding_both_a_direct_archive_and_variants_keeps_both():
    listed = _parse(_manifest("9.27.0"), "9.27.0")
    arm = sorted((r.cuda_variant, r.file_name, r.size) for r in listed
                 if r.platform == "windows-arm64")
    assert arm == [
        ("cuda13", "cudnn-windows-arm64-9.27.0.42_cuda13-archive.zip", 468155439),
        ("cuda13.4", "cudnn-windows-arm64-9.27.0.42_cuda13.4-archive.zip", 481633269)]


def test_the_mixed_shape_on_a_linux_platform_too():
    """The same mix built from a real variant object: a Linux platform with its cuda12 variant
    and, beside it, the cuda13 archive given directly."""
    doc = _manifest("9.22.0")
    x86 = doc["cudnn"]["linux-x86_64"]
    x86.update(x86.pop("cuda13"))
    listed = _parse(doc, "9.22.0")
    got = {r.cuda_variant: r.sha256 for r in listed
           if r.platform == "linux-x86_64" and r.flavour == "cudnn"}
    assert got == {"cuda12": "3c350637c820f586c292501124fda0d8ae1104f4ccdb688ad06aa929cf23f112",
                   "cuda13": "6853561e3fbb545e2d25ad567876eadbfff4db49e210abd285e82b55bcb982b0"}


MIXED_DAMAGE = {
    # the direct archive names the same file as a variant: one archive listed twice
    "twice": lambda arm: arm.update(relative_path=arm["cuda13"]["relative_path"],
                                    sha256=arm["cuda13"]["sha256"]),
    "half a direct archive": lambda arm: [arm.pop(k) for k in ("relative_path", "size")],
    "stray key": lambda arm: arm.update(checksum="0" * 64),
    "stray key in a variant": lambda arm: arm["cuda13"].update(url="http://elsewhere/"),
    "direct archive of another variant's name": lambda arm: arm.update(
        relative_path=arm["relative_path"].replace("_cuda13.4", "_gpu13")),
}


@pytest.mark.parametrize("case", list(MIXED_DAMAGE))
def test_damaged_mixed_platform_objects_are_refused(case):
    doc = _manifest("9.27.0")
    MIXED_DAMAGE[case](doc["cudnn"]["windows-arm64"])
    with pytest.raises(ManifestDamaged):
        _parse(doc, "9.27.0")


def test_a_jit_component_of_another_release_is_refused():
    doc = _manifest("9.22.0")
    doc["cudnn_jit"]["version"] = "9.21.0.82"
    with pytest.raises(ManifestDamaged) as err:
        _parse(doc, "9.22.0")
    assert "cudnn_jit version" in err.value.message


def test_a_manifest_without_release_label_must_still_be_the_release_asked_for():
    with pytest.raises(ManifestDamaged):
        parse_redistrib((MANIFESTS / "redistrib_8.5.0.96.json").read_bytes(),
                        "file:///m/redistrib_8.6.0.json", "8.6.0")


# --- Jetson --------------------------------------------------------------------------------------

def _root(tmp_path, release=None, compatible=None):
    root = tmp_path / "host"
    (root / "etc").mkdir(parents=True)
    (root / "proc" / "device-tree").mkdir(parents=True)
    if release is not None:
        (root / "etc" / "nv_tegra_release").write_bytes(release)
    if compatible is not None:
        (root / "proc" / "device-tree" / "compatible").write_bytes(compatible)
    return root


ORIN_RELEASE = (b"# R36 (release), REVISION: 4.0, GCID: 37537400, BOARD: generic, EABI: aarch64, "
                b"DATE: Fri Sep 13 04:36:44 UTC 2024\n# KERNEL_VARIANT: oot\n")


def test_tegra_is_seen_from_the_release_file_or_the_device_tree(tmp_path):
    assert tegra_evidence(_root(tmp_path / "a", release=ORIN_RELEASE)) == \
        "/etc/nv_tegra_release: R36 (release)"
    found = tegra_evidence(_root(tmp_path / "b", compatible=b"nvidia,p3737-0000+p3701-0000\0"
                                                            b"nvidia,p3701-0000\0nvidia,tegra234\0"))
    assert found == "device tree compatible nvidia,tegra234"
    assert tegra_evidence(_root(tmp_path / "c")) is None
    # a server Arm machine's device tree, an empty or foreign release file, a directory
    assert tegra_evidence(_root(tmp_path / "d", compatible=b"ampere,altra\0arm,neoverse\0")) is None
    assert tegra_evidence(_root(tmp_path / "e", release=b"\x1b[2J R36\n")) is None
    odd = _root(tmp_path / "f")
    (odd / "etc" / "nv_tegra_release").mkdir()
    assert tegra_evidence(odd) is None
    # a FIFO (no writer: a plain open would wait for ever) or a device in a marker's place
    fifo = _root(tmp_path / "h")
    os.mkfifo(fifo / "etc" / "nv_tegra_release")
    (fifo / "proc" / "device-tree" / "compatible").symlink_to("/dev/zero")
    assert tegra_evidence(fifo) is None
    # what is quoted is escaped and bounded
    loud = tegra_evidence(_root(tmp_path / "g", compatible=b"nvidia,tegra\x1b]0;x\x07" + b"9" * 500))
    assert "\x1b" not in loud and len(loud) < 100


def test_a_jetson_takes_the_aarch64_build_where_one_exists_else_sbsa():
    choice = redist.platform_choice("aarch64", "/etc/nv_tegra_release: R36 (release)")
    assert choice.platforms == ("linux-aarch64", "linux-sbsa") and "Jetson" in choice.why
    table = known_releases.releases()
    got = select(parse_request("9.20"), table, choice.platforms, "12.6")
    assert got.file_name == "cudnn-linux-aarch64-9.20.0.48_cuda12-archive.tar.xz"
    # 9.22.0 has no linux-aarch64 build: the sbsa one
    got = select(parse_request("9.22"), table, choice.platforms, "12.6")
    assert got.file_name == "cudnn-linux-sbsa-9.22.0.52_cuda12-archive.tar.xz"
    # the newest release wins; within it, the Jetson build first
    order = [r.file_name for r in ranked(parse_request("9.20"), table, choice.platforms, "12.6")]
    assert order[:2] == ["cudnn-linux-aarch64-9.20.0.48_cuda12-archive.tar.xz",
                         "cudnn-linux-sbsa-9.20.0.48_cuda12-archive.tar.xz"]
    # never the JIT library in cuDNN's place
    assert all(r.flavour == "cudnn" for r in ranked(parse_request("9"), table, choice.platforms,
                                                    "13.0"))
    # a server Arm machine, or an x86_64 one, is not a Jetson whatever it was told
    assert redist.platform_choice("aarch64", None).platforms == ("linux-sbsa",)
    assert redist.platform_choice("x86_64", "R36").platforms == ("linux-x86_64",)


def test_a_platform_named_on_the_command_line_is_used_alone():
    assert redist.platform_choice("x86_64", None, "windows-x86_64").platforms == ("windows-x86_64",)
    with pytest.raises(Exception) as err:
        redist.platform_choice("x86_64", None, "windows-riscv")
    assert err.value.exit_code == USAGE
    with pytest.raises(NoVariant) as err:
        select(parse_request("9.22"), known_releases.releases(), ("linux-ppc64le",), "12.4")
    assert err.value.exit_code == ARCHIVE_REJECTED


# --- list ------------------------------------------------------------------------------------

@pytest.fixture
def mirror(tmp_path):
    """A file:// mirror holding NVIDIA's real 9.20.0 and 9.22.0 manifests."""
    root = tmp_path / "mirror"
    root.mkdir()
    for label in ("9.20.0", "9.22.0"):
        shutil.copy(MANIFESTS / f"redistrib_{label}.json", root)
    return root


def _ctx(tmp_path, machine, host_root):
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return Context(env={"PATH": "/usr/bin:/bin"}, home=home, python=sys.executable,
                   cwd=tmp_path, system_config=tmp_path / "none.conf", host_root=host_root,
                   machine=machine)


def test_list_on_a_jetson_says_which_build_and_why(tmp_path, mirror):
    ctx = _ctx(tmp_path, "aarch64", _root(tmp_path, release=ORIN_RELEASE))
    result = list_releases(ctx, cuda="12", mirror=str(mirror))
    assert result.error is None, result.error
    data = result.to_dict()
    assert data["platforms"] == ["linux-aarch64", "linux-sbsa"]
    assert data["platform"] == "linux-aarch64"
    assert "Jetson (/etc/nv_tegra_release: R36 (release))" in data["platform_why"]
    got = {(r["version"], r["flavour"], r["platform"]) for r in data["releases"]}
    assert ("9.20.0.48", "cudnn", "linux-aarch64") in got
    assert ("9.20.0.48", "cudnn", "linux-sbsa") not in got  # one build per release: the Jetson's
    assert ("9.22.0.52", "cudnn", "linux-sbsa") in got  # no Jetson build of 9.22.0
    assert ("9.20.0.48", "cudnn_jit", "linux-sbsa") in got  # NVIDIA ships no Jetson JIT library
    text = "\n".join(result.lines)
    assert "platform: Jetson (/etc/nv_tegra_release: R36 (release)): the linux-aarch64 build" in text
    assert "cudnn-linux-aarch64-9.20.0.48_cuda12-archive.tar.xz  (linux-aarch64)" in text
    assert "cudnn-linux-sbsa-9.22.0.52_cuda12-archive.tar.xz  (linux-sbsa)" in text
    assert "cudnn_jit-linux-sbsa-9.22.0.52_cuda12-archive.tar.xz  JIT library" in text


def test_list_for_another_platform(tmp_path, mirror):
    ctx = _ctx(tmp_path, "x86_64", _root(tmp_path))
    result = list_releases(ctx, cuda="13", mirror=str(mirror), platform="windows-x86_64")
    data = result.to_dict()
    assert result.error is None and data["platforms"] == ["windows-x86_64"]
    assert data["platform_why"] == "--platform"
    assert {r["file_name"] for r in data["releases"]} == {
        "cudnn-windows-x86_64-9.20.0.48_cuda13-archive.zip",
        "cudnn-windows-x86_64-9.22.0.52_cuda13-archive.zip"}
    plain = list_releases(_ctx(tmp_path, "x86_64", _root(tmp_path / "x")), cuda="13",
                          mirror=str(mirror)).to_dict()
    assert plain["platforms"] == ["linux-x86_64"] and plain["platform_why"] == "machine x86_64"
    assert {r["platform"] for r in plain["releases"]} == {"linux-x86_64"}


def test_list_rows_carry_the_tables_provenance(tmp_path):
    """NVIDIA's tree unreachable from tests is not assumed: an empty file mirror lists the table."""
    empty = tmp_path / "empty"
    empty.mkdir()
    ctx = _ctx(tmp_path, "x86_64", _root(tmp_path))
    data = list_releases(ctx, cuda="12", mirror=str(empty)).to_dict()
    row = next(r for r in data["releases"] if r["version"] == "9.20.0.48" and r["flavour"] == "cudnn")
    assert row["provenance"] == ["redistrib_9.20.0.json", "spack"] and row["source"] == "known table"
    assert {r["cuda_variant"] for r in data["releases"]} == {"cuda12"}


def test_old_tables_consumers_see_the_same_fields(tmp_path):
    """checksums, resolve and placement read Release objects; their fields did not move."""
    from cudnn_setup.placement.fit import variant_name
    from cudnn_setup.fetch.checksums import expected_for
    name = "cudnn-linux-x86_64-9.20.0.48_cuda13-archive.tar.xz"
    expected = expected_for(name, None)
    assert expected.digest == known_releases.known_sha256(name)
    assert "redistrib_9.20.0.json" in expected.source and "Spack" in expected.source
    # the same cuDNN for another CUDA major: the Linux build, never the Windows one
    assert variant_name(name, "9.20.0", 12) == "cudnn-linux-x86_64-9.20.0.48_cuda12-archive.tar.xz"


# --- a release newer than the table ----------------------------------------------------------

class _LocalNvidia(Reader):
    """The real reader, NVIDIA's tree served from a local directory (tests reach no network)."""

    def __init__(self, root: Path):
        super().__init__()
        self.root = root

    def _local(self, url):
        assert url.startswith(redist.NVIDIA_REDIST), url
        return self.root.as_uri() + "/" + url[len(redist.NVIDIA_REDIST):]

    def labels(self, base):
        return super().labels(self._local(base))

    def read(self, url, limit):
        return super().read(self._local(url), limit)


def test_a_release_newer_than_the_table_comes_from_the_trees_manifest(tmp_path):
    """9.28.0 is in no public copy: NVIDIA's tree's own manifest (here 9.27.0's, relabelled)
    still serves it, every platform and Jetson's choice included."""
    newest = max(known_releases.releases(), key=lambda r: Version(r.version))
    assert Version(newest.version) < Version("9.28")
    text = (MANIFESTS / "redistrib_9.27.0.json").read_text()
    (tmp_path / "redistrib_9.28.0.json").write_text(
        text.replace("9.27.0.42", "9.28.0.7").replace('"9.27.0"', '"9.28.0"'))
    tree = Tree(redist.NVIDIA_REDIST, _LocalNvidia(tmp_path))
    got = resolve(parse_request("9"), tree, "linux-x86_64", "13.0")
    assert got.release.file_name == "cudnn-linux-x86_64-9.28.0.7_cuda13-archive.tar.xz"
    assert got.release.source.startswith("redistrib_9.28.0.json") and got.manifests == ("9.28.0",)
    jetson = redist.platform_choice("aarch64", "R36").platforms
    got = resolve(parse_request("9.28"), tree, jetson, "12.6")
    assert got.release.platform == "linux-sbsa"  # 9.27.0's manifest has no Jetson build
    found = catalog(tree, "linux-x86_64")
    assert any(r.version == "9.28.0.7" and r.flavour == "cudnn_jit" for r in found.releases)


@pytest.mark.parametrize("name", ["cudnn-windows-x86_64-9.20.0.48_cuda12-archive.zip",
                                  "cudnn-linux-aarch64-9.20.0.48_cuda12-archive.tar.xz"])
def test_install_by_a_name_the_table_lists_for_no_linux_root_here_fetches_nothing(
        tmp_path, name, cuda_root, home):
    """A Windows build is refused by name before a byte is fetched (NVIDIA's tree is never
    asked: the mirror is an empty directory); a Jetson build is still a Linux one."""
    from conftest import run_json
    empty = tmp_path / "empty"
    empty.mkdir()
    root = cuda_root(version="12.4", layout="lib")
    done, out = run_json(["install", name, "--cuda-root", root, "--mirror", empty, "--dry-run"],
                         home)
    if name.startswith("cudnn-windows"):
        assert done.returncode == ARCHIVE_REJECTED and out["error"]["code"] == "no-cuda-variant"
        assert "windows-x86_64" in out["error"]["message"] and "download" not in out
    else:  # fetched from the (empty) mirror: a download failure, not a refusal by name
        assert out["error"]["code"] != "no-cuda-variant", out["error"]


def test_a_jetsons_mirror_holds_its_jetson_and_sbsa_builds(tmp_path):
    """`mirror` on a Jetson, no --platform: both platforms install may take are asked for; a
    release without a Jetson build is skipped for linux-aarch64 and said."""
    from cudnn_setup.commands.mirror import mirror
    source = tmp_path / "upstream"
    source.mkdir()
    shutil.copy(MANIFESTS / "redistrib_9.22.0.json", source)  # no linux-aarch64 build
    ctx = _ctx(tmp_path, "aarch64", _root(tmp_path, release=ORIN_RELEASE))
    result = mirror(ctx, tmp_path / "m", ["9.22.0"], cudas=["12"], from_=str(source))
    data = result.to_dict()["mirror"]
    assert [(s["platform"], s["cuda"]) for s in data["skipped"]] == [("linux-aarch64", "12")]
    # the sbsa build was asked for next: the upstream holds no archive, so that fails
    assert result.error is not None and "cudnn-linux-sbsa-9.22.0.52_cuda12" in result.error.message
