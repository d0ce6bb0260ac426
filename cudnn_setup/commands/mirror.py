"""`mirror DIR VERSION…`: build (or bring up to date) a directory in NVIDIA's redist layout, which
`install --mirror` and any static web server serve to a fleet:

    DIR/redistrib_<X.Y.Z>.json        NVIDIA's schema: sha256, md5 and size (as strings)
    DIR/cudnn/<platform>/<archive>    the archives
    DIR/index.html                    links to both (what `--mirror` reads to find manifests)

Each VERSION × `--cuda` × `--platform` is picked from the source (`--from nvidia|pypi|MIRROR`,
NVIDIA's tree by default) as `install` would pick it. Incremental: an archive already there
whose sha256 is the one vouched for is kept (hashed again, not trusted). Downloads go to the
tool's download cache (reused there when their checksum is known, resumed there when cut
short); each is copied or repacked into a work file in DIR/.incoming/, checked, and renamed into
its final name only then, and the manifests and the index are written atomically last: an
interrupted run leaves no half-written file under a final name. A release the manifest could
not list (a pre-release or local version) is refused before anything is fetched. DIR is written
only through descriptors of its own directories (fetch/mirror_tree.py): a link planted there is
refused, and modes are 0755/0644 whatever the umask.

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
import shutil
from pathlib import Path

from cudnn_setup import __version__
from cudnn_setup.archive import inspect_archive
from cudnn_setup.archive.repack import repack, repack_name
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
from cudnn_setup.fetch.mirror_tree import INCOMING, MirrorTree, TooLarge
from cudnn_setup.fetch.redist import ManifestDamaged, NoVariant
from cudnn_setup.fetch.redistrib_json import ARTIFACT_KEYS, MAX_BYTES, parse_redistrib
from cudnn_setup.report import Result
from cudnn_setup.sources.base import NVIDIA, PYPI, WHEEL, Offer, Source
from cudnn_setup.text import escape, show_path
from cudnn_setup.urls import redact

COMPONENT = {"name": "NVIDIA CUDA Deep Neural Network library", "license": "cudnn",
             "license_path": "cudnn/LICENSE.txt"}
_PLACEHOLDER = ("0" * 64, "0" * 32, 1)  # hashes that make a manifest entry whole, to try it


def _hashes(path: Path) -> tuple[str, str, int]:
    return file_digest(path), file_digest(path, "md5"), path.stat().st_size


def _lock(tree: MirrorTree) -> None:
    """An exclusive lock on the mirror directory itself: two builders never interleave."""
    try:
        fcntl.flock(tree.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise InstallFailed(f"another cudnn-setup mirror is building {show_path(tree.root)}",
                            "wait for it to finish, then run again", code="lock-held") from None


def _variants(platform: dict) -> dict:
    """A platform's archives per CUDA variant. NVIDIA also writes a platform as one archive
    ("direct": 8.x's manifests) or as both at once (9.27.0's windows-arm64): those keys are the
    direct archive's, not variants."""
    return {k: v for k, v in platform.items() if k not in ARTIFACT_KEYS}


