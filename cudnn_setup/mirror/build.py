"""Building a mirror: each version × CUDA × platform picked from its source, fetched through the
tool's download cache, checked, copied or repacked into DIR/.incoming/ and renamed into place,
then the manifests and the index page written last (mirror/directory.py).

The command (commands/mirror.py) chooses the sources and hands them in with the one Fetch each
uses (one HTTP client and one waiting budget for the whole command); the engine never sees the
command line or the environment beyond what `MirrorRequest` holds.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable, Mapping

from msgspec import Struct, field

from cudnn_setup.archive import inspect_archive
from cudnn_setup.archive.repack import repack, repack_name
from cudnn_setup.digest import file_digest
from cudnn_setup.errors import ArchiveRejected
from cudnn_setup.fetch import redist
from cudnn_setup.fetch.candidates import VersionRequest
from cudnn_setup.fetch.checksums import Expected, mismatch
from cudnn_setup.fetch.mirror_tree import INCOMING, MirrorTree
from cudnn_setup.fetch.redist import NoVariant
from cudnn_setup.mirror.directory import MirrorDir, hashes_of
from cudnn_setup.mirror.manifest import Artifact, RepackedFrom
from cudnn_setup.sources.base import WHEEL, Fetch, Offer, Source
from cudnn_setup.state.layout import DEFAULT_LOCK_TIMEOUT
from cudnn_setup.text import escape, plural, show_path
from cudnn_setup.urls import redact


class PlatformSource(Struct, frozen=True):
    """Where one platform's builds come from, and how that source fetches."""

    platform: str
    source: Source
    fetch: Fetch


class MirrorRequest(Struct, frozen=True):
    directory: Path
    versions: tuple[VersionRequest, ...]
    cudas: tuple[str, ...]
    platforms: tuple[PlatformSource, ...]
    xz: str | None  # the xz program that reads a repack back, where there is one
    env: Mapping[str, str]
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT


class Placed(Struct, frozen=True):
    """One archive the mirror holds after the run, and what the run did for it."""

    offer: Offer
    action: str  # kept | fetched | repacked
    file_name: str
    artifact: Artifact

    def to_dict(self) -> dict:
        repacked = self.artifact.repacked_from
        return {"version": self.offer.version, "platform": self.offer.platform,
                "cuda_variant": self.offer.cuda_variant, "file_name": self.file_name,
                "sha256": self.artifact.sha256, "size": self.artifact.size,
                "action": self.action, "from": redact(self.offer.url),
                "checksum_from": self.offer.checksum_from,
                "repacked_from": repacked.to_dict() if repacked else None}

    def line(self) -> str:
        return (f"{self.action:<9} {self.offer.platform}/{self.file_name} (cuDNN "
                f"{self.offer.version}, {self.offer.cuda_variant})"
                + (f" from {self.offer.file_name}" if self.action == "repacked" else ""))


class Built(Struct):
    """What a run did, filled as it goes: the command reports it even when the run failed."""

    directory: Path
    started: bool = False  # DIR's lock was got: the run began
    placed: list[Placed] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)
    written: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.written) or any(p.action != "kept" for p in self.placed)

    def to_dict(self) -> dict:
        return {"dir": str(self.directory), "url": self.directory.as_uri() + "/",
                "releases": [p.to_dict() for p in self.placed], "skipped": self.skipped,
                "manifests_written": self.written}


def build(request: MirrorRequest, built: Built,
          on_status: Callable[[str], None] | None = None) -> None:
    """Bring DIR up to date with every version × CUDA × platform asked for, under DIR's lock
    (waited for as a root's is); `built` hears what was done."""
    tree = MirrorTree(request.directory)
    try:
        with tree.locked(request.lock_timeout, on_status):
            built.started = True
            tree.sweep()
            _build(request, MirrorDir(tree), built, on_status or _silent)
    finally:
        tree.close()


def _silent(line: str) -> None:
    pass


