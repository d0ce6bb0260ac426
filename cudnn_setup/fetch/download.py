"""Fetch an archive over HTTP(S) into a cache: streaming, resumable, checksummed.

A download goes to `<cache>/<name>.part` and becomes `<cache>/<name>` only once it is complete and
its checksum (when one is known) matches; an interrupted one is resumed with a Range request.
What the server said about a file (size, ETag, Last-Modified) is kept beside it, so a cached
file without a known checksum is reused only while the server still describes it the same way.

Nothing here reads the process environment: proxies, the CA bundle and ~/.netrc come from the
`env` and `home` the caller hands in (requests' own `trust_env` is off), and redirects are
followed here, hop by hop, so that credentials never follow one to another host.
"""
from __future__ import annotations

import hashlib
import json
import netrc
import os
import re
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping
from urllib.parse import unquote, urljoin, urlsplit

import requests
import urllib3

from cudnn_setup.atomic import write_atomic
from cudnn_setup.digest import file_digest
from cudnn_setup.errors import DownloadFailed, os_error
from cudnn_setup.fetch.checksums import Expected, expected_for, mismatch
from cudnn_setup.text import escape, show_path

CHUNK = 1 << 20
MAX_REDIRECTS = 10
META_SUFFIX = ".cudnn-setup.json"  # what the server said about a cached file
# Headers that carry credentials: never sent on past a redirect to another host, whatever the
# caller asks. Every header given with --header is dropped too, unless its name is listed in
# the caller's `keep_on_redirect` ($CUDNN_SETUP_REDIRECT_KEEP_HEADERS for the CLI).
SECRET_HEADERS = ("authorization", "proxy-authorization", "cookie", "x-api-key", "x-auth-token",
                  "private-token")
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)$")
_HEX64 = re.compile(r"\b([0-9a-fA-F]{64})\b")
_HEX32 = re.compile(r"\b([0-9a-fA-F]{32})\b")


@dataclass
class Fetched:
    path: Path
    sha256: str
    size: int
    from_cache: bool
    resumed_from: int  # bytes kept from an earlier attempt, after the server answered 206
    expected: Expected | None
    requests_made: int
    validated_by: str | None = None  # how a cached file without a checksum was found current

    def to_dict(self) -> dict:
        return {"path": str(self.path), "sha256": self.sha256, "size": self.size,
                "from_cache": self.from_cache, "resumed_from": self.resumed_from,
                "checksum": self.expected.to_dict() if self.expected else None,
                "requests": self.requests_made, "validated_by": self.validated_by}


def default_cache_dir(env: Mapping[str, str], home: Path) -> Path:
    base = env.get("XDG_CACHE_HOME") or str(home / ".cache")
    return Path(base) / "cudnn-setup"


def file_name(url: str) -> str:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises for a port out of range
        name = unquote(Path(parts.path).name)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("not an http(s) URL with a host")
    except ValueError as exc:  # "Invalid IPv6 URL", "Port out of range"…
        raise DownloadFailed(f"{escape(url)} is not a URL that can be fetched ({exc})",
                             "check the URL", code="bad-url") from None
    if not name or name in (".", "..") or "/" in name or "\x00" in name:
        raise DownloadFailed(f"cannot tell the archive's file name from {redact(url)}",
                             "give a URL that ends in the archive's name")
    return name


