"""Fetch an archive over HTTP(S) into a cache: streaming, resumable, checksummed.

A download goes to `<cache>/<name>.part` and becomes `<cache>/<name>` only once it is complete and
its checksum (when one is known) matches; an interrupted one is resumed with a Range request.
"""
from __future__ import annotations

import errno
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping
from urllib.parse import unquote, urlsplit

import requests
import urllib3

from cudnn_setup.digest import file_digest
from cudnn_setup.fetch.checksums import Expected, expected_for, mismatch
from cudnn_setup.errors import DownloadFailed

CHUNK = 1 << 20
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")
_HEX64 = re.compile(r"\b([0-9a-fA-F]{64})\b")
_HEX32 = re.compile(r"\b([0-9a-fA-F]{32})\b")


@dataclass
class Fetched:
    path: Path
    sha256: str
    size: int
    from_cache: bool
    resumed_from: int
    expected: Expected | None
    requests_made: int

    def to_dict(self) -> dict:
        return {"path": str(self.path), "sha256": self.sha256, "size": self.size,
                "from_cache": self.from_cache, "resumed_from": self.resumed_from,
                "checksum": self.expected.to_dict() if self.expected else None,
                "requests": self.requests_made}


def default_cache_dir(env: Mapping[str, str], home: Path) -> Path:
    base = env.get("XDG_CACHE_HOME") or str(home / ".cache")
    return Path(base) / "cudnn-setup"


def file_name(url: str) -> str:
    name = unquote(Path(urlsplit(url).path).name)
    if not name or name in (".", "..") or "/" in name or "\x00" in name:
        raise DownloadFailed(f"cannot tell the archive's file name from {redact(url)}",
                             "give a URL that ends in the archive's name")
    return name


