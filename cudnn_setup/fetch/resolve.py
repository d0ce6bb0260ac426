"""Which archive `install VERSION` fetches and what `list` offers: the known-releases table and
the manifests of a redist tree (NVIDIA's, or a mirror of it), checked against each other and
narrowed to what the tree holds.

Reading a tree (`redist/`, as at https://developer.download.nvidia.com/compute/cudnn/redist/):
- its manifests, `redistrib_<X.Y.Z>.json` in NVIDIA's schema (see redistrib_json), are found
  through the tree's index page (NVIDIA's redist/ directory and common web servers list it; a
  file:// mirror is a directory); a request naming X.Y.Z also asks for that manifest by name, so
  a mirror without an index still serves a release newer than the table;
- only manifests whose label matches the request are read, newest first, and install stops at
  the first with a build for this platform and CUDA;
- a manifest entry for an archive the table knows must carry the table's sha256, or the whole
  answer is refused (ManifestDamaged, exit 6).

What a tree holds:
- NVIDIA's own tree: every archive of the table, at the public URL NVIDIA gave it, and every
  archive its manifests list;
- a mirror: what its manifests list. When a mirror has a manifest matching the request, its
  manifests decide (one request or two, however many archives the table knows). When it has
  none (a mirror without manifests, or a release older than NVIDIA's manifests), the table's
  candidates are asked for one by one, newest first: the archive's own URL is the only answer
  every server gives the same way, where a listing of cudnn/<platform>/ is optional server
  behaviour in formats that vary; newest first, the usual case (the mirror has the newest match)
  costs one request.
"""
from __future__ import annotations

import re
from typing import Iterable, Protocol, Sequence

from msgspec import Struct
from packaging.version import Version

from cudnn_setup.errors import DownloadFailed
from cudnn_setup.fetch import known_releases, redist
from cudnn_setup.fetch.candidates import (
    Release, UnknownVersion, VersionRequest, installable, merge, nearest_versions,
    platform_order, ranked, select,
)
from cudnn_setup.fetch.redistrib_json import MAX_BYTES, parse_redistrib
from cudnn_setup.urls import redact

TABLE = "known table"  # Release.source of the table's entries
MAX_MANIFESTS = 64  # read at most this many manifests for one answer
MAX_PROBES = 32  # archives asked for before giving up: every 9.x build of one platform and CUDA
_NEW_NAME = re.compile(r"^cudnn-(linux-[a-z0-9_]+)-(\d{1,4}\.\d{1,4}\.\d{1,6}\.\d{1,8})_"
                       r"cuda\d{1,2}(?:\.\d{1,2})?-archive\.tar\.xz\Z")


class NotOnMirror(DownloadFailed):
    """Releases match, but the mirror has none of their archives (exit 6)."""

    default_code = "not-on-mirror"


class Reader(Protocol):
    def labels(self, base: str) -> list[str] | None: ...

    def read(self, url: str, limit: int) -> bytes | None: ...

    def exists(self, url: str) -> bool: ...


class Tree(Struct, frozen=True):
    """A redist tree: where it is (the `redist/` level, ending in /) and how to read it."""

    url: str
    reader: Reader

    @property
    def nvidia(self) -> bool:
        return self.url == redist.NVIDIA_REDIST

    def archive_url(self, release: Release) -> str:
        return release.url(None if self.nvidia else self.url)

    def manifest(self, label: str) -> list[Release] | None:
        """The releases `redistrib_<label>.json` lists, or None when the tree has no such file."""
        url = redist.manifest_url(label, self.url)
        data = self.reader.read(url, MAX_BYTES)
        return None if data is None else parse_redistrib(data, url, label)


class Choice(Struct, frozen=True):
    release: Release
    url: str
    manifests: tuple[str, ...]  # labels of the manifests read on the way
    probes: int  # archives asked for

    def to_dict(self) -> dict:
        return {**self.release.to_dict(), "url": self.url, "manifests_read": list(self.manifests),
                "archives_probed": self.probes}


class Catalog(Struct, frozen=True):
    releases: list[Release]  # newest first
    manifests: tuple[str, ...]
    notes: tuple[str, ...]


def _label_matches(request: VersionRequest, label: str) -> bool:
    """Whether a release labelled X.Y.Z can match the request (9.17.0.29 lives in 9.17.0)."""
    return VersionRequest(request.release[:3]).matches(label)


def _fits(releases: Iterable[Release], platforms: tuple[str, ...], cuda_version: str) -> bool:
    return any(r.platform in platforms and redist.variant_fits(r.cuda_variant, cuda_version)
               for r in installable(releases))


