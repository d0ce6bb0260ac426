"""A PyPI index (PyPI itself, or Artifactory, Nexus, devpi, a file:// tree): NVIDIA's
`nvidia-cudnn-cu<major>` wheels for the root's CUDA major.

The indexes are the ones pip would use (sources/pipconf.py); each project page is read as PEP
691 JSON or PEP 503 HTML (sources/simple_api.py). A wheel counts when its platform tag is one
this machine supports (`packaging.tags.platform_tags()`, most specific first), and its checksum
is the sha256 the index publishes for the file: a wheel without one is refused unless
`--sha256` names it. Pre-releases and yanked files (PEP 592) are never picked unless asked for
by their full version. Credentials come from the index URL or ~/.netrc and are never shown.
"""
from __future__ import annotations

import os
import urllib.parse
from typing import Sequence

import requests

from cudnn_setup.archive.wheel import parse_name
from cudnn_setup.errors import ArchiveRejected, DownloadFailed
from cudnn_setup.fetch import redist
from cudnn_setup.fetch.candidates import UnknownVersion, VersionRequest, nearest_versions
from cudnn_setup.fetch.checksums import Expected, mismatch
from cudnn_setup.fetch.downloader import Downloader
from cudnn_setup.fetch.http import Stalled, TimedOut, connection_failure, reason
from cudnn_setup.fetch.redist import NoVariant, local_path
from cudnn_setup.fetch.remote import READ_DEADLINE
from cudnn_setup.sources import simple_api
from cudnn_setup.sources.base import (PYPI, WHEEL, Catalog, Fetch, Obtained, Offer, Provenance,
                                      Source, ordered)
from cudnn_setup.sources.pipconf import IndexConfig
from cudnn_setup.text import escape
from cudnn_setup.untrusted import read_regular
from cudnn_setup.urls import redact


# the CUDA majors NVIDIA publishes nvidia-cudnn-cuNN wheels for
WHEEL_CUDA_MAJORS = (11, 12, 13)


def project_name(cuda_major: int) -> str:
    return f"nvidia-cudnn-cu{cuda_major}"


def with_index_credentials(index: str, url: str) -> str:
    """A file URL on the index's own host and port gets the index URL's credentials, as pip
    sends them (its MultiDomainBasicAuth); a file on another host (PyPI's CDN) never does."""
    try:  # a port that is not a number, an unclosed [: nothing is sent with such a URL
        i, f = urllib.parse.urlsplit(index), urllib.parse.urlsplit(url)
        if i.username is None or f.username is not None or f.scheme not in ("http", "https"):
            return url
        if (i.hostname, i.port, i.scheme) != (f.hostname, f.port, f.scheme):
            return url
    except ValueError:
        return url
    return urllib.parse.urlunsplit(f._replace(netloc=i.netloc))


