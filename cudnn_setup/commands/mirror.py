"""`mirror DIR VERSION…`: build (or bring up to date) a directory in NVIDIA's redist layout, which
`install --mirror` and any static web server serve to a fleet:

    DIR/redistrib_<X.Y.Z>.json        NVIDIA's schema: sha256, md5 and size (as strings)
    DIR/cudnn/<platform>/<archive>    the archives
    DIR/index.html                    links to both (what `--mirror` reads to find manifests)

Each VERSION × `--cuda` × `--platform` is picked from the source (`--from nvidia|pypi|MIRROR`,
NVIDIA's tree by default) as `install` would pick it. Incremental: an archive already there
whose sha256 is the one vouched for is kept (hashed again, not trusted). Resumable: downloads go
to DIR/.incoming/ (resumed there by the Downloader), every file is checked and renamed into its
final name only then, and the manifests and the index are written atomically last: an
interrupted run leaves no half-written file under a final name.

A wheel from a PyPI index is repacked into NVIDIA's layout (archive/repack.py) under a name that
says so (`…-repack.tar.gz`); the manifest marks it (`repacked_from`: the wheel's name and
sha256) and gives the repack's own checksum, which install then shows as the mirror's, never
NVIDIA's.
"""
from __future__ import annotations

import datetime
import fcntl
import html
import json
import os
import shutil
from pathlib import Path

from cudnn_setup import __version__
from cudnn_setup.archive import inspect_archive
from cudnn_setup.archive.repack import repack, repack_name
from cudnn_setup.durable import replace_durably, write_atomic
from cudnn_setup.steps.command_wrapper import command
from cudnn_setup.steps.context import Context, root_if_any, which
from cudnn_setup.steps.by_version import (choose_source, fetcher, host_choice,
                                             machine_wheel_tags)
from cudnn_setup.steps.fetching import parse_headers
from cudnn_setup.digest import file_digest
from cudnn_setup.errors import ArchiveRejected, DownloadFailed, InstallFailed, UsageError
from cudnn_setup.facts.host import wheel_tags_for
from cudnn_setup.fetch import redist
from cudnn_setup.fetch.candidates import parse_request
from cudnn_setup.fetch.redist import NoVariant
from cudnn_setup.fetch.redistrib_json import parse_redistrib
from cudnn_setup.report import Result
from cudnn_setup.sources.base import NVIDIA, PYPI, WHEEL, Offer, Source
from cudnn_setup.text import escape
from cudnn_setup.urls import redact

INCOMING = ".incoming"
COMPONENT = {"name": "NVIDIA CUDA Deep Neural Network library", "license": "cudnn",
             "license_path": "cudnn/LICENSE.txt"}


def _hashes(path: Path) -> tuple[str, str, int]:
    return file_digest(path), file_digest(path, "md5"), path.stat().st_size


