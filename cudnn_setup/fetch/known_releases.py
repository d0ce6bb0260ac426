"""The table of every cuDNN archive NVIDIA published with its sha256: known_releases.json, next
to this file. scripts/update-known-releases.py generates it from the inputs that
data/known-releases/sources.json names: NVIDIA's own redistrib_*.json manifests (as public
repositories keep them) and Spack's cudnn package (whose maintainers record NVIDIA's checksums
for archives older than NVIDIA's manifests). Every entry names the sources that vouch for its
sha256 (`provenance`); the table's `provenance.sources` says where each source was read.

Entries cover every platform NVIDIA publishes (Linux x86_64, sbsa, ppc64le, aarch64 for
Jetson; Windows, listed but never installed) and both flavours (`cudnn`, and the graph JIT
library `cudnn_jit`, 9.10 on). A wrong entry would refuse a good archive, so the table is
checked as it is read: every name and URL path must be what redist's naming rules give for the
entry's version, flavour, platform and CUDA, and every source an entry names must be described.
"""
from __future__ import annotations

import functools
import json
import re
from importlib import resources

from packaging.version import Version

from cudnn_setup.fetch import redist
from cudnn_setup.fetch.candidates import Release

FORMAT = 2
FILE_NAME = "known_releases.json"
# The first seven keys are format 1's, in its order; the last four came with format 2.
ENTRY_KEYS = ("name", "version", "cuda", "cuda_variant", "platform", "sha256", "url_path",
              "flavour", "md5", "size", "provenance")
PROVENANCE_KEYS = ("generator", "inputs", "url_base", "sources", "skipped", "corrections")
CORRECTION_KEYS = ("name", "source", "sha256", "is_the_sha256_of", "kept", "from")
SOURCE_KEYS = ("kind", "repository", "path", "commit", "commit_date", "url", "file_sha256")
SOURCE_KINDS = ("spack-package", "nvidia-redistrib")
_SOURCE_ID = re.compile(r"^(spack|redistrib_\d{1,4}\.\d{1,4}\.\d{1,6}(\.\d{1,8})?\.json)\Z")
_COMMIT = re.compile(r"^[0-9a-f]{40}\Z")
MAX_SIZE = 1 << 40


def ordered(rows: list[dict]) -> list[dict]:
    """Table order: newest cuDNN first; within a version by flavour, platform, newest CUDA."""
    rows = sorted(rows, key=lambda e: redist.variant_key(e["cuda_variant"]), reverse=True)
    rows = sorted(rows, key=lambda e: Version(e["cuda"]), reverse=True)
    rows = sorted(rows, key=lambda e: (e["flavour"], e["platform"]))
    return sorted(rows, key=lambda e: Version(e["version"]), reverse=True)


def entry(version: str, platform: str, cuda: str, sha256: str, *, flavour: str = "cudnn",
          md5: str | None = None, size: int | None = None, provenance: tuple[str, ...] = (),
          url_path: str | None = None) -> dict:
    """One table row, its name made by the naming rules; its URL path Spack's rule's unless
    one is given (an archive NVIDIA's redist tree lists: see _url_paths)."""
    name = redist.archive_name(version, platform, cuda, flavour)
    if url_path is None:
        url_path = redist.public_path(version, platform, cuda, flavour)
    return {"name": name, "version": version, "cuda": cuda,
            "cuda_variant": redist.variant_name(version, cuda), "platform": platform,
            "sha256": sha256, "url_path": url_path, "flavour": flavour, "md5": md5,
            "size": size, "provenance": sorted(provenance)}


def _url_paths(row: dict) -> set[str]:
    """The URL paths the naming rules allow: the public path of the release's layout, and for
    8.5 to 8.7 also NVIDIA's redist tree, which holds those archives too (its manifests list
    them there, with a major-only CUDA where Spack names the minor)."""
    paths = {redist.tree_path(row["platform"], row["name"], row["flavour"])}
    try:
        paths.add(redist.public_path(row["version"], row["platform"], row["cuda"], row["flavour"]))
    except ValueError:
        pass
    return paths


def render(provenance: dict, entries: list[dict]) -> str:
    """The JSON text, one release per line so that a regenerated table diffs line by line."""
    head = json.dumps(provenance, indent=2).replace("\n", "\n  ")
    rows = ",\n".join("    " + json.dumps(e) for e in entries)
    return (f'{{\n  "format": {FORMAT},\n  "provenance": {head},\n'
            f'  "releases": [\n{rows}\n  ]\n}}\n')


