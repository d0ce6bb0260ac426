"""An archive at an http(s) URL the user gave: downloaded into the cache, checked against
`--sha256`, the known table's checksum for its name, or a `.sha256`/`.md5` file beside it
(the Downloader's sidecar)."""
from __future__ import annotations

from cudnn_setup.archive.wheel import parse_name
from cudnn_setup.fetch.checksums import expected_for
from cudnn_setup.fetch.downloader import file_name
from cudnn_setup.urls import redact
from cudnn_setup.sources.base import ARCHIVE, URL, WHEEL, Fetch, Obtained, Provenance, Source


class UrlArchive(Source):
    kind = URL

    def __init__(self, url: str):
        self.url = url

    @property
    def where(self) -> str:
        return redact(self.url)

    def obtain(self, offer, fetch: Fetch, sha256: str | None = None) -> Obtained:
        name = file_name(self.url)
        fetched = fetch(self.url, expected_for(name, sha256))
        expected = fetched.expected  # what it was checked against: given, known or a sidecar
        again = expected if expected and expected.algorithm == "sha256" else None
        return Obtained(fetched.path, again, Provenance(
            URL, redact(self.url), expected.source if expected else None,
            expected.digest if expected else None,
            WHEEL if parse_name(name) else ARCHIVE), fetched)