def _lock(directory: Path) -> int:
    """An exclusive lock on the mirror directory itself: two builders never interleave."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise InstallFailed(f"another cudnn-setup mirror is building {directory}",
                            "wait for it to finish, then run again", code="lock-held") from None
    return fd


class MirrorDir:
    """The directory being built: its manifests (as JSON documents) and files."""

    def __init__(self, root: Path):
        self.root = root
        self.incoming = root / INCOMING
        self.docs: dict[str, dict] = {}
        self.changed: set[str] = set()

    def manifest(self, label: str) -> dict | None:
        if label in self.docs:
            return self.docs[label]
        path = self.root / f"redistrib_{label}.json"
        if not path.is_file():
            return None
        data = path.read_bytes()
        parse_redistrib(data, path.as_uri(), label)  # a damaged one is refused, not extended
        self.docs[label] = json.loads(data)
        return self.docs[label]

    def entry(self, label: str, platform: str, variant: str) -> dict | None:
        doc = self.manifest(label)
        return (doc or {}).get("cudnn", {}).get(platform, {}).get(variant)

    def record(self, offer: Offer, file_name: str, hashes: tuple[str, str, int],
               repacked_from: dict | None) -> None:
        label = redist.manifest_label(offer.version)
        doc = self.manifest(label)
        if doc is None:
            doc = {"release_date": datetime.date.today().isoformat(), "release_label": label,
                   "release_product": "cudnn", "cudnn": {**COMPONENT, "version": offer.version}}
            self.docs[label] = doc
        component = doc["cudnn"]
        if component.get("version") != offer.version:
            raise UsageError(f"{self.root} holds cuDNN {component.get('version')} under release "
                             f"{label}, not {offer.version}",
                             "one release label holds one version: build another mirror")
        artifact = {"relative_path": redist.mirror_path(offer.platform, file_name),
                    "sha256": hashes[0], "md5": hashes[1], "size": str(hashes[2])}
        if repacked_from:
            artifact["repacked_from"] = repacked_from
        if component.get(offer.platform, {}).get(offer.cuda_variant) == artifact:
            return  # already listed as it is
        component.setdefault(offer.platform, {})[offer.cuda_variant] = artifact
        variants = {redist.parse_variant(v)[0] for k, p in component.items()
                    if isinstance(p, dict) and k not in COMPONENT for v in p}
        component["cuda_variant"] = [str(v) for v in sorted(variants)]
        doc["cudnn_setup"] = {"built_by": f"cudnn-setup {__version__} mirror"}
        self.changed.add(label)

    def write(self) -> list[str]:
        """The changed manifests (each checked by the tool's own parser first), then the
        index page; returns the labels written."""
        for label in sorted(self.changed):
            data = (json.dumps(self.docs[label], indent=4) + "\n").encode()
            parse_redistrib(data, (self.root / f"redistrib_{label}.json").as_uri(), label)
            write_atomic(self.root / f"redistrib_{label}.json", data)
        self._index()
        return sorted(self.changed)

    def _index(self) -> None:
        names = sorted(p.name for p in self.root.glob("redistrib_*.json"))
        archives = sorted(str(p.relative_to(self.root)) for p in self.root.glob("cudnn/*/*")
                          if p.is_file() and not p.name.startswith("."))
        links = "\n".join(f'<a href="{html.escape(n)}">{html.escape(n)}</a><br>'
                          for n in names + archives)
        page = ("<!DOCTYPE html>\n<html><head><title>cuDNN redist mirror</title></head><body>\n"
                "<h1>cuDNN redist mirror</h1>\n<p>NVIDIA's layout, built by cudnn-setup mirror; "
                "archives named …-repack.tar.gz were repacked from NVIDIA's wheels.</p>\n"
                f"{links}\n</body></html>\n")
        write_atomic(self.root / "index.html", page.encode())


def _place(tmp: Path, final: Path) -> None:
    """A checked archive under its final name, whole on disk before a manifest names it."""
    final.parent.mkdir(parents=True, exist_ok=True)
    replace_durably(tmp, final)


def _archive(result: Result, ctx: Context, mirror: MirrorDir, source: Source, offer: Offer,
             headers: list[str] | None) -> dict:
    final = mirror.root / redist.mirror_path(offer.platform, offer.file_name)
    if final.is_file() and file_digest(final) == offer.sha256:
        return {"action": "kept", "hashes": _hashes(final)}
    obtained = source.obtain(offer, fetcher(result, ctx, headers, mirror.incoming, source))
    path = obtained.path
    if not path.is_relative_to(mirror.incoming):  # a file:// source: copied, then checked
        copy = mirror.incoming / (offer.file_name + ".copy")
        copy.unlink(missing_ok=True)
        shutil.copyfile(path, copy)
        path = copy
    hashes = _hashes(path)
    if hashes[0] != offer.sha256:
        path.unlink()
        raise ArchiveRejected(f"checksum mismatch for {escape(offer.file_name)}: expected "
                              f"{offer.sha256} ({offer.checksum_from}), got {hashes[0]}",
                              "the source's file is damaged; nothing was placed",
                              code="checksum-mismatch")
    _place(path, final)
    return {"action": "fetched", "hashes": hashes}


def _repack(result: Result, ctx: Context, mirror: MirrorDir, source: Source, offer: Offer,
            headers: list[str] | None, xz: str | None) -> dict:
    major = redist.parse_variant(offer.cuda_variant)[0]
    name = repack_name(offer.platform, offer.version, major)
    final = mirror.root / redist.mirror_path(offer.platform, name)
    label = redist.manifest_label(offer.version)
    had = mirror.entry(label, offer.platform, offer.cuda_variant)
    if had and had.get("repacked_from", {}).get("sha256") == offer.sha256 and final.is_file() \
            and file_digest(final) == had.get("sha256"):
        return {"action": "kept", "file_name": name, "hashes": _hashes(final),
                "repacked_from": had["repacked_from"]}
    obtained = source.obtain(offer, fetcher(result, ctx, headers, mirror.incoming, source))
    if file_digest(obtained.path) != offer.sha256:  # every byte checked, whatever the cache says
        raise ArchiveRejected(f"checksum mismatch for {escape(offer.file_name)}",
                              "the wheel is damaged; nothing was placed",
                              code="checksum-mismatch")
    part = mirror.incoming / (name + ".part")
    part.unlink(missing_ok=True)
    hashes = repack(obtained.path, part)
    # read back as install would read it: the mirror serves only what installs
    pkg = inspect_archive(part, mirror.incoming, xz=xz, env=ctx.env)
    if not pkg.installable or pkg.sha256 != hashes[0]:
        part.unlink()
        raise ArchiveRejected(f"the repack of {escape(offer.file_name)} does not read back as "
                              "an installable archive", "report this as a bug")
    _place(part, final)
    return {"action": "repacked", "file_name": name, "hashes": hashes,
            "repacked_from": {"wheel": offer.file_name, "sha256": offer.sha256}}


@command("mirror", fails_as=DownloadFailed)
def mirror(result: Result, ctx: Context, directory: Path, versions: list[str], *,
           cudas: list[str] | None = None, platforms: list[str] | None = None,
           from_: str | None = None, index_url: str | None = None,
           headers: list[str] | None = None, cuda_root: Path | None = None) -> None:
    if not versions:
        raise UsageError("give one version or more", "e.g. cudnn-setup mirror DIR 9.28 --cuda 12")
    parse_headers(headers)
    requests = [parse_request(v, prerelease=from_ == PYPI or index_url is not None)
                for v in versions]
    if not cudas:
        root = root_if_any(ctx, cuda_root)
        if root is None or root.major is None:
            raise UsageError("no CUDA version to build the mirror for",
                             "pass --cuda N (repeatable), e.g. --cuda 12 --cuda 13")
        cudas = [str(root.major)]
    for cuda in cudas:
        redist.parse_cuda(cuda)
    # this machine's builds by default: a Jetson's are linux-aarch64 where NVIDIA made one, else
    # linux-sbsa, so its mirror holds both
    platforms = platforms or list(host_choice(ctx).platforms)
    for platform in platforms:
        if platform not in redist.PLATFORMS:
            raise UsageError(f"--platform {platform!r} is not one of NVIDIA's",
                             f"give one of {', '.join(redist.PLATFORMS)}")
    directory.mkdir(parents=True, exist_ok=True)
    lock = _lock(directory)
    try:
        _build(result, ctx, MirrorDir(directory), requests, cudas, platforms, from_, index_url,
               headers)
    finally:
        os.close(lock)


def _build(result: Result, ctx: Context, mirror: MirrorDir, requests, cudas: list[str],
           platforms: list[str], from_: str | None, index_url: str | None,
           headers: list[str] | None) -> None:
    mirror.incoming.mkdir(exist_ok=True)
    placed: list[dict] = []
    skipped: list[dict] = []
    machine_tags = machine_wheel_tags(ctx)
    try:
        for platform in platforms:
            source = choose_source(ctx, from_=from_ or (None if index_url else NVIDIA),
                                   index_url=index_url, headers=headers,
                                   cache_dir=mirror.incoming,
                                   wheel_tags=wheel_tags_for(platform, machine_tags))
            for request in requests:
                for cuda in cudas:
                    try:
                        offer = source.pick(request, platform, cuda)
                    except NoVariant as exc:  # this combination does not exist: said, not fatal
                        skipped.append({"version": str(request), "platform": platform,
                                        "cuda": cuda, "why": exc.message})
                        result.lines.append(f"skipped   {platform} CUDA {cuda}: {exc.message}")
                        continue
                    if offer.format == WHEEL:
                        done = _repack(result, ctx, mirror, source, offer, headers,
                                       which(ctx, "xz"))
                    else:
                        done = _archive(result, ctx, mirror, source, offer, headers)
                        done["file_name"] = offer.file_name
                        done["repacked_from"] = offer.repacked_from
                    mirror.record(offer, done["file_name"], done["hashes"], done["repacked_from"])
                    sha, _, size = done["hashes"]
                    placed.append({"version": offer.version, "platform": platform,
                                   "cuda_variant": offer.cuda_variant,
                                   "file_name": done["file_name"], "sha256": sha, "size": size,
                                   "action": done["action"], "from": redact(offer.url),
                                   "checksum_from": offer.checksum_from,
                                   "repacked_from": done["repacked_from"]})
                    result.lines.append(
                        f"{done['action']:<9} {platform}/{done['file_name']} (cuDNN "
                        f"{offer.version}, {offer.cuda_variant})" + (
                            f" from {offer.file_name}" if done["action"] == "repacked" else ""))
    finally:
        # what was placed is listed in the manifests even when a later release failed
        written = mirror.write() if mirror.changed or not (mirror.root / "index.html").exists() \
            else []
        result.add("mirror", {"dir": str(mirror.root), "url": mirror.root.as_uri() + "/",
                              "releases": placed, "skipped": skipped,
                              "manifests_written": written})
        result.changed = bool(written) or any(p["action"] != "kept" for p in placed)
    for request in requests:
        if not any(request.matches(p["version"]) for p in placed):
            why = next(s["why"] for s in skipped if s["version"] == str(request))
            raise NoVariant(f"no build of cuDNN {request} for any CUDA and platform asked for: "
                            f"{why}", "ask for another --cuda or --platform")
    result.lines.append(f"mirror {mirror.root}: {len(placed)} archive(s), "
                        f"{len(written)} manifest(s) written; serve it and install with "
                        f"--mirror {mirror.root.as_uri()}/")