def _build(request: MirrorRequest, mirror: MirrorDir, built: Built,
           say: Callable[[str], None]) -> None:
    try:
        for where in request.platforms:
            for version in request.versions:
                for cuda in request.cudas:
                    say(f"asking {where.source.where} for cuDNN {version} (CUDA {cuda}, "
                        f"{where.platform})")
                    try:
                        offer = where.source.pick(version, where.platform, cuda)
                    except NoVariant as exc:  # this combination does not exist: said, not fatal
                        built.skipped.append({"version": str(version), "platform": where.platform,
                                              "cuda": cuda, "why": exc.message})
                        built.lines.append(f"skipped   {where.platform} CUDA {cuda}: "
                                           f"{exc.message}")
                        continue
                    placed = (_repack(request, mirror, where, offer, say)
                              if offer.format == WHEEL else _archive(mirror, where, offer, say))
                    mirror.record(offer, placed.artifact)
                    built.placed.append(placed)
                    built.lines.append(placed.line())
    finally:
        # what was placed is listed in the manifests even when a later release failed
        fresh = mirror.tree.regular_size("index.html") is None
        if mirror.changed or fresh:
            say(f"writing the mirror's manifests and index in {show_path(mirror.root)}")
        built.written = mirror.write() if mirror.changed or fresh else []
    for version in request.versions:
        if not any(version.matches(p.offer.version) for p in built.placed):
            why = next(s["why"] for s in built.skipped if s["version"] == str(version))
            raise NoVariant(f"no build of cuDNN {version} for any CUDA and platform asked for: "
                            f"{why}", "ask for another --cuda or --platform")
    built.lines.append(f"mirror {show_path(mirror.root)}: {plural(len(built.placed), 'archive')}, "
                       f"{plural(len(built.written), 'manifest')} written; serve it and install "
                       f"with --mirror {mirror.root.as_uri()}/")


_NOT_PLACED = "nothing was placed in the mirror"


def _expected(offer: Offer) -> Expected:
    return Expected("sha256", offer.sha256 or "", offer.checksum_from or "the source's listing")


def _archive(mirror: MirrorDir, where: PlatformSource, offer: Offer,
             say: Callable[[str], None]) -> Placed:
    rel = redist.mirror_path(offer.platform, offer.file_name)
    given = offer.repacked_from  # a repack this source's own manifest marks as one
    repacked = RepackedFrom(given["wheel"], given["sha256"]) if given else None
    mirror.check_listable(offer, offer.file_name, repacked)
    say(f"checking the mirror's copy of {escape(offer.file_name)}, if it has one")
    kept = mirror.kept(rel, offer.sha256)
    if kept is not None:
        return Placed(offer, "kept", offer.file_name, _marked(kept, repacked))
    # fetched into the tool's download cache (reused there when its checksum is known), then
    # copied into the mirror's own work file and checked there
    obtained = where.source.obtain(offer, where.fetch)
    say(f"copying {escape(offer.file_name)} into the mirror and checking the copy's sha256")
    copy = mirror.tree.work_file(offer.file_name)
    shutil.copyfile(obtained.path, copy)
    got = hashes_of(mirror.tree, f"{INCOMING}/{copy.name}")
    if got.sha256 != offer.sha256:
        raise mismatch(escape(offer.file_name), _expected(offer), got.sha256, _NOT_PLACED)
    mirror.tree.place(copy, rel)
    return Placed(offer, "fetched", offer.file_name, _marked(got, repacked, rel))


def _marked(artifact: Artifact, repacked: RepackedFrom | None, rel: str | None = None) -> Artifact:
    return Artifact(rel or artifact.relative_path, artifact.sha256, artifact.md5, artifact.size,
                    repacked)


def _repack(request: MirrorRequest, mirror: MirrorDir, where: PlatformSource,
            offer: Offer, say: Callable[[str], None]) -> Placed:
    major = redist.parse_variant(offer.cuda_variant)[0]
    repacked = RepackedFrom(offer.file_name, offer.sha256 or "")
    name = repack_name(offer.platform, offer.version, major)
    mirror.check_listable(offer, name, repacked)
    rel = redist.mirror_path(offer.platform, name)
    had = mirror.entry(offer)
    if had and had.repacked_from is not None and had.repacked_from.sha256 == offer.sha256:
        say(f"checking the mirror's repack {name}")
        kept = mirror.kept(rel, had.sha256)
        if kept is not None:
            return Placed(offer, "kept", name, _marked(kept, had.repacked_from))
    obtained = where.source.obtain(offer, where.fetch)
    say(f"checking the sha256 of {escape(offer.file_name)}")
    got = file_digest(obtained.path)
    if got != offer.sha256:  # every byte checked, whatever the cache says
        raise mismatch(escape(offer.file_name), _expected(offer), got, _NOT_PLACED)
    part = mirror.tree.work_file(name + ".part", create=False)  # repack creates it exclusively
    say(f"repacking {escape(offer.file_name)} as {name}")
    sha, md5, size = repack(obtained.path, part)
    # read back as install would read it: the mirror serves only what installs
    staging = mirror.tree.fd_path(INCOMING + "/x").parent
    say(f"reading {name} back as install reads it")
    pkg = inspect_archive(part, staging, xz=request.xz, env=request.env)
    if not pkg.installable or pkg.sha256 != sha:
        raise ArchiveRejected(f"the repack of {escape(offer.file_name)} does not read back as "
                              "an installable archive", "report this as a bug")
    mirror.tree.place(part, rel)
    return Placed(offer, "repacked", name, Artifact(rel, sha, md5, size, repacked))
