"""A redist tree in NVIDIA's layout (`redistrib_<X.Y.Z>.json`, `cudnn/<platform>/<archive>`):
what NVIDIA's tree (sources/nvidia.py) and a mirror of it (sources/mirror.py) share.

The answers come from fetch/resolve.py (the known table and the tree's manifests, checked
against each other) and fetch/redist.py (NVIDIA's naming rules); this class turns them into
offers and obtains the chosen archive.
"""
from __future__ import annotations

from typing import Sequence

from cudnn_setup.errors import ArchiveRejected
from cudnn_setup.fetch import known_releases, redist
from cudnn_setup.fetch.redist import local_path
from cudnn_setup.fetch.candidates import Release, VersionRequest
from cudnn_setup.fetch.checksums import Expected, mismatch
from cudnn_setup.fetch.downloader import size_mismatch
from cudnn_setup.fetch.resolve import TABLE, Choice, Tree, catalog, resolve, resolve_name
from cudnn_setup.sources.base import (ARCHIVE, Catalog, Fetch, Obtained, Offer, Provenance,
                                      Source)
from cudnn_setup.text import hide_userinfo, show_path
from cudnn_setup.untrusted import NotRegular, regular_size
from cudnn_setup.urls import redact


def vouched_by(release: Release) -> str:
    """Who vouches for a release's sha256, in words (a repack's is its mirror's, not NVIDIA's)."""
    if release.source == TABLE:
        return f"known releases table: {known_releases.provenance_line(release.file_name)}"
    if release.repacked_from:
        return (f"{release.source}, for an archive repacked from {release.repacked_from[0]}: "
                "the mirror's checksum, not NVIDIA's")
    return release.source


def offer_of(release: Release, url: str, details: dict | None = None) -> Offer:
    return Offer(version=release.version, cuda_variant=release.cuda_variant,
                 platform=release.platform, file_name=release.file_name, url=url,
                 sha256=release.sha256, checksum_from=vouched_by(release), format=ARCHIVE,
                 size=release.size, md5=release.md5,
                 repacked_from={"wheel": release.repacked_from[0],
                                "sha256": release.repacked_from[1]}
                 if release.repacked_from else None,
                 details={"relative_path": release.relative_path, "source": release.source,
                          "flavour": release.flavour, "provenance": list(release.provenance),
                          **(details or {})})


class RedistTree(Source):
    def __init__(self, tree: Tree):
        self.tree = tree

    @property
    def where(self) -> str:
        # a directory with a user:password@ part in a name is shown as a path without it: in
        # its file:// URL the part is percent-encoded, out of redact's sight
        path = local_path(self.tree.url)
        if path is not None and hide_userinfo(str(path)) != str(path):
            return show_path(path)
        return redact(self.tree.url)

    def _offer(self, choice: Choice) -> Offer:
        return offer_of(choice.release, choice.url,
                        {"manifests_read": list(choice.manifests),
                         "archives_probed": choice.probes})

    def releases(self, platform: str | Sequence[str], cuda_version: str | None) -> Catalog:
        """Every release for `platform`, or for each of several (a Jetson's, best first)."""
        found = catalog(self.tree, platform)
        offers = [offer_of(r, self.tree.archive_url(r)) for r in found.releases
                  if cuda_version is None or redist.variant_fits(r.cuda_variant, cuda_version)]
        return Catalog(offers, found.notes, found.manifests)

    def pick(self, request: VersionRequest, platform: str | Sequence[str],
             cuda_version: str) -> Offer:
        """The archive for `request`; several platforms are tried best first, per release."""
        return self._offer(resolve(request, self.tree, platform, cuda_version))

    def by_name(self, name: str) -> Offer | None:
        """A bare NVIDIA archive name: the release the table or the tree's manifest lists."""
        choice = resolve_name(name, self.tree)
        return None if choice is None else self._offer(choice)

    def obtain(self, offer: Offer, fetch: Fetch, sha256: str | None = None) -> Obtained:
        expected = Expected("sha256", offer.sha256, offer.checksum_from, size=offer.size)
        if sha256 is not None and sha256.lower() != offer.sha256:
            raise mismatch(offer.file_name, Expected("sha256", sha256.lower(), "--sha256"),
                           f"{offer.sha256} as published ({offer.checksum_from})")
        provenance = Provenance(self.kind, redact(offer.url), offer.checksum_from, offer.sha256,
                                ARCHIVE, offer.repacked_from)
        local = redist.local_path(offer.url)
        if local is not None:
            _check_local(local, expected)
            return Obtained(local, expected, provenance)  # checked as it is read
        fetched = fetch(offer.url, expected)
        return Obtained(fetched.path, expected, provenance, fetched)


def _check_local(path, expected: Expected) -> None:
    """An archive in a file:// mirror: a regular file (a FIFO there would hold the reader
    forever), of the size its manifest gives, judged from its stat before a byte is read."""
    try:
        size = regular_size(path)
    except NotRegular as exc:
        raise ArchiveRejected(f"{show_path(path)} in the mirror is {exc.what}, not an "
                              "archive; not opened", "a mirror holds plain files",
                              code="archive-unreadable") from None
    except FileNotFoundError:
        return  # the reader says so, as for any archive path
    if expected.size and size != expected.size:
        raise size_mismatch(path.name, expected, size, "in the mirror")
