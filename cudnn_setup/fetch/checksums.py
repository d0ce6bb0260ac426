"""What an archive's checksum should be, and where that expectation comes from."""
from __future__ import annotations

from msgspec import Struct

from cudnn_setup.errors import ArchiveRejected
from cudnn_setup.fetch.known_releases import known_sha256, provenance_line


class Expected(Struct):
    algorithm: str  # sha256 | md5
    digest: str
    source: str  # --sha256, known releases table, sidecar URL
    size: int | None = None  # bytes the archive must have, when its manifest says

    def to_dict(self) -> dict:
        return {"algorithm": self.algorithm, "digest": self.digest, "source": self.source}


def mismatch(name: str, expected: Expected, got: str,
             outcome: str = "it was not installed") -> ArchiveRejected:
    """The one wording of a checksum mismatch; `outcome`: what was not done with the file."""
    return ArchiveRejected(f"checksum mismatch for {name}: expected {expected.algorithm} "
                           f"{expected.digest} ({expected.source}), got {got}",
                           f"the file is damaged or not the one you meant; {outcome}",
                           code="checksum-mismatch")


def expected_for(name: str, explicit: str | None) -> Expected | None:
    if explicit:
        return Expected("sha256", explicit.lower(), "--sha256")
    known = known_sha256(name)
    if known:
        return Expected("sha256", known, f"known releases table: {provenance_line(name)}")
    return None
