"""Release candidates: what a version request (`9`, `9.17`, `9.17.0.29`) matches, and the one
archive to fetch for this platform and CUDA root. Version order is packaging's throughout; two
orders are made here and nowhere else: `newest_first`, the order releases are shown and merged
in, and `ranked`, the order in which they are chosen for this platform and CUDA root (`select`
takes its first, `fetch/resolve` walks it on a mirror).
"""
from __future__ import annotations

import bisect
import re
import urllib.parse
from typing import Iterable, Sequence

from msgspec import Struct
from packaging.version import InvalidVersion, Version

from cudnn_setup.errors import UsageError
from cudnn_setup.fetch.redist import (
    NVIDIA_COMPUTE, NVIDIA_REDIST, ManifestDamaged, NoVariant, mirror_url, parse_cuda,
    safe_relative, variant_fits, variant_key, variant_rank,
)

_REQUEST = re.compile(r"^v?\d{1,4}(\.\d{1,6}){0,3}\Z")


class UnknownVersion(UsageError):
    """No published release matches the request (exit 2); the message names the nearest."""

    default_code = "unknown-version"


# --- version requests ---------------------------------------------------------------------------

class VersionRequest(Struct, frozen=True):
    """`9`, `9.17`, `9.17.0` or `9.17.0.29`: every final release whose version starts with these
    parts; or one pre-release asked for by its full version (`9.28.0.42rc1`, `exact`)."""

    release: tuple[int, ...]
    exact: Version | None = None  # a pre-, post- or dev-release, matched by equality alone

    def __str__(self) -> str:
        return str(self.exact) if self.exact is not None else ".".join(map(str, self.release))

    def matches(self, version: str) -> bool:
        v = Version(version)
        if self.exact is not None:
            return v == self.exact
        if v.is_prerelease or v.is_postrelease:  # never picked unless asked for by name
            return False
        parts = v.release
        parts += (0,) * (len(self.release) - len(parts))  # 6.0 is 6.0.0
        return parts[:len(self.release)] == self.release


# A full four-part version with a PEP 440 pre-, post- or dev-release suffix (the index's names)
_EXACT = re.compile(r"^\d{1,4}(\.\d{1,6}){3}(?:(?:a|b|rc)\d{1,8})?(?:\.post\d{1,8})?"
                    r"(?:\.dev\d{1,14})?\Z")


def is_version_request(text: str, prerelease: bool = False) -> bool:
    """Whether an install SOURCE is a version rather than a file name, path or URL; with
    `prerelease`, a full version with a pre-release suffix counts too (for a PyPI index)."""
    text = text.strip()
    return bool(_REQUEST.match(text) or (prerelease and _EXACT.match(text)))


def parse_request(text: str, prerelease: bool = False) -> VersionRequest:
    text = text.strip()
    if not _REQUEST.match(text) and not (prerelease and _EXACT.match(text)):
        raise UsageError(f"not a cuDNN version: {text[:40]!r}",
                         "give 1 to 4 numbers: 9, 9.17, 9.17.0 or 9.17.0.29"
                         + (", or a pre-release by its full version (9.28.0.42rc1)"
                            if prerelease else ""))
    try:
        v = Version(text)
    except InvalidVersion as exc:  # the pattern above already excludes this; keep the reason
        raise UsageError(f"not a cuDNN version: {text!r}", str(exc)) from None
    if v.is_prerelease or v.is_postrelease:
        return VersionRequest(v.release, exact=v)
    return VersionRequest(v.release)


def release_order(version: str, cuda_variant: str | None = None, platform: str = "") -> tuple:
    """The sort key of "newest first" (sorted with reverse=True): PEP 440 version order, then the
    CUDA variant (a newer CUDA first), then the platform name."""
    return (Version(version), variant_key(cuda_variant) if cuda_variant else (-1, -1), platform)


def newest_first(items: Iterable, key=lambda r: (r.version, r.cuda_variant, r.platform)) -> list:
    """Every release-like item, newest first: the tool's one ordering of releases. `key` gives
    (version, cuda_variant[, platform]) of an item."""
    return sorted(items, key=lambda item: release_order(*key(item)), reverse=True)


def nearest_versions(request: VersionRequest, versions: Iterable[str], n: int = 4) -> list[str]:
    """Up to n published versions closest to the request in version order, newest first."""
    by_key = {Version(v): v for v in versions}
    ordered = sorted(by_key)
    at = bisect.bisect_left(ordered, Version(str(request)))
    picked: list[Version] = []
    below, above = at - 1, at
    while len(picked) < n and (below >= 0 or above < len(ordered)):
        if below >= 0:
            picked.append(ordered[below])
            below -= 1
        if above < len(ordered) and len(picked) < n:
            picked.append(ordered[above])
            above += 1
    return [by_key[v] for v in sorted(picked, reverse=True)]


# --- releases -----------------------------------------------------------------------------------

