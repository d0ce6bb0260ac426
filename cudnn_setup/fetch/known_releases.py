"""The table of every Linux cuDNN archive NVIDIA published with its sha256: known_releases.json,
next to this file. scripts/update-known-releases.py generates it from Spack's cudnn package
(whose maintainers record NVIDIA's checksums); its `provenance` block names the exact file.
A wrong entry would refuse a good archive, so the table is checked as it is read: every name
and URL path must be what redist's naming rules give for the entry's version, platform and CUDA.
"""
from __future__ import annotations

import functools
import json
from importlib import resources

from packaging.version import Version

from cudnn_setup.fetch import redist
from cudnn_setup.fetch.candidates import Release

FORMAT = 1
FILE_NAME = "known_releases.json"
ENTRY_KEYS = ("name", "version", "cuda", "cuda_variant", "platform", "sha256", "url_path")
PROVENANCE_KEYS = ("source", "repository", "path", "commit", "commit_date", "url", "file_sha256",
                   "generator", "url_base", "skipped_platforms")


def ordered(rows: list[dict]) -> list[dict]:
    """Table order: newest cuDNN first; within a version by platform, then newest CUDA first."""
    rows = sorted(rows, key=lambda e: Version(e["cuda"]), reverse=True)
    rows = sorted(rows, key=lambda e: e["platform"])
    return sorted(rows, key=lambda e: Version(e["version"]), reverse=True)


def entry(version: str, platform: str, cuda: str, sha256: str) -> dict:
    """One table row, its name and URL path made by the naming rules."""
    return {"name": redist.archive_name(version, platform, cuda), "version": version, "cuda": cuda,
            "cuda_variant": redist.variant_name(version, cuda), "platform": platform,
            "sha256": sha256, "url_path": redist.public_path(version, platform, cuda)}


def render(provenance: dict, entries: list[dict]) -> str:
    """The JSON text, one release per line so that a regenerated table diffs line by line."""
    head = json.dumps(provenance, indent=2).replace("\n", "\n  ")
    rows = ",\n".join("    " + json.dumps(e) for e in entries)
    return (f'{{\n  "format": {FORMAT},\n  "provenance": {head},\n'
            f'  "releases": [\n{rows}\n  ]\n}}\n')


def parse(text: str) -> tuple[dict, list[dict]]:
    """Provenance and rows of a table, after checking every field; ValueError names the first fault."""
    doc = json.loads(text)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or set(doc) != {
            "format", "provenance", "releases"}:
        raise ValueError(f"not a format-{FORMAT} known-releases table")
    prov, rows = doc["provenance"], doc["releases"]
    if not isinstance(prov, dict) or tuple(prov) != PROVENANCE_KEYS:
        raise ValueError(f"provenance must have exactly {PROVENANCE_KEYS}")
    if not isinstance(rows, list) or not rows:
        raise ValueError("no releases")
    names: set[str] = set()
    for row in rows:
        if not isinstance(row, dict) or tuple(row) != ENTRY_KEYS or not all(
                isinstance(v, str) for v in row.values()):
            raise ValueError(f"entry must have exactly {ENTRY_KEYS}, all strings: {row!r:.200}")
        if not redist.HEX64.match(row["sha256"]):
            raise ValueError(f"{row['name']}: sha256 is not 64 lowercase hex digits")
        if row["platform"] not in redist.PLATFORMS:
            raise ValueError(f"{row['name']}: unknown platform {row['platform']!r}")
        if row != entry(row["version"], row["platform"], row["cuda"], row["sha256"]):
            raise ValueError(f"{row['name']}: name, variant or URL path disagree with the naming rules")
        if row["name"] in names:
            raise ValueError(f"{row['name']} is listed twice")
        names.add(row["name"])
    if rows != ordered(rows):
        raise ValueError("releases are not in table order")
    return prov, rows


def to_release(row: dict) -> Release:
    return Release(version=row["version"], cuda_variant=row["cuda_variant"],
                   platform=row["platform"], file_name=row["name"],
                   relative_path=redist.mirror_path(row["platform"], row["name"]),
                   sha256=row["sha256"], source="known table", public_path=row["url_path"])


@functools.lru_cache(maxsize=1)
def load() -> tuple[dict, tuple[Release, ...]]:
    """The packaged table: (provenance, releases)."""
    text = resources.files(__package__).joinpath(FILE_NAME).read_text(encoding="utf-8")
    prov, rows = parse(text)
    return prov, tuple(to_release(r) for r in rows)


def releases() -> tuple[Release, ...]:
    return load()[1]


def known_sha256(name: str) -> str | None:
    """NVIDIA's published sha256 of an archive, by its file name."""
    return next((r.sha256 for r in releases() if r.file_name == name), None)


def provenance_line() -> str:
    """One line saying where the table's checksums come from."""
    p = load()[0]
    return f"{p['source']} ({p['url']}, {p['commit_date'][:10]})"
