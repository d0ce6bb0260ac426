"""A mirror's manifests as typed records (cudnn_setup/mirror/manifest.py): every manifest NVIDIA
published reads and writes back as it was, a field of the wrong shape is refused as a damaged
manifest (exit 6) before anything is fetched or written, and a listing is added, not merged."""
import json

import pytest

from conftest import REPO, run_json
from cudnn_setup.errors import DOWNLOAD_FAILED, UsageError
from cudnn_setup.fetch.redist import ManifestDamaged
from cudnn_setup.mirror.manifest import Artifact, Document, RepackedFrom, listing
from fixtures.mirror import STANDARD, build_mirror

MANIFESTS = sorted((REPO / "data" / "known-releases" / "manifests").glob("redistrib_*.json"))


def _label(path):
    return ".".join(path.stem.split("_", 1)[1].split(".")[:3])


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_every_manifest_nvidia_published_reads_and_writes_back_as_it_was(path):
    doc = Document.load(path.read_bytes(), path.as_uri(), _label(path))
    assert json.loads(doc.to_bytes()) == json.loads(path.read_bytes())


@pytest.mark.parametrize("change", [
    {"release_date": 20250904},
    {"cudnn_setup": "built by hand"},
    {"cudnn_setup": {"built_by": ["a", "list"]}},
], ids=["date-a-number", "marker-a-string", "builder-a-list"])
def test_a_manifest_field_of_the_wrong_shape_is_refused_and_nothing_fetched(change, tmp_path,
                                                                           home, compiler):
    source = build_mirror(tmp_path / "nvidia-copy", archives=(STANDARD[0],), cc=compiler)
    out = tmp_path / "fleet"
    out.mkdir()
    doc = {**json.loads(source.manifests["9.1.7"].read_text()), **change}
    (out / "redistrib_9.1.7.json").write_text(json.dumps(doc))
    before = (out / "redistrib_9.1.7.json").read_bytes()
    done, res = run_json(["mirror", out, "9.1", "--cuda", "12", "--from", source.url], home)
    assert done.returncode == DOWNLOAD_FAILED and res["error"]["code"] == "manifest-damaged", \
        done.stderr
    assert (out / "redistrib_9.1.7.json").read_bytes() == before
    assert not (out / "cudnn").exists() or not list((out / "cudnn").rglob("*.tar.xz"))


def test_a_listing_is_added_beside_what_the_platform_holds():
    path = next(p for p in MANIFESTS if p.name == "redistrib_9.27.0.json")
    doc = Document.load(path.read_bytes(), path.as_uri(), "9.27.0")
    name = "cudnn-linux-x86_64-9.27.0.42_cuda12-repack.tar.gz"
    added = Artifact(f"cudnn/linux-x86_64/{name}", "a" * 64, "b" * 32, 10,
                     RepackedFrom("nvidia_cudnn_cu12-9.27.0.42-py3-none-manylinux_2_27_x86_64"
                                  ".whl", "c" * 64))
    new, changed = listing(doc, doc.cudnn.version, "linux-x86_64", "cuda12", added, "2026-01-01")
    assert changed and new.cudnn.artifact("linux-x86_64", "cuda12") == added
    assert new.cudnn.platforms["linux-x86_64"].variants["cuda13"] == \
        doc.cudnn.platforms["linux-x86_64"].variants["cuda13"]
    assert new.kept == doc.kept and new.release_date == doc.release_date
    assert listing(new, doc.cudnn.version, "linux-x86_64", "cuda12", added, "x") == (new, False)
    with pytest.raises(UsageError, match="under release 9.27.0, not 9.27.0.1"):
        listing(doc, "9.27.0.1", "linux-x86_64", "cuda12", added, "x")
    with pytest.raises(ManifestDamaged):
        Document.load(b'{"cudnn": 1}', "file:///m/redistrib_9.27.0.json", "9.27.0")