class MirrorDir:
    """The directory being built: its manifests (as JSON documents) and files."""

    def __init__(self, tree: MirrorTree):
        self.tree = tree
        self.root = tree.root
        self.docs: dict[str, dict] = {}
        self.changed: set[str] = set()

    def manifest(self, label: str) -> dict | None:
        if label in self.docs:
            return self.docs[label]
        name = f"redistrib_{label}.json"
        uri = (self.root / name).as_uri()
        try:  # its size from its stat first: a sparse 2 GiB file is never read
            data = self.tree.read(name, MAX_BYTES)
        except TooLarge as exc:
            raise ManifestDamaged(f"{name} in {show_path(self.root)}: {exc.size} bytes, more "
                                  f"than a manifest holds ({MAX_BYTES}); it was not read",
                                  "move it aside, or build the mirror in another directory"
                                  ) from None
        if data is None:
            return None
        parse_redistrib(data, uri, label)  # a damaged one is refused, not extended
        self.docs[label] = json.loads(data)
        return self.docs[label]

    def entry(self, label: str, platform: str, variant: str) -> dict | None:
        doc = self.manifest(label) or {}
        component = doc.get("cudnn")
        entry = component.get(platform) if isinstance(component, dict) else None
        if not isinstance(entry, dict):
            return None
        got = _variants(entry).get(variant)
        return got if isinstance(got, dict) else None

    def _with(self, doc: dict | None, offer: Offer, file_name: str,
              hashes: tuple[str, str, int], repacked_from: dict | None) -> tuple[dict, bool]:
        """A copy of `doc` (a new one when None) listing the archive; whether that changed it."""
        label = redist.manifest_label(offer.version)
        doc = json.loads(json.dumps(doc)) if doc is not None else {
            "release_date": datetime.date.today().isoformat(), "release_label": label,
            "release_product": "cudnn", "cudnn": {**COMPONENT, "version": offer.version}}
        component = doc["cudnn"]
        if component.get("version") != offer.version:
            raise UsageError(f"{show_path(self.root)} holds cuDNN "
                             f"{escape(str(component.get('version'))[:40])} under release "
                             f"{label}, not {escape(offer.version)}",
                             "one release label holds one version: build another mirror")
        artifact: dict = {"relative_path": redist.mirror_path(offer.platform, file_name),
                    "sha256": hashes[0], "md5": hashes[1], "size": str(hashes[2])}
        if repacked_from:
            artifact["repacked_from"] = repacked_from
        if component.get(offer.platform, {}).get(offer.cuda_variant) == artifact:
            return doc, False  # already listed as it is
        component.setdefault(offer.platform, {})[offer.cuda_variant] = artifact
        variants = {redist.parse_variant(v)[0] for k, p in component.items()
                    if isinstance(p, dict) and k not in COMPONENT for v in _variants(p)}
        component["cuda_variant"] = [str(v) for v in sorted(variants)]
        doc["cudnn_setup"] = {"built_by": f"cudnn-setup {__version__} mirror"}
        return doc, True

    def check_listable(self, offer: Offer, file_name: str, repacked_from: dict | None) -> None:
        """Refuse, before a byte is fetched or placed, a release the manifest could not list
        (a pre-release or local version has no X.Y.Z.B; a direct-form platform): a mirror never
        leaves an archive under a final name that its manifest does not list."""
        def refused(why: str) -> ArchiveRejected:
            return ArchiveRejected(
                f"cuDNN {escape(offer.version)} ({escape(offer.file_name)}) cannot be listed in "
                f"a redistrib manifest ({why}); nothing was fetched or placed",
                "mirror a final release: NVIDIA's manifest schema has no place for pre-release "
                "or local versions", code="not-mirrorable")

        try:
            label = redist.manifest_label(offer.version)
        except ValueError as exc:
            raise refused(escape(str(exc)[:200])) from None
        existing = self.manifest(label)  # one already there and damaged: said as such
        try:
            doc, _ = self._with(existing, offer, file_name, _PLACEHOLDER, repacked_from)
            parse_redistrib((json.dumps(doc) + "\n").encode(),
                            (self.root / f"redistrib_{label}.json").as_uri(), label)
        except ManifestDamaged as exc:
            raise refused(exc.message.partition(": ")[2][:200]) from None

    def record(self, offer: Offer, file_name: str, hashes: tuple[str, str, int],
               repacked_from: dict | None) -> None:
        label = redist.manifest_label(offer.version)
        doc, changed = self._with(self.manifest(label), offer, file_name, hashes, repacked_from)
        self.docs[label] = doc
        if changed:
            self.changed.add(label)

    def write(self) -> list[str]:
        """The changed manifests (each checked by the tool's own parser first), then the
        index page; returns the labels written."""
        for label in sorted(self.changed):
            data = (json.dumps(self.docs[label], indent=4) + "\n").encode()
            parse_redistrib(data, (self.root / f"redistrib_{label}.json").as_uri(), label)
            self.tree.write(f"redistrib_{label}.json", data)
        self._index()
        return sorted(self.changed)

    def _index(self) -> None:
        names = [n for n in self.tree.names("") if n.startswith("redistrib_")
                 and n.endswith(".json")]
        archives = []
        if "cudnn" in self.tree.subdirs(""):
            for platform in self.tree.subdirs("cudnn"):
                archives += [f"cudnn/{platform}/{n}" for n in self.tree.names(f"cudnn/{platform}")
                             if not n.startswith(".")]
        links = "\n".join(f'<a href="{html.escape(n)}">{html.escape(n)}</a><br>'
                          for n in names + sorted(archives))
        page = ("<!DOCTYPE html>\n<html><head><title>cuDNN redist mirror</title></head><body>\n"
                "<h1>cuDNN redist mirror</h1>\n<p>NVIDIA's layout, built by cudnn-setup mirror; "
                "archives named …-repack.tar.gz were repacked from NVIDIA's wheels.</p>\n"
                f"{links}\n</body></html>\n")
        self.tree.write("index.html", page.encode())

    def kept(self, rel: str, sha256: str | None) -> tuple[str, str, int] | None:
        """The hashes of DIR/rel when it is a regular file whose sha256 is `sha256`."""
        if sha256 is None or self.tree.regular_size(rel) is None:
            return None
        path = self.tree.fd_path(rel)
        return _hashes(path) if file_digest(path) == sha256 else None