def redact(url: str) -> str:
    """A URL fit to print: no user:password part, no query string (tokens live there)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        if parts.port:
            host += f":{parts.port}"
    except ValueError:
        return "(a URL that does not parse)"
    return escape(f"{parts.scheme}://{host}{parts.path}" + ("?…" if parts.query else ""))


def leaves_origin(old: str, new: str) -> bool:
    """Whether a redirect goes to another host, port or scheme (http → https on the same host
    and default ports excepted), as requests decides it for Authorization."""
    a, b = urlsplit(old), urlsplit(new)
    if a.hostname != b.hostname:
        return True
    defaults = {"http": 80, "https": 443}
    a_port, b_port = a.port or defaults.get(a.scheme), b.port or defaults.get(b.scheme)
    if a.scheme == "http" and b.scheme == "https" and a_port == 80 and b_port == 443:
        return False
    return a.scheme != b.scheme or a_port != b_port


class Network:
    """What the caller's environment says about reaching a URL: proxies, CA bundle, netrc."""

    def __init__(self, env: Mapping[str, str] | None = None, home: Path | None = None):
        self.env = dict(env or {})
        self.home = home
        self._netrc: netrc.netrc | None | bool = False  # False: not read yet

    def _get(self, name: str) -> str | None:
        return self.env.get(name.lower()) or self.env.get(name.upper()) or None

    def proxies(self, url: str) -> dict[str, str]:
        parts = urlsplit(url)
        if self._bypass(parts.hostname or "", parts.port):
            return {}
        proxy = self._get(f"{parts.scheme}_proxy") or self._get("all_proxy")
        return {parts.scheme: proxy} if proxy else {}

    def _bypass(self, host: str, port: int | None) -> bool:
        for entry in (self._get("no_proxy") or "").replace(" ", "").split(","):
            if not entry:
                continue
            if entry == "*":
                return True
            name, _, entry_port = entry.partition(":")
            if entry_port and str(port) != entry_port:
                continue
            name = name.lstrip(".").lower()
            if host.lower() == name or host.lower().endswith("." + name):
                return True
        return False

    def verify(self) -> str | bool:
        return self.env.get("REQUESTS_CA_BUNDLE") or self.env.get("CURL_CA_BUNDLE") or True

    def credentials(self, url: str) -> tuple[str, str] | None:
        """(login, password) for the URL's host from $NETRC or ~/.netrc, as curl and requests
        find them; a file that cannot be parsed is ignored, as requests ignores it."""
        if self._netrc is False:
            path = self.env.get("NETRC") or (str(self.home / ".netrc") if self.home else None)
            try:
                self._netrc = netrc.netrc(path) if path and os.path.isfile(path) else None
            except (netrc.NetrcParseError, OSError, UnicodeError):
                self._netrc = None
        if not self._netrc:
            return None
        found = self._netrc.authenticators(urlsplit(url).hostname or "")
        if not found:
            return None
        login, _, password = found
        return login or "", password or ""