class Release(Struct, frozen=True):
    """One archive that can be fetched: what it is, where it sits, what it must hash to."""

    version: str  # 9.17.0.29
    cuda_variant: str  # cuda12, cuda11.5, cuda10.2
    platform: str  # linux-x86_64
    file_name: str
    relative_path: str  # below a mirror's redist/ level
    sha256: str
    md5: str | None = None
    size: int | None = None
    source: str = "known table"  # or "redistrib_<label>.json at <url>"
    public_path: str | None = None  # below https://developer.download.nvidia.com/compute/
    # (wheel file name, its sha256) of an archive a mirror repacked from NVIDIA's wheel: the
    # mirror's manifest vouches for the repack's checksum, never NVIDIA
    repacked_from: tuple[str, str] | None = None
    flavour: str = "cudnn"  # or "cudnn_jit", the graph JIT library's own archive (9.10 on)
    provenance: tuple[str, ...] = ()  # the known table's sources that vouch for the sha256

    def url(self, mirror: str | None = None) -> str:
        """Where to fetch it: below `mirror` when given, else NVIDIA's public URL."""
        if mirror is not None:
            return mirror_url(mirror, self.relative_path)
        if self.public_path is not None:
            return NVIDIA_COMPUTE + urllib.parse.quote(safe_relative(self.public_path))
        return mirror_url(NVIDIA_REDIST, self.relative_path)

    def to_dict(self) -> dict:
        return {"version": self.version, "cuda_variant": self.cuda_variant,
                "platform": self.platform, "file_name": self.file_name,
                "relative_path": self.relative_path, "sha256": self.sha256, "md5": self.md5,
                "size": self.size, "source": self.source, "flavour": self.flavour,
                "provenance": list(self.provenance)}


def merge(known: Iterable[Release], published: Iterable[Release]) -> list[Release]:
    """The table and what manifests list, one entry per file name, newest first.

    A manifest entry replaces the table's (it adds md5 and size) only when the two agree on
    the sha256; disagreement means a damaged or tampered manifest, and is refused.
    """
    by_name = {r.file_name: r for r in known}
    for r in published:
        old = by_name.get(r.file_name)
        if old is not None and old.sha256 != r.sha256:
            raise ManifestDamaged(
                f"{r.source} gives {r.file_name} sha256 {r.sha256}, but NVIDIA published "
                f"{old.sha256} ({old.source})", "the mirror's manifest is damaged or not NVIDIA's")
        by_name[r.file_name] = r
    return newest_first(by_name.values())


def platform_order(platforms: str | Sequence[str]) -> tuple[str, ...]:
    """Platforms best first, from one platform key or a sequence (redist.PlatformChoice's)."""
    return (platforms,) if isinstance(platforms, str) else tuple(platforms)


def installable(releases: Iterable[Release]) -> list[Release]:
    """The archives `install` may choose: cuDNN itself; the JIT library's archives are listed
    and mirrored, never installed in its place."""
    return [r for r in releases if r.flavour == "cudnn"]


def select(request: VersionRequest, releases: Iterable[Release], platform: str | Sequence[str],
           cuda_version: str) -> Release:
    """The newest release matching `request` that has a build for this platform and CUDA root.

    `platform` is one platform key or several, best first (a Jetson: linux-aarch64, then
    linux-sbsa): the newest matching version wins, and within it the first platform that has
    a fitting build. Raises UnknownVersion (nothing matches: exit 2, with the nearest versions)
    or NoVariant (matches exist, none for this platform or CUDA major: exit 3, naming what
    exists).
    """
    order = platform_order(platform)
    releases = installable(releases)
    matches = [r for r in releases if request.matches(r.version)]
    if not matches:
        near = nearest_versions(request, {r.version for r in releases})
        raise UnknownVersion(f"no published cuDNN matches {request}",
                             f"nearest versions: {', '.join(near)}" if near else "")
    here = [r for r in matches if r.platform in order]
    if not here:
        others = sorted({r.platform for r in matches})
        raise NoVariant(f"cuDNN {request} has no archive for {' or '.join(order)}",
                        f"published for: {', '.join(others)}")
    fitting = [r for r in here if variant_fits(r.cuda_variant, cuda_version)]
    if not fitting:
        variants = ", ".join(sorted({r.cuda_variant for r in here}, key=variant_key))
        major = parse_cuda(cuda_version)[0]
        raise NoVariant(f"cuDNN {request} has no build for CUDA {major} on {' or '.join(order)}",
                        f"builds exist for: {variants}; pick another version or CUDA root "
                        "(--cuda N)")
    return ranked(request, fitting, order, cuda_version)[0]


def ranked(request: VersionRequest, releases: Iterable[Release], platform: str | Sequence[str],
           cuda_version: str) -> list[Release]:
    """Every release `select` could choose, best first (so ranked(...)[0] is its answer): the
    newest version; within one version the platforms in the order given (a Jetson:
    linux-aarch64, then linux-sbsa); within one platform the variants best first for this CUDA
    (redist.variant_rank); releases alike in all three keep the order they came in."""
    order = platform_order(platform)
    fitting = [r for r in installable(releases) if request.matches(r.version)
               and r.platform in order and variant_fits(r.cuda_variant, cuda_version)]
    by_fit = sorted(fitting, key=lambda r: (order.index(r.platform),
                                            variant_rank(r.cuda_variant, cuda_version)))
    return sorted(by_fit, key=lambda r: Version(r.version), reverse=True)  # stable: fit kept