def _check_provenance(prov) -> dict:
    if not isinstance(prov, dict) or tuple(prov) != PROVENANCE_KEYS:
        raise ValueError(f"provenance must have exactly {PROVENANCE_KEYS}")
    if not all(isinstance(prov[k], str) for k in ("generator", "inputs", "url_base")):
        raise ValueError("provenance generator, inputs and url_base must be strings")
    skipped = prov["skipped"]
    if not isinstance(skipped, dict) or not all(
            isinstance(k, str) and type(v) is int and v > 0 for k, v in skipped.items()):
        raise ValueError("provenance.skipped must map what was left out to a count")
    corrections = prov["corrections"]
    if not isinstance(corrections, list) or not all(
            isinstance(c, dict) and tuple(c) == CORRECTION_KEYS
            and all(isinstance(v, str) for v in c.values()) for c in corrections):
        raise ValueError(f"provenance.corrections must be a list of {CORRECTION_KEYS}")
    sources = prov["sources"]
    if not isinstance(sources, dict) or not sources:
        raise ValueError("provenance.sources must describe at least one source")
    for sid, src in sources.items():
        if not isinstance(sid, str) or not _SOURCE_ID.match(sid):
            raise ValueError(f"source id {sid!r:.60} is not spack or redistrib_<label>.json")
        if not isinstance(src, dict) or tuple(src) != SOURCE_KEYS:
            raise ValueError(f"source {sid} must have exactly {SOURCE_KEYS}")
        if src["kind"] not in SOURCE_KINDS or (src["kind"] == "spack-package") != (sid == "spack"):
            raise ValueError(f"source {sid}: kind {src['kind']!r:.40} does not fit its id")
        if not all(isinstance(src[k], str) for k in ("repository", "path", "url")):
            raise ValueError(f"source {sid}: repository, path and url must be strings")
        if not isinstance(src["commit"], str) or not _COMMIT.match(src["commit"]):
            raise ValueError(f"source {sid}: commit is not 40 lowercase hex digits")
        if src["commit_date"] is not None and not isinstance(src["commit_date"], str):
            raise ValueError(f"source {sid}: commit_date must be a string or null")
        if not isinstance(src["file_sha256"], str) or not redist.HEX64.match(src["file_sha256"]):
            raise ValueError(f"source {sid}: file_sha256 is not 64 lowercase hex digits")
        if src["url"] != f"{src['repository']}/blob/{src['commit']}/{src['path']}":
            raise ValueError(f"source {sid}: url is not the file at its commit")
    return sources


def _check_row(row, sources: dict) -> None:
    if not isinstance(row, dict) or tuple(row) != ENTRY_KEYS:
        raise ValueError(f"entry must have exactly {ENTRY_KEYS}: {row!r:.200}")
    text_keys = ENTRY_KEYS[:8]
    if not all(isinstance(row[k], str) for k in text_keys):
        raise ValueError(f"entry {text_keys} must be strings: {row!r:.200}")
    name = row["name"]
    if not redist.HEX64.match(row["sha256"]):
        raise ValueError(f"{name}: sha256 is not 64 lowercase hex digits")
    if row["md5"] is not None and (not isinstance(row["md5"], str)
                                   or not redist.HEX32.match(row["md5"])):
        raise ValueError(f"{name}: md5 is not null or 32 lowercase hex digits")
    if row["size"] is not None and (type(row["size"]) is not int
                                    or not 0 < row["size"] <= MAX_SIZE):
        raise ValueError(f"{name}: size is not null or a byte count")
    if row["platform"] not in redist.PLATFORMS:
        raise ValueError(f"{name}: unknown platform {row['platform']!r}")
    if row["flavour"] not in redist.FLAVOURS:
        raise ValueError(f"{name}: unknown flavour {row['flavour']!r}")
    prov = row["provenance"]
    if not isinstance(prov, list) or not prov or prov != sorted(set(prov)) or not all(
            isinstance(s, str) and s in sources for s in prov):
        raise ValueError(f"{name}: provenance must list, sorted, the sources that vouch for it")
    try:
        want = entry(row["version"], row["platform"], row["cuda"], row["sha256"],
                     flavour=row["flavour"], md5=row["md5"], size=row["size"],
                     provenance=tuple(prov), url_path=row["url_path"])
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None
    if row != want or row["url_path"] not in _url_paths(row):
        raise ValueError(f"{name}: name, variant or URL path disagree with the naming rules")