class Downloader:
    def __init__(self, cache_dir: Path, *, headers: Mapping[str, str] | None = None,
                 session: requests.Session | None = None, retries: int = 5,
                 backoff: float = 0.5, timeout: tuple[float, float] = (10.0, 60.0),
                 on_progress: Callable[[int, int | None], None] | None = None,
                 env: Mapping[str, str] | None = None, home: Path | None = None,
                 keep_on_redirect: Iterable[str] = ()):
        self.cache_dir = cache_dir
        self.headers = dict(headers or {})
        self.session = session or requests.Session()
        self.session.trust_env = False  # the environment comes from the caller, through Network
        self.network = Network(env, home)
        self.keep_on_redirect = {h.lower() for h in keep_on_redirect} - {
            "authorization", "proxy-authorization"}
        self.retries = retries
        self.backoff = backoff
        self.timeout = timeout
        self.on_progress = on_progress
        self.requests_made = 0

    # --- requests, hop by hop ---------------------------------------------------------------

    def _request(self, method: str, url: str, extra: Mapping[str, str],
                 stream: bool = True) -> requests.Response:
        """One request, following redirects here: on a hop to another host the caller's headers
        and credentials stay behind (unless named in keep_on_redirect); netrc is asked anew."""
        headers = {**self.headers, **extra}
        origin = url
        for _ in range(MAX_REDIRECTS + 1):
            sent = dict(headers)
            if leaves_origin(origin, url):
                sent = {k: v for k, v in headers.items() if k in extra or (
                    k.lower() in self.keep_on_redirect and k.lower() not in SECRET_HEADERS)}
            auth = None
            if not any(k.lower() == "authorization" for k in sent):
                auth = self.network.credentials(url)
            self.requests_made += 1
            r = self.session.request(method, url, headers=sent, auth=auth, stream=stream,
                                     timeout=self.timeout, allow_redirects=False,
                                     proxies=self.network.proxies(url),
                                     verify=self.network.verify())
            if r.status_code not in (301, 302, 303, 307, 308) or "Location" not in r.headers:
                return r
            target = urljoin(url, r.headers["Location"])
            r.close()
            if urlsplit(target).scheme not in ("http", "https"):
                raise DownloadFailed(f"{redact(url)} redirects to a non-HTTP address",
                                     "check the URL and the server", code="bad-redirect")
            url = target
        raise DownloadFailed(f"{redact(origin)} redirects more than {MAX_REDIRECTS} times",
                             "check the URL and the server", code="bad-redirect")

    def sidecar(self, url: str) -> Expected | None:
        """A checksum published next to the archive: URL.sha256 or URL.md5 (sha256sum format)."""
        name = file_name(url)
        for suffix, algorithm, pattern in ((".sha256", "sha256", _HEX64), (".md5", "md5", _HEX32)):
            side = url.split("?", 1)[0] + suffix
            try:
                with self._request("GET", side, {}) as r:
                    if r.status_code != 200:
                        continue
                    content = r.raw.read(65537, decode_content=True)
            except (requests.RequestException, urllib3.exceptions.HTTPError):
                return None
            if len(content) > 65536:
                continue
            text = content.decode(errors="replace")
            for line in text.splitlines():
                m = pattern.search(line)
                if m and (name in line or len(text.split()) <= 2):
                    return Expected(algorithm, m.group(1).lower(), f"sidecar {redact(side)}")
        return None

    # --- the cache ----------------------------------------------------------------------------

    def fetch(self, url: str, expected: Expected | None = None, use_sidecar: bool = True) -> Fetched:
        name = file_name(url)
        try:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            error = os_error(exc, f"cannot create the download directory "
                             f"{show_path(self.cache_dir)}", kind=DownloadFailed)
            error.hint += " (or pass --cache-dir DIR somewhere writable)"
            raise error from None
        dest = self.cache_dir / name
        _must_be_a_file_or_nothing(dest)
        expected = expected or expected_for(name, None)
        if dest.exists() and expected is not None:
            if file_digest(dest, expected.algorithm) == expected.digest:
                sha = file_digest(dest) if expected.algorithm != "sha256" else expected.digest
                return Fetched(dest, sha, dest.stat().st_size, True, 0, expected, self.requests_made)
        if expected is None and use_sidecar:
            expected = self.sidecar(url)
            if expected is not None:
                return self.fetch(url, expected, use_sidecar=False)
        if expected is None and dest.exists():
            current = self._still_current(url, dest)
            if current is not None:
                sha, how = current
                return Fetched(dest, sha, dest.stat().st_size, True, 0, None, self.requests_made,
                               validated_by=how)
        part = self.cache_dir / (name + ".part")
        _must_be_a_file_or_nothing(part)
        resumed_from: int | None = None
        validators: dict[str, str] = {}
        attempt = 0
        while True:
            try:
                start, validators = self._download(url, part)
                if resumed_from is None:
                    resumed_from = start
                break
            except _Retry as exc:
                attempt += 1
                if attempt > self.retries:
                    raise DownloadFailed(f"download of {redact(url)} failed after {attempt} "
                                         f"{'attempt' if attempt == 1 else 'attempts'}: {exc}", exc.hint or "run again: the part "
                                         f"already downloaded ({show_path(part)}) is resumed",
                                         code=exc.code) from None
                time.sleep(self.backoff * (2 ** (attempt - 1)))
        sha = file_digest(part)
        got = sha if expected is None or expected.algorithm == "sha256" else file_digest(part, expected.algorithm)
        if expected is not None and got != expected.digest:
            part.unlink()
            raise mismatch(escape(name), expected, got)
        size = part.stat().st_size
        os.replace(part, dest)
        self._remember(url, dest, size, sha, validators)
        return Fetched(dest, sha, size, False, resumed_from or 0, expected, self.requests_made)

    def _meta_path(self, dest: Path) -> Path:
        return dest.with_name(dest.name + META_SUFFIX)

    def _remember(self, url: str, dest: Path, size: int, sha: str,
                  validators: dict[str, str]) -> None:
        meta = {"url_sha256": hashlib.sha256(url.encode()).hexdigest(), "size": size,
                "sha256": sha, **validators}
        try:
            write_atomic(self._meta_path(dest), json.dumps(meta).encode())
        except OSError:
            pass  # without it the next run downloads again: slower, never wrong

    def _still_current(self, url: str, dest: Path) -> tuple[str, str] | None:
        """(sha256, how) when the cached file is still what the server serves at `url`.

        The server must name the same size and the same ETag or Last-Modified as when the file
        was fetched (a HEAD request), and the file must still hash as it did then.
        """
        try:
            meta = json.loads(self._meta_path(dest).read_bytes()[:65536])
        except (OSError, ValueError, RecursionError):
            return None
        if not isinstance(meta, dict) or meta.get("url_sha256") != \
                hashlib.sha256(url.encode()).hexdigest() or meta.get("size") != dest.stat().st_size:
            return None
        try:
            with self._request("HEAD", url, {}, stream=False) as r:
                if r.status_code != 200:
                    return None
                length = r.headers.get("Content-Length", "")
                now = {"etag": r.headers.get("ETag"), "last_modified": r.headers.get("Last-Modified")}
        except (requests.RequestException, urllib3.exceptions.HTTPError):
            return None
        if not length.isdigit() or int(length) != meta["size"]:
            return None
        how = next((f"{k} unchanged" for k in ("etag", "last_modified")
                    if now[k] and now[k] == meta.get(k)), None)
        if how is None:
            return None
        sha = file_digest(dest)
        return (sha, how) if sha == meta.get("sha256") else None

    # --- one attempt ----------------------------------------------------------------------------

    def _download(self, url: str, part: Path) -> tuple[int, dict[str, str]]:
        """Fetch into `part`, resuming it when the server agrees; return (the offset it resumed
        at, 0 when it started over; the server's validators for the cache)."""
        have = part.stat().st_size if part.exists() else 0
        headers = {"Range": f"bytes={have}-"} if have else {}
        try:
            r = self._request("GET", url, headers)
        except requests.exceptions.SSLError as exc:
            raise DownloadFailed(f"TLS error talking to {redact(url)}: {_reason(exc)}",
                                 "check the server's certificate, or set REQUESTS_CA_BUNDLE to "
                                 "your CA bundle", code="tls-error") from None
        except requests.exceptions.ConnectionError as exc:
            text = str(exc)
            if "Name or service not known" in text or "No address associated" in text:
                raise DownloadFailed(f"cannot resolve the host of {redact(url)}",
                                     "check the URL and this machine's DNS",
                                     code="unknown-host") from None
            if "Connection refused" in text or "Errno 111" in text:
                raise _Retry(f"connection refused by {redact(url)}",
                             "is the mirror up, and is the port right?",
                             code="connection-refused") from None
            raise _Retry(_reason(exc)) from None
        except requests.exceptions.Timeout as exc:
            raise _Retry(f"timed out ({_reason(exc)})") from None
        with r:
            validators = {k: v for k, v in (("etag", r.headers.get("ETag")),
                                            ("last_modified", r.headers.get("Last-Modified"))) if v}
            if r.status_code == 416:
                total = _total_from(r.headers.get("Content-Range", ""))
                if total is not None and total == have:
                    return have, validators  # the part was already complete
                part.unlink()
                raise _Retry("the server refused to resume (416); starting over")
            if r.status_code >= 500:
                raise _Retry(f"server error {r.status_code}")
            if r.status_code in (401, 403):
                raise DownloadFailed(f"{redact(url)} answered {r.status_code} "
                                     f"{'Unauthorized' if r.status_code == 401 else 'Forbidden'}",
                                     "give credentials in ~/.netrc or with --header "
                                     "'Authorization: …'", code="unauthorized") from None
            if r.status_code == 404:
                raise DownloadFailed(f"{redact(url)} answered 404 Not Found",
                                     "check the URL; NVIDIA's own download pages need a login, so "
                                     "use your mirror's address", code="not-found") from None
            if r.status_code not in (200, 206):
                raise DownloadFailed(f"{redact(url)} answered {r.status_code}",
                                     "check the URL and the server") from None
            if r.status_code == 206:
                start, total = _resumed_range(r, have)
                if start is None:
                    part.unlink(missing_ok=True)
                    raise _Retry("the server resumed at another offset than asked; starting "
                                 "over")
                mode = "ab"
            else:  # 200: the server ignored Range, or there was nothing to resume
                mode, start = "wb", 0
                length = r.headers.get("Content-Length")
                total = int(length) if length and length.isdigit() else None
            self._write(r, part, mode, start, total)
            return start, validators

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
            error = os_error(exc, f"cannot write {show_path(part)}", kind=DownloadFailed)
            error.hint += " (the part downloaded so far is kept and resumed)"
            raise error from None
        if total is not None and done < total:
            raise _Retry(f"connection closed after {done} of {total} bytes")


