"""What every source of cuDNN answers: which releases it holds (`releases`), which one a version
request means (`pick`), and that release's bytes with the checksum it vouches for (`obtain`).

A source never prints or reads the environment: the command hands it a `Fetch` (the
Downloader, with the caller's cache, headers, credentials and progress) and renders what comes
back. `Provenance` says where the bytes came from and who vouched for their checksum; it goes
into the manifest and into `--json`.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable

from msgspec import Struct, field

from cudnn_setup.fetch.candidates import VersionRequest, newest_first
from cudnn_setup.fetch.checksums import Expected

if TYPE_CHECKING:  # the download stack (requests) only for a source that downloads
    from cudnn_setup.fetch.downloader import Fetched

NVIDIA, MIRROR, PYPI, PATH, URL = "nvidia", "mirror", "pypi", "path", "url"
KINDS = (NVIDIA, MIRROR, PYPI, PATH, URL)
ARCHIVE, WHEEL = "archive", "wheel"

# Download `url` into the cache, checked against `expected` as it arrives.
Fetch = Callable[[str, "Expected | None"], "Fetched"]


class Offer(Struct, frozen=True):
    """One release a source holds, in one build."""

    version: str  # as the source names it: 9.17.0.29, 9.28.0.42rc1
    cuda_variant: str  # cuda12, cuda11.8
    platform: str  # NVIDIA's key: linux-x86_64
    file_name: str
    url: str  # where the bytes are (http(s) or file://), credentials possibly inside
    sha256: str | None  # what the source vouches for; None: it publishes none
    checksum_from: str | None  # who vouches: "known releases table: …", "the index …"
    format: str = ARCHIVE  # archive | wheel
    size: int | None = None
    md5: str | None = None
    prerelease: bool = False
    repacked_from: dict | None = None  # {"wheel", "sha256"} of an archive repacked from a wheel
    details: dict = field(default_factory=dict)  # the source's own facts, for --json

    def to_dict(self, shown_url: str) -> dict:
        return {"version": self.version, "cuda_variant": self.cuda_variant,
                "platform": self.platform, "file_name": self.file_name, "url": shown_url,
                "sha256": self.sha256, "md5": self.md5, "size": self.size,
                "source": self.checksum_from, "format": self.format,
                "prerelease": self.prerelease, "repacked_from": self.repacked_from,
                **self.details}


class Provenance(Struct, frozen=True):
    """Where an installed archive's bytes came from and who vouched for their checksum."""

    source: str  # one of KINDS
    location: str  # the URL (without credentials) or path the bytes were read from
    checksum_from: str | None  # None: nothing vouched for them
    sha256: str | None  # what was vouched for (the bytes matched it)
    format: str = ARCHIVE
    repacked_from: dict | None = None

    def to_dict(self) -> dict:
        return {"source": self.source, "location": self.location,
                "checksum_from": self.checksum_from, "sha256": self.sha256,
                "format": self.format, "repacked_from": self.repacked_from}


class Obtained(Struct, frozen=True):
    """A local file to install, the checksum it must have as it is read, and its provenance."""

    path: Path
    expected: Expected | None
    provenance: Provenance
    fetched: Fetched | None = None  # when it was downloaded


class Catalog(Struct, frozen=True):
    """What a source offers, newest first, and what to say about how complete that is."""

    offers: list[Offer]
    notes: tuple[str, ...] = ()
    read: tuple[str, ...] = ()  # what was read to learn it (manifest labels, index pages)


class Source:
    """A place cuDNN releases come from; see each module of this package."""

    kind: str = ""

    @property
    def where(self) -> str:
        """The source as shown to people (no credentials)."""
        raise NotImplementedError

    def releases(self, platform: str, cuda_version: str | None) -> Catalog:
        raise NotImplementedError

    def pick(self, request: VersionRequest, platform: str, cuda_version: str) -> Offer:
        raise NotImplementedError

    def obtain(self, offer: Offer, fetch: Fetch, sha256: str | None = None) -> Obtained:
        raise NotImplementedError


def ordered(offers: list[Offer]) -> list[Offer]:
    """Newest release first (the one ordering, candidates.newest_first)."""
    return newest_first(offers, lambda o: (o.version, o.cuda_variant))