def parse(text: str) -> tuple[dict, list[dict]]:
    """Provenance and rows of a table, after checking every field; ValueError names the first fault."""
    doc = json.loads(text)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or set(doc) != {
            "format", "provenance", "releases"}:
        raise ValueError(f"not a format-{FORMAT} known-releases table")
    prov, rows = doc["provenance"], doc["releases"]
    sources = _check_provenance(prov)
    if not isinstance(rows, list) or not rows:
        raise ValueError("no releases")
    names: set[str] = set()
    for row in rows:
        _check_row(row, sources)
        if row["name"] in names:
            raise ValueError(f"{row['name']} is listed twice")
        names.add(row["name"])
    if rows != ordered(rows):
        raise ValueError("releases are not in table order")
    unused = set(sources) - {s for row in rows for s in row["provenance"]}
    if unused:
        raise ValueError(f"sources no entry names: {sorted(unused)}")
    by_name = {row["name"]: row for row in rows}
    for c in prov["corrections"]:
        row = by_name.get(c["name"])
        if row is None or row["sha256"] != c["kept"] or c["source"] in row["provenance"] \
                or c["from"] not in row["provenance"] or c["source"] not in sources \
                or by_name.get(c["is_the_sha256_of"], {}).get("sha256") != c["sha256"]:
            raise ValueError(f"correction of {c['name']} does not match the table")
    return prov, rows


def to_release(row: dict) -> Release:
    return Release(version=row["version"], cuda_variant=row["cuda_variant"],
                   platform=row["platform"], file_name=row["name"],
                   relative_path=redist.mirror_path(row["platform"], row["name"], row["flavour"]),
                   sha256=row["sha256"], md5=row["md5"], size=row["size"], source="known table",
                   public_path=row["url_path"], flavour=row["flavour"],
                   provenance=tuple(row["provenance"]))


def _text() -> str:
    return resources.files(__package__).joinpath(FILE_NAME).read_text(encoding="utf-8")


@functools.lru_cache(maxsize=1)
def load() -> tuple[dict, tuple[Release, ...]]:
    """The packaged table: (provenance, releases)."""
    prov, rows = parse(_text())
    return prov, tuple(to_release(r) for r in rows)


def releases() -> tuple[Release, ...]:
    return load()[1]


@functools.lru_cache(maxsize=64)
def known(name: str) -> Release | None:
    """The table's entry for an archive, by its file name. Unless the whole table was read
    already, only the provenance and the entries of that name are checked: an install of a
    local archive looks up one name, and checking every entry (parse) takes 20 times as long
    as reading the table. The whole table is checked by parse() wherever it is listed."""
    if load.cache_info().currsize:
        return next((r for r in releases() if r.file_name == name), None)
    doc = json.loads(_text())
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or set(doc) != {
            "format", "provenance", "releases"} or not isinstance(doc["releases"], list):
        raise ValueError(f"not a format-{FORMAT} known-releases table")
    sources = _check_provenance(doc["provenance"])
    rows = [r for r in doc["releases"] if not isinstance(r, dict) or r.get("name") == name]
    for row in rows:
        _check_row(row, sources)
    if len(rows) > 1:
        raise ValueError(f"{name} is listed twice")
    return to_release(rows[0]) if rows else None


def known_sha256(name: str) -> str | None:
    """NVIDIA's published sha256 of an archive, by its file name."""
    release = known(name)
    return None if release is None else release.sha256


def describe_source(sid: str) -> str:
    """One source in a few words: `redistrib_9.27.0.json (NixOS/nixpkgs@d193d74)`."""
    src = load()[0]["sources"][sid]
    repo = src["repository"].removeprefix("https://github.com/")
    what = "Spack cudnn package" if src["kind"] == "spack-package" else sid
    return f"{what} ({repo}@{src['commit'][:7]})"


def provenance_line(name: str | None = None) -> str:
    """Where the table's checksum of archive `name` comes from (every source that vouches for
    it), or, without a name, what the table is made from."""
    release = known(name) if name is not None else None
    if release is not None:
        return ", ".join(describe_source(s) for s in release.provenance)
    sources = load()[0]["sources"]
    manifests = sum(1 for s in sources.values() if s["kind"] == "nvidia-redistrib")
    spack = ", ".join(describe_source(s) for s in sources if s == "spack")
    return f"{manifests} NVIDIA redistrib manifests" + (f" and {spack}" if spack else "")