def redact(url: str) -> str:
    """A URL fit to print: no user:password part, no query string (tokens live there)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    return f"{parts.scheme}://{host}{parts.path}" + ("?…" if parts.query else "")


class Downloader:
    def __init__(self, cache_dir: Path, *, headers: Mapping[str, str] | None = None,
                 session: requests.Session | None = None, retries: int = 5,
                 backoff: float = 0.5, timeout: tuple[float, float] = (10.0, 60.0),
                 on_progress: Callable[[int, int | None], None] | None = None):
        self.cache_dir = cache_dir
        self.headers = dict(headers or {})
        self.session = session or requests.Session()  # trusts proxies and ~/.netrc from the env
        self.retries = retries
        self.backoff = backoff
        self.timeout = timeout
        self.on_progress = on_progress
        self.requests_made = 0

    def _get(self, url: str, headers: Mapping[str, str], stream: bool = True) -> requests.Response:
        self.requests_made += 1
        return self.session.get(url, headers={**self.headers, **headers}, stream=stream,
                                timeout=self.timeout, allow_redirects=True)

    def sidecar(self, url: str) -> Expected | None:
        """A checksum published next to the archive: URL.sha256 or URL.md5 (sha256sum format)."""
        name = file_name(url)
        for suffix, algorithm, pattern in ((".sha256", "sha256", _HEX64), (".md5", "md5", _HEX32)):
            side = url.split("?", 1)[0] + suffix
            try:
                r = self._get(side, {}, stream=False)
            except requests.RequestException:
                return None
            if r.status_code != 200 or len(r.content) > 65536:
                continue
            text = r.content.decode(errors="replace")
            for line in text.splitlines():
                m = pattern.search(line)
                if m and (name in line or len(text.split()) <= 2):
                    return Expected(algorithm, m.group(1).lower(), f"sidecar {redact(side)}")
        return None

    def fetch(self, url: str, expected: Expected | None = None, use_sidecar: bool = True) -> Fetched:
        name = file_name(url)
        try:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DownloadFailed(f"cannot create the cache dir {self.cache_dir}: {exc.strerror}",
                                 "pass --cache-dir DIR somewhere writable") from None
        dest = self.cache_dir / name
        expected = expected or expected_for(name, None)
        if dest.exists() and expected is not None:
            if file_digest(dest, expected.algorithm) == expected.digest:
                sha = file_digest(dest) if expected.algorithm != "sha256" else expected.digest
                return Fetched(dest, sha, dest.stat().st_size, True, 0, expected, self.requests_made)
        if expected is None and use_sidecar:
            expected = self.sidecar(url)
        part = self.cache_dir / (name + ".part")
        resumed_from = part.stat().st_size if part.exists() else 0
        attempt = 0
        while True:
            try:
                self._download(url, part)
                break
            except _Retry as exc:
                attempt += 1
                if attempt > self.retries:
                    raise DownloadFailed(f"download of {redact(url)} failed after {attempt} "
                                         f"attempts: {exc}", "run again: the part already "
                                         f"downloaded ({part}) is resumed") from None
                time.sleep(self.backoff * (2 ** (attempt - 1)))
        sha = file_digest(part)
        got = sha if expected is None or expected.algorithm == "sha256" else file_digest(part, expected.algorithm)
        if expected is not None and got != expected.digest:
            part.unlink()
            raise mismatch(name, expected, got)
        os.replace(part, dest)
        return Fetched(dest, sha, dest.stat().st_size, False, resumed_from, expected,
                       self.requests_made)

    def _download(self, url: str, part: Path) -> None:
        have = part.stat().st_size if part.exists() else 0
        headers = {"Range": f"bytes={have}-"} if have else {}
        try:
            r = self._get(url, headers)
        except requests.exceptions.SSLError as exc:
            raise DownloadFailed(f"TLS error talking to {redact(url)}: {_reason(exc)}",
                                 "check the server's certificate, or set REQUESTS_CA_BUNDLE to "
                                 "your CA bundle") from None
        except requests.exceptions.ConnectionError as exc:
            text = str(exc)
            if "Name or service not known" in text or "NameResolution" in text or \
                    "Temporary failure in name resolution" in text:
                raise DownloadFailed(f"cannot resolve the host of {redact(url)}",
                                     "check the URL and this machine's DNS") from None
            if "Connection refused" in text:
                raise DownloadFailed(f"connection refused by {redact(url)}",
                                     "is the mirror up, and is the port right?") from None
            raise _Retry(_reason(exc)) from None
        except requests.exceptions.Timeout as exc:
            raise _Retry(f"timed out ({_reason(exc)})") from None
        with r:
            if r.status_code == 416:
                total = _total_from(r.headers.get("Content-Range", ""))
                if total is not None and total == have:
                    return  # the part was already complete
                part.unlink()
                raise _Retry("the server refused to resume (416); starting over")
            if r.status_code >= 500:
                raise _Retry(f"server error {r.status_code}")
            if r.status_code in (401, 403):
                raise DownloadFailed(f"{redact(url)} answered {r.status_code} "
                                     f"{'Unauthorized' if r.status_code == 401 else 'Forbidden'}",
                                     "give credentials in ~/.netrc or with --header "
                                     "'Authorization: …'") from None
            if r.status_code == 404:
                raise DownloadFailed(f"{redact(url)} answered 404 Not Found",
                                     "check the URL; NVIDIA's own download pages need a login, so "
                                     "use your mirror's address") from None
            if r.status_code not in (200, 206):
                raise DownloadFailed(f"{redact(url)} answered {r.status_code}",
                                     "check the URL and the server") from None
            mode = "ab"
            total = None
            if r.status_code == 206:
                m = _CONTENT_RANGE.match(r.headers.get("Content-Range", ""))
                if not m or int(m.group(1)) != have:
                    part.unlink(missing_ok=True)
                    raise _Retry("the server resumed at the wrong offset; starting over")
                total = int(m.group(3)) if m.group(3) != "*" else None
            else:  # 200: the server ignored Range, or there was nothing to resume
                mode, have = "wb", 0
                length = r.headers.get("Content-Length")
                total = int(length) if length and length.isdigit() else None
            self._write(r, part, mode, have, total)

    def _write(self, r: requests.Response, part: Path, mode: str, have: int,
               total: int | None) -> None:
        done = have
        try:
            with open(part, mode) as f:
                # read1 hands over whatever has arrived, so a dropped connection loses nothing
                # that reached us and the next attempt resumes exactly there.
                for chunk in iter(lambda: r.raw.read1(CHUNK), b""):
                    f.write(chunk)
                    done += len(chunk)
                    if self.on_progress:
                        self.on_progress(done, total)
        except (requests.exceptions.ChunkedEncodingError, requests.exceptions.ConnectionError,
                requests.exceptions.ReadTimeout, urllib3.exceptions.HTTPError) as exc:
            raise _Retry(f"connection lost after {done} bytes ({_reason(exc)})") from None
        except OSError as exc:
            hint = ("free some space (the part downloaded so far is kept and resumed)"
                    if exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)
                    else "check the cache dir")
            raise DownloadFailed(f"cannot write {part}: {exc.strerror or exc}", hint) from None
        if total is not None and done < total:
            raise _Retry(f"connection closed after {done} of {total} bytes")


class _Retry(Exception):
    """A failure worth another attempt (dropped connection, 5xx, timeout)."""


def _total_from(content_range: str) -> int | None:
    m = re.match(r"bytes \*/(\d+)", content_range)
    return int(m.group(1)) if m else None


def _reason(exc: Exception) -> str:
    text = str(exc)
    m = re.search(r"\((?:Caused by )?\w+\('?(.*?)'?\)\)?$", text)
    return (m.group(1) if m else text)[:200]