class PypiIndex(Source):
    kind = PYPI

    def __init__(self, config: IndexConfig, downloader: Downloader, platform_tags: Sequence[str]):
        self.config = config
        self.downloader = downloader
        self.tags = list(platform_tags)  # most specific first
        self.pages: dict[str, list[simple_api.IndexFile] | None] = {}

    @property
    def where(self) -> str:
        return ", ".join(redact(u) for u in self.config.urls)

    # --- reading the indexes ------------------------------------------------------------------

    def _page(self, index: str, project: str) -> list[simple_api.IndexFile] | None:
        """The files one index lists for the project; None when it has no such project."""
        url = index + project + "/"
        if url in self.pages:
            return self.pages[url]
        path = local_path(url)
        if path is not None:  # a file:// index: <dir>/<project>/index.html, as pip reads it
            try:  # a FIFO there is refused from its type, never opened
                data = read_regular(path / "index.html", simple_api.MAX_PAGE_BYTES + 1)
            except (FileNotFoundError, NotADirectoryError):
                files = None
            except OSError as exc:
                raise DownloadFailed(f"cannot read the index page {escape(str(path))}/index.html: "
                                     f"{exc.strerror}", "check the index's permissions") from None
            else:
                files = simple_api.parse_page(data, "text/html", url)
        else:
            files = self._get(url)
        self.pages[url] = files
        return files

    def _get(self, url: str) -> list[simple_api.IndexFile] | None:
        client = self.downloader.client  # the command's redirect policy and waiting budget
        try:
            response = client.request("GET", url, {"Accept": simple_api.ACCEPT})
        except Stalled as exc:
            raise TimedOut(f"the package index {redact(url)}: {exc}",
                           "check the index and the network") from None
        except requests.RequestException as exc:  # which failure: unresolved, refused, timeout
            raise DownloadFailed(f"cannot reach the package index {redact(url)}: "
                                 f"{reason(exc, url)}",
                                 "check --index-url / PIP_INDEX_URL / pip.conf and the network "
                                 "(proxy settings come from the environment)",
                                 code=connection_failure(exc, url)
                                 if isinstance(exc, requests.ConnectionError)
                                 else "download-failed") from None
        with response:
            if response.status_code in (404, 410):
                return None
            if response.status_code in (401, 403):
                raise DownloadFailed(f"the package index {redact(url)} answered "
                                     f"{response.status_code}",
                                     "give credentials in the index URL or in ~/.netrc")
            if response.status_code != 200:
                raise DownloadFailed(f"the package index {redact(url)} answered "
                                     f"{response.status_code}", "check the index and run again")
            data = client.read_small(response, url, simple_api.MAX_PAGE_BYTES, "the index",
                                     READ_DEADLINE)
            return simple_api.parse_page(bytes(data), response.headers.get("Content-Type", ""),
                                         response.url or url)

    def _files(self, project: str) -> tuple[list[tuple[str, simple_api.IndexFile]], list[str]]:
        """(index, file) for every file of the project on every index, and notes."""
        found: list[tuple[str, simple_api.IndexFile]] = []
        notes: list[str] = []
        seen: set[str] = set()
        for index in self.config.urls:
            files = self._page(index, project)
            if files is None:
                notes.append(f"{redact(index)} has no project {project}")
                continue
            for f in files:
                if f.filename not in seen:  # the first index that lists a file name wins
                    seen.add(f.filename)
                    found.append((index, f))
        return found, notes

    # --- what the indexes hold -----------------------------------------------------------------

    def _offer(self, index: str, f: simple_api.IndexFile, platform: str) -> tuple[Offer, int] | None:
        """The file as an offer for this machine, with its tag's rank; None when not usable."""
        wheel = parse_name(f.filename)
        if wheel is None:
            return None
        ranks = [self.tags.index(t) for t in wheel.platform_tags if t in self.tags]
        if not ranks:
            return None
        checksum_from = (f"the package index {redact(index)}, which publishes it for the file"
                         if f.sha256 else None)
        return Offer(version=str(wheel.version), cuda_variant=f"cuda{wheel.cuda_major}",
                     platform=platform, file_name=f.filename,
                     url=with_index_credentials(index, f.url), sha256=f.sha256,
                     checksum_from=checksum_from, format=WHEEL, size=f.size,
                     prerelease=wheel.version.is_prerelease or wheel.version.is_postrelease,
                     details={"index": redact(index), "yanked": f.yanked,
                              "project": project_name(wheel.cuda_major)}), min(ranks)

    def _offers(self, platform: str, cuda_version: str) -> tuple[list[Offer], list[Offer], list[str]]:
        """(offers for this machine, best tag first within a version; every wheel of the
        project whatever its platform; notes)."""
        major = redist.parse_cuda(cuda_version)[0]
        project = project_name(major)
        files, notes = self._files(project)
        usable: list[tuple[Offer, int]] = []
        every: list[Offer] = []
        for index, f in files:
            wheel = parse_name(f.filename)
            if wheel is None or wheel.cuda_major != major:
                continue
            every.append(Offer(str(wheel.version), f"cuda{major}", ",".join(wheel.platform_tags),
                               f.filename, f.url, f.sha256, None, WHEEL))
            got = self._offer(index, f, platform)
            if got is not None:
                usable.append(got)
        usable.sort(key=lambda pair: pair[1])
        return ordered([o for o, _ in usable]), every, notes

    def releases(self, platform: str, cuda_version: str | None) -> Catalog:
        if cuda_version is None:
            raise UnknownVersion("a PyPI index holds one project per CUDA major "
                                 "(nvidia-cudnn-cu12, -cu13…), and no CUDA version is known here",
                                 "pass --cuda N or --cuda-root DIR", code="cuda-unknown")
        offers, _, notes = self._offers(platform, cuda_version)
        shown = [o for o in offers if not o.prerelease and not o.details.get("yanked")]
        hidden = len(offers) - len(shown)
        if hidden:
            notes.append(f"{hidden} pre-release or yanked wheel(s) not listed; install one by "
                         "its full version")
        best: dict[str, Offer] = {}
        for o in shown:  # one wheel per version: the most specific platform tag
            best.setdefault(o.version, o)
        return Catalog(ordered(list(best.values())), tuple(notes),
                       tuple(redact(u) for u in self.config.urls))

    def pick(self, request: VersionRequest, platform: str, cuda_version: str) -> Offer:
        offers, every, notes = self._offers(platform, cuda_version)
        exact = request.exact is not None or len(request.release) == 4
        fitting = [o for o in offers if request.matches(o.version)
                   and (exact or not o.details.get("yanked"))]
        if fitting:
            return fitting[0]  # newest first; within a version the most specific tag
        project = project_name(redist.parse_cuda(cuda_version)[0])
        matching = [o for o in every if request.matches(o.version)]
        if matching:
            tags = sorted({t for o in matching for t in o.platform.split(",")})
            raise NoVariant(f"{project} {request} has no wheel for this machine "
                            f"({self.tags[0] if self.tags else 'no platform tags'})",
                            f"its wheels are for: {', '.join(tags)[:300]}")
        asked = redist.parse_cuda(cuda_version)[0]
        others = self._other_majors(request, platform, asked)
        if others:
            # the major nearest the root's (the newer on a tie): the smallest toolkit change
            nearest = min(others, key=lambda m: (abs(m - asked), -m))
            raise NoVariant(f"cuDNN {request} has no wheel for CUDA {asked} ({project}) on "
                            f"{self.where}",
                            f"its wheels are for CUDA {', '.join(map(str, others))}: pass "
                            f"--cuda {nearest} or use a CUDA root of that major")
        versions = {o.version for o in every if not o.prerelease}
        near = nearest_versions(request, versions) if versions else []
        if not versions and notes:  # the index has no such project at all: say only that
            raise UnknownVersion(f"no {project} wheel matches {request}: " + "; ".join(notes),
                                 "NVIDIA publishes nvidia-cudnn-cu11, -cu12 and -cu13; check "
                                 "the index (--index-url, PIP_INDEX_URL, pip.conf) or --cuda")
        raise UnknownVersion(f"no {project} wheel matches {request} on {self.where}",
                             f"nearest versions: {', '.join(near)}" if near else
                             "check the index (--index-url, PIP_INDEX_URL, pip.conf)")

    def _other_majors(self, request: VersionRequest, platform: str, major: int) -> list[int]:
        """The other CUDA majors whose nvidia-cudnn-cuNN project has a wheel of `request` for
        this machine: what to say when the asked major has none."""
        found = []
        for other in WHEEL_CUDA_MAJORS:
            if other == major:
                continue
            try:
                offers, _, _ = self._offers(platform, f"{other}.0")
            except DownloadFailed:  # what the asked project's page said stands
                continue
            if any(request.matches(o.version) for o in offers):
                found.append(other)
        return found

    def pick_dependency(self, requirement, platform: str, cuda_version: str | None = None
                        ) -> Offer:
        """The newest final wheel of a requirement the cuDNN wheel declares (nvidia-cublas-cu12
        >=…) for this machine's platform tags, with the sha256 the index publishes; among
        them a build for the root's CUDA minor (`cuda_version` "12.4": cuBLAS 12.4.x) where
        the index has one, else the newest, said in `details["fit"]`."""
        from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

        project = canonicalize_name(requirement.name)
        files, notes = self._files(project)
        found: list[tuple] = []
        for index, f in files:
            try:
                dist, version, _, tags = parse_wheel_filename(f.filename)
            except InvalidWheelFilename:
                continue
            if dist != project or version.is_prerelease or f.yanked \
                    or not requirement.specifier.contains(version):
                continue
            ranks = [self.tags.index(t.platform) for t in tags if t.platform in self.tags]
            if ranks:
                found.append(((version, -min(ranks)), index, f, version))
        if not found:
            raise UnknownVersion(f"no wheel of {requirement} for this machine on {self.where}",
                                 "; ".join(notes) or "check the index")
        fit = None
        if cuda_version is not None:
            major, minor = redist.parse_cuda(cuda_version)
            if minor is not None:
                same = [c for c in found if c[3].release[:2] == (major, minor)]
                if same:
                    found, fit = same, f"a build for the root's CUDA {major}.{minor}"
                else:
                    fit = (f"the index has no {project} build for the root's CUDA "
                           f"{major}.{minor}; the newest that fits {requirement} was taken")
        _, index, f, version = max(found, key=lambda c: c[0])
        return Offer(version=str(version), cuda_variant="", platform=platform,
                     file_name=f.filename, url=with_index_credentials(index, f.url),
                     sha256=f.sha256, checksum_from=(
                         f"the package index {redact(index)}, which publishes it for the file"
                         if f.sha256 else None), format=WHEEL, size=f.size,
                     details={"index": redact(index), "project": project, "fit": fit})

    def obtain(self, offer: Offer, fetch: Fetch, sha256: str | None = None) -> Obtained:
        if offer.sha256 is None and sha256 is None:
            raise ArchiveRejected(
                f"the package index publishes no sha256 for {escape(offer.file_name)}, so nothing "
                "vouches for its bytes; it was not downloaded",
                "pass --sha256 HEX with the wheel's checksum from a source you trust, or use an "
                "index that publishes hashes (PyPI does)", code="no-checksum")
        if offer.sha256 is not None and sha256 is not None and sha256.lower() != offer.sha256:
            raise mismatch(escape(offer.file_name), Expected("sha256", sha256.lower(), "--sha256"),
                           f"{offer.sha256} as the index publishes it")
        expected = (Expected("sha256", offer.sha256, offer.checksum_from) if offer.sha256
                    else Expected("sha256", sha256.lower(), "--sha256"))
        provenance = Provenance(PYPI, redact(offer.url), expected.source, expected.digest, WHEEL)
        local = local_path(offer.url)
        if local is not None:
            return Obtained(local, expected, provenance)  # checked as it is read
        fetched = fetch(offer.url, expected)
        return Obtained(fetched.path, expected, provenance, fetched)


def default_cert(config: IndexConfig, env: dict) -> dict:
    """The environment for the Downloader: pip's `cert` as the CA bundle, unless one is set."""
    if config.cert and not (env.get("REQUESTS_CA_BUNDLE") or env.get("CURL_CA_BUNDLE")) \
            and os.path.isfile(config.cert):
        return {**env, "REQUESTS_CA_BUNDLE": config.cert}
    return env