class _Retry(Exception):
    """A failure worth another attempt (dropped or refused connection, 5xx, timeout)."""

    def __init__(self, message: str, hint: str = "", code: str = "download-failed"):
        super().__init__(message)
        self.hint, self.code = hint, code


def _resumed_range(r: requests.Response, have: int) -> tuple[int | None, int | None]:
    """(start, total) of a 206 that continues exactly at `have`; (None, None) otherwise."""
    m = _CONTENT_RANGE.match(r.headers.get("Content-Range", "").strip())
    if not m or int(m.group(1)) != have or int(m.group(2)) < have:
        return None, None
    total = int(m.group(3)) if m.group(3) != "*" else None
    if total is not None and int(m.group(2)) != total - 1:
        return None, None  # a part of the file, not the rest of it
    length = r.headers.get("Content-Length")
    if length and length.isdigit() and int(length) != int(m.group(2)) - have + 1:
        return None, None
    return have, total


def _must_be_a_file_or_nothing(path: Path) -> None:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise DownloadFailed(f"{show_path(path)} exists and is not a regular file",
                             "move it aside, or download into another directory",
                             code="download-target-exists")


def _total_from(content_range: str) -> int | None:
    m = re.match(r"bytes \*/(\d+)", content_range)
    return int(m.group(1)) if m else None


def _reason(exc: Exception) -> str:
    text = str(exc)
    m = re.search(r"\((?:Caused by )?\w+\('?(.*?)'?\)\)?$", text)
    return escape((m.group(1) if m else text)[:200])
