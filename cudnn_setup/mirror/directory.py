"""The mirror directory being built: its manifests as typed records (mirror/manifest.py), the
archives already there, and the index page, all read and written through fetch/mirror_tree.py.
"""
from __future__ import annotations

import datetime
import html

from cudnn_setup.digest import file_digest
from cudnn_setup.errors import ArchiveRejected
from cudnn_setup.fetch import redist
from cudnn_setup.fetch.mirror_tree import MirrorTree, TooLarge
from cudnn_setup.fetch.redist import ManifestDamaged
from cudnn_setup.fetch.redistrib_json import MAX_BYTES, parse_redistrib
from cudnn_setup.mirror.manifest import Artifact, Document, RepackedFrom, listing
from cudnn_setup.sources.base import Offer
from cudnn_setup.text import escape, show_path

_PLACEHOLDER = ("0" * 64, "0" * 32, 1)  # hashes that make a manifest entry whole, to try it


def hashes_of(tree: MirrorTree, rel: str) -> Artifact:
    """sha256, md5 and size of DIR/rel, as the manifest lists them under `rel`."""
    path = tree.fd_path(rel)
    return Artifact(rel, file_digest(path), file_digest(path, "md5"), path.stat().st_size)


class MirrorDir:
    """DIR's manifests, read once each and kept as Documents, and which of them changed."""

    def __init__(self, tree: MirrorTree):
        self.tree = tree
        self.root = tree.root
        self.docs: dict[str, Document | None] = {}
        self.changed: set[str] = set()

    def _uri(self, label: str) -> str:
        return (self.root / f"redistrib_{label}.json").as_uri()

    def manifest(self, label: str) -> Document | None:
        if label in self.docs:
            return self.docs[label]
        name = f"redistrib_{label}.json"
        try:  # its size from its stat first: a sparse 2 GiB file is never read
            data = self.tree.read(name, MAX_BYTES)
        except TooLarge as exc:
            raise ManifestDamaged(f"{name} in {show_path(self.root)}: {exc.size} bytes, more "
                                  f"than a manifest holds ({MAX_BYTES}); it was not read",
                                  "move it aside, or build the mirror in another directory"
                                  ) from None
        self.docs[label] = None if data is None else Document.load(data, self._uri(label), label)
        return self.docs[label]

    def entry(self, offer: Offer) -> Artifact | None:
        doc = self.manifest(redist.manifest_label(offer.version))
        return doc.cudnn.artifact(offer.platform, offer.cuda_variant) if doc else None

    def check_listable(self, offer: Offer, file_name: str,
                       repacked_from: RepackedFrom | None) -> None:
        """Refuse, before a byte is fetched or placed, a release the manifest could not list
        (a pre-release or local version has no X.Y.Z.B): a mirror never leaves an archive
        under a final name that its manifest does not list."""
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
        sha, md5, size = _PLACEHOLDER
        trial = Artifact(redist.mirror_path(offer.platform, file_name), sha, md5, size,
                         repacked_from)
        try:
            doc, _ = listing(existing, offer.version, offer.platform, offer.cuda_variant, trial,
                             datetime.date.today().isoformat())
            parse_redistrib(doc.to_bytes(), self._uri(label), label)
        except ManifestDamaged as exc:
            raise refused(exc.message.partition(": ")[2][:200]) from None

    def record(self, offer: Offer, artifact: Artifact) -> None:
        label = redist.manifest_label(offer.version)
        doc, changed = listing(self.manifest(label), offer.version, offer.platform,
                               offer.cuda_variant, artifact, datetime.date.today().isoformat())
        self.docs[label] = doc
        if changed:
            self.changed.add(label)

    def write(self) -> list[str]:
        """The changed manifests (each checked by the tool's own parser first), then the
        index page; returns the labels written."""
        for label in sorted(self.changed):
            doc = self.docs[label]
            assert doc is not None  # a changed label has its document
            data = doc.to_bytes()
            parse_redistrib(data, self._uri(label), label)
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

    def kept(self, rel: str, sha256: str | None) -> Artifact | None:
        """DIR/rel's listing when it is a regular file whose sha256 is `sha256`."""
        if sha256 is None or self.tree.regular_size(rel) is None:
            return None
        got = hashes_of(self.tree, rel)
        return got if got.sha256 == sha256 else None