def resolve(request: VersionRequest, tree: Tree, platform: str | Sequence[str],
            cuda_version: str, table: Iterable[Release] | None = None) -> Choice:
    """The archive to install for `request` on this platform (or these, best first) and CUDA:
    UnknownVersion (exit 2), NoVariant (exit 3), ManifestDamaged or NotOnMirror (exit 6)
    otherwise."""
    order = platform_order(platform)
    table = known_releases.releases() if table is None else tuple(table)
    listed = tree.reader.labels(tree.url) or []
    labels = [l for l in listed if _label_matches(request, l)]
    if len(request.release) >= 3:
        named = redist.manifest_label(str(request))
        if named not in labels:
            labels.append(named)
    labels.sort(key=Version, reverse=True)
    published: list[Release] = []
    read: list[str] = []
    for label in labels[:MAX_MANIFESTS]:
        got = tree.manifest(label)
        if got is None:
            continue
        read.append(label)
        published += got
        if _fits((r for r in got if request.matches(r.version)), order, cuda_version):
            break
    releases = merge(table, published)
    if not any(request.matches(r.version) for r in releases):
        # Versions only (a manifest's label, 9.1.0, is not what anything installs): the mirror's
        # releases nearest the request may sit in manifests not read yet, so the few whose
        # labels are nearest are read for their versions.
        versions = {r.version for r in releases}
        for label in nearest_versions(request, set(listed) - set(read)):
            versions |= {r.version for r in tree.manifest(label) or []}
        near = nearest_versions(request, versions)
        raise UnknownVersion(f"no published cuDNN matches {request}",
                             f"nearest versions: {', '.join(near)}" if near else "")
    select(request, releases, order, cuda_version)  # the refusal of a missing variant
    candidates = ranked(request, releases, order, cuda_version)
    vouched = [r for r in candidates if r.source != TABLE]
    if tree.nvidia or vouched:
        best = candidates[0] if tree.nvidia else vouched[0]
        return Choice(best, tree.archive_url(best), tuple(read), 0)
    for probes, release in enumerate(candidates[:MAX_PROBES], 1):
        url = tree.archive_url(release)
        if tree.reader.exists(url):
            return Choice(release, url, tuple(read), probes)
    asked = ", ".join(r.file_name for r in candidates[:3]) + ("…" if len(candidates) > 3 else "")
    raise NotOnMirror(
        f"the mirror {redact(tree.url)} has no archive of cuDNN {request} for {' or '.join(order)} and CUDA "
        f"{cuda_version} (asked for the {min(len(candidates), MAX_PROBES)} newest: {asked})",
        # no example version: one the mirror does not hold would send the user after it
        "ask for a version the mirror holds, all four parts as its archive names them, copy "
        "the archive into cudnn/<platform>/ under NVIDIA's name, or add NVIDIA's "
        "redistrib_<X.Y.Z>.json")


def resolve_name(name: str, tree: Tree, table: Iterable[Release] | None = None) -> Choice | None:
    """A bare NVIDIA archive name (no directory): the release the table or the tree's manifest
    for its version lists under that name, or None when neither knows it."""
    table = known_releases.releases() if table is None else tuple(table)
    published: list[Release] = []
    read: tuple[str, ...] = ()
    m = _NEW_NAME.match(name)
    if m:
        label = redist.manifest_label(m[2])
        published = tree.manifest(label) or []
        read = (label,) if published else ()
    release = next((r for r in merge(table, published) if r.file_name == name), None)
    return None if release is None else Choice(release, tree.archive_url(release), read, 0)


def catalog(tree: Tree, platform: str | Sequence[str],
            table: Iterable[Release] | None = None) -> Catalog:
    """Every release the tree offers for this platform (or these), newest first. For NVIDIA's tree: the
    table, plus the manifests of releases the table does not know yet. For a mirror: what its
    manifests list; the table when it lists none (then whether each archive is on the mirror
    is not asked: that is one request per release)."""
    table = known_releases.releases() if table is None else tuple(table)
    labels = tree.reader.labels(tree.url) or []
    if tree.nvidia:
        known = {redist.manifest_label(r.version) for r in table}
        labels = [l for l in labels if l not in known]
    published: list[Release] = []
    read: list[str] = []
    for label in labels[:MAX_MANIFESTS]:
        listed = tree.manifest(label)
        if listed is not None:
            read.append(label)
            published += listed
    notes: list[str] = []
    if len(labels) > MAX_MANIFESTS:
        notes.append(f"read the newest {MAX_MANIFESTS} of {len(labels)} manifests")
    releases = merge(table, published)
    if not tree.nvidia:
        if published:
            releases = [r for r in releases if r.source != TABLE]
        else:
            notes.append(f"the mirror {redact(tree.url)} lists no redistrib_*.json: these are "
                         "the known table's releases, not checked one by one against the mirror")
    order = platform_order(platform)
    return Catalog([r for r in releases if r.platform in order], tuple(read), tuple(notes))