def _archive(result: Result, ctx: Context, mirror: MirrorDir, source: Source, offer: Offer,
             headers: list[str] | None) -> dict:
    rel = redist.mirror_path(offer.platform, offer.file_name)
    mirror.check_listable(offer, offer.file_name, offer.repacked_from)
    kept = mirror.kept(rel, offer.sha256)
    if kept is not None:
        return {"action": "kept", "hashes": kept}
    # fetched into the tool's download cache (reused there when its checksum is known), then
    # copied into the mirror's own work file and checked there
    obtained = source.obtain(offer, fetcher(result, ctx, headers, None, source))
    copy = mirror.tree.work_file(offer.file_name)
    shutil.copyfile(obtained.path, copy)
    hashes = _hashes(copy)
    if hashes[0] != offer.sha256:
        raise ArchiveRejected(f"checksum mismatch for {escape(offer.file_name)}: expected "
                              f"{offer.sha256} ({offer.checksum_from}), got {hashes[0]}",
                              "the source's file is damaged; nothing was placed",
                              code="checksum-mismatch")
    mirror.tree.place(copy, rel)
    return {"action": "fetched", "hashes": hashes}


def _repack(result: Result, ctx: Context, mirror: MirrorDir, source: Source, offer: Offer,
            headers: list[str] | None, xz: str | None) -> dict:
    major = redist.parse_variant(offer.cuda_variant)[0]
    repacked_from = {"wheel": offer.file_name, "sha256": offer.sha256}
    name = repack_name(offer.platform, offer.version, major)
    mirror.check_listable(offer, name, repacked_from)
    rel = redist.mirror_path(offer.platform, name)
    label = redist.manifest_label(offer.version)
    had = mirror.entry(label, offer.platform, offer.cuda_variant)
    if had and isinstance(had.get("repacked_from"), dict) \
            and had["repacked_from"].get("sha256") == offer.sha256:
        kept = mirror.kept(rel, had.get("sha256"))
        if kept is not None:
            return {"action": "kept", "file_name": name, "hashes": kept,
                    "repacked_from": had["repacked_from"]}
    obtained = source.obtain(offer, fetcher(result, ctx, headers, None, source))
    if file_digest(obtained.path) != offer.sha256:  # every byte checked, whatever the cache says
        raise ArchiveRejected(f"checksum mismatch for {escape(offer.file_name)}",
                              "the wheel is damaged; nothing was placed",
                              code="checksum-mismatch")
    part = mirror.tree.work_file(name + ".part", create=False)  # repack creates it exclusively
    hashes = repack(obtained.path, part)
    # read back as install would read it: the mirror serves only what installs
    staging = mirror.tree.fd_path(INCOMING + "/x").parent
    pkg = inspect_archive(part, staging, xz=xz, env=ctx.env)
    if not pkg.installable or pkg.sha256 != hashes[0]:
        raise ArchiveRejected(f"the repack of {escape(offer.file_name)} does not read back as "
                              "an installable archive", "report this as a bug")
    mirror.tree.place(part, rel)
    return {"action": "repacked", "file_name": name, "hashes": hashes,
            "repacked_from": repacked_from}


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
    tree = MirrorTree(directory)
    try:
        _lock(tree)
        tree.sweep()
        _build(result, ctx, MirrorDir(tree), requests, cudas, platforms, from_, index_url,
               headers)
    finally:
        tree.close()


def _build(result: Result, ctx: Context, mirror: MirrorDir, requests, cudas: list[str],
           platforms: list[str], from_: str | None, index_url: str | None,
           headers: list[str] | None) -> None:
    placed: list[dict] = []
    skipped: list[dict] = []
    machine_tags = machine_wheel_tags(ctx)
    try:
        for platform in platforms:
            source = choose_source(ctx, from_=from_ or (None if index_url else NVIDIA),
                                   index_url=index_url, headers=headers,
                                   cache_dir=None,
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
        fresh = mirror.tree.regular_size("index.html") is None
        written = mirror.write() if mirror.changed or fresh else []
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
