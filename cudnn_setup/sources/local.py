"""An archive (or an nvidia-cudnn-cuNN wheel) already on this machine: a path or a file:// URL.
Its checksum is `--sha256`, else the known table's for its name, else none."""
from __future__ import annotations

from pathlib import Path

from cudnn_setup.archive.wheel import is_wheel
from cudnn_setup.fetch.checksums import expected_for
from cudnn_setup.fetch.redist import local_path
from cudnn_setup.sources.base import ARCHIVE, PATH, WHEEL, Fetch, Obtained, Provenance, Source
from cudnn_setup.text import show_path
from cudnn_setup.text import hide_userinfo


class LocalArchive(Source):
    kind = PATH

    def __init__(self, location: str | Path):
        self.path = local_path(location) if isinstance(location, str) and \
            location.lower().startswith("file:") else Path(location)

    @property
    def where(self) -> str:
        return show_path(self.path)

    def take(self, sha256: str | None) -> Obtained:
        """The file as it is, with the checksum it must have as it is read."""
        expected = expected_for(self.path.name, sha256)
        return Obtained(self.path, expected, Provenance(
            PATH, hide_userinfo(str(self.path)), expected.source if expected else None,
            expected.digest if expected else None, WHEEL if is_wheel(self.path) else ARCHIVE))

    def obtain(self, offer, fetch: Fetch, sha256: str | None = None) -> Obtained:
        return self.take(sha256)
