"""Fetch an archive over HTTP(S) into a cache: streaming, resumable, checksummed, bounded.

A download goes to `<dir>/<name>.part` and becomes `<dir>/<name>` only once it is complete and
its checksum (when one is known) matches; an interrupted one is resumed with a Range request
made conditional (If-Range) on the validator the server gave when the part began, so a file
that changed on the server since is fetched whole rather than spliced onto the old part's
bytes; a part no validator vouches for is resumed only where a checksum will judge the result.
`<dir>` is the cache, or the user's `-o DIR`: there a file of the archive's name is never
replaced, only reused when it is that archive. What the server said about a file (size, ETag,
Last-Modified) is kept in the cache, never beside a user's file, so a file without a known
checksum is reused only while the server still describes it the same way.

Concurrent runs fetching one archive into one place take turns on a lock (`flock` on
`<cache>/<name>.lock`, removed by its holder): the first downloads, the others then find the
complete file. The body is bounded by the size it was promised (the manifest's, else the
server's Content-Length or Content-Range, else MAX_ARCHIVE): a size the server names that
differs from the manifest's is refused before the body is read, and a body that runs past its
size is cut off, its part removed. Requests, redirects and waiting go through `fetch.http`.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import stat
import time
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import IO, Callable, Iterable, Mapping

from msgspec import Struct
import requests
import urllib3

from cudnn_setup.durable import make_dirs, write_atomic
from cudnn_setup.digest import file_digest
from cudnn_setup.errors import ArchiveRejected, DownloadFailed, os_error
from cudnn_setup.fetch.arriving import Arriving
from cudnn_setup.fetch.checksums import Expected, expected_for, mismatch
from cudnn_setup.fetch.http import (  # noqa: F401 - SECRET_HEADERS, leaves_origin: re-exported
    SECRET_HEADERS, Client, Stalled, TimedOut, connection_failure, leaves_origin, reason,
    refuse_encoded, status_error,
)
from cudnn_setup.text import escape, show_path
from cudnn_setup.untrusted import kind, read_regular
from cudnn_setup.urls import BadUrl, check, redact, server  # noqa: F401 - redact: re-exported

CHUNK = 1 << 20
MAX_ARCHIVE = 16 << 30  # no cuDNN archive is near this (9.x: under 1 GiB)
PROGRESS_REFUNDS = 1 << 20  # bytes of progress after which an attempt's stall is not held
LOCK_WAIT = 3600.0  # seconds to wait for another run's download of the same archive
META_SUFFIX = ".cudnn-setup.json"  # what the server said about a cached file
PART_META_SUFFIX = ".part" + META_SUFFIX  # …and about the file a part is the start of
# A validator as If-Range may carry it: a strong ETag or an HTTP date, one printable line.
_STRONG_ETAG = re.compile(r'"[\x21\x23-\x7e]{0,190}"')
_HTTP_DATE = re.compile(r"[A-Za-z]{3}, \d{2} [A-Za-z]{3} \d{4} \d{2}:\d{2}:\d{2} GMT")
_CONTENT_RANGE = re.compile(r"bytes (\d{1,15})-(\d{1,15})/(\d{1,15}|\*)\Z")
_TOTAL_ONLY = re.compile(r"bytes \*/(\d{1,15})\Z")
_HEX64 = re.compile(r"\b([0-9a-fA-F]{64})\b")
_HEX32 = re.compile(r"\b([0-9a-fA-F]{32})\b")


def strong_only(validators: dict[str, str], date: str | None) -> dict[str, str]:
    """The validators a resume or a cached copy's reuse may rest on: the ETag, and a
    Last-Modified only where the response's Date is a second or more after it. A file changed
    within that second keeps its date, so such a date is weak (RFC 9110 8.8.2.2) and vouches
    for no part and no copy."""
    modified = validators.get("last_modified")
    if modified is None:
        return validators
    try:
        strong = date is not None and (parsedate_to_datetime(date) -
                                       parsedate_to_datetime(modified)).total_seconds() >= 1
    except (TypeError, ValueError, IndexError, OverflowError):
        strong = False
    return validators if strong else {k: v for k, v in validators.items() if k != "last_modified"}


class Fetched(Struct):
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
    from cudnn_setup.settings import user_cache_dir

    return user_cache_dir(env, home)


def file_name(url: str) -> str:
    """The archive's file name from its http(s) URL; `bad-url` when the URL cannot be used."""
    from urllib.parse import unquote

    try:
        parts = check(url)
    except BadUrl as exc:
        raise DownloadFailed(f"{redact(url)} is not a URL that can be fetched: {exc}",
                             "check the URL (http:// or https://, a host, a port from 1 to "
                             "65535)", code="bad-url") from None
    name = unquote(Path(parts.path).name)
    if not name or name in (".", "..") or "/" in name or "\x00" in name:
        raise DownloadFailed(f"cannot tell the archive's file name from {redact(url)}",
                             "give a URL that ends in the archive's name", code="bad-url")
    return name


def size_mismatch(name: str, expected: Expected, found: int | str,
                  where: str) -> ArchiveRejected:
    return ArchiveRejected(f"{escape(name)} is {found} bytes ({where}), but {expected.source} "
                           f"says {expected.size}; nothing was kept",
                           "the mirror's manifest and its archive disagree: one of them is "
                           "damaged or not NVIDIA's", code="size-mismatch")


class Downloader:
    def __init__(self, cache_dir: Path, *, headers: Mapping[str, str] | None = None,
                 session: requests.Session | None = None, retries: int = 5,
                 backoff: float = 0.5, timeout: tuple[float, float] = (10.0, 60.0),
                 on_progress: Callable[[int, int | None], None] | None = None,
                 env: Mapping[str, str] | None = None, home: Path | None = None,
                 keep_on_redirect: Iterable[str] = (), client: Client | None = None,
                 output_dir: Path | None = None,
                 on_status: Callable[[str], None] | None = None):
        self.cache_dir = cache_dir
        self.output_dir = output_dir  # -o DIR: the user's directory, where nothing is replaced
        self.client = client or Client(headers, env=env, home=home,
                                       keep_on_redirect=keep_on_redirect, session=session,
                                       timeout=timeout)
        self.retries = retries
        self.backoff = backoff
        self.on_progress = on_progress
        self.on_status = on_status or (lambda line: None)

    @property
    def requests_made(self) -> int:
        return self.client.requests_made

    def sidecar(self, url: str) -> Expected | None:
        """A checksum published next to the archive: URL.sha256 or URL.md5 (sha256sum format)."""
        name = file_name(url)
        for suffix, algorithm, pattern in ((".sha256", "sha256", _HEX64), (".md5", "md5", _HEX32)):
            side = url.split("?", 1)[0].split("#", 1)[0] + suffix
            # a step of its own: a server that does not answer holds it for the command's wait
            self.on_status(f"asking {server(url)} for {escape(name + suffix)}, a checksum "
                           "published beside the archive")
            try:
                with self.client.request("GET", side) as r:
                    if r.status_code != 200:
                        continue
                    content = self.client.read_body(r, side, 65536,
                                                    deadline=time.monotonic() + 60)
            except (requests.RequestException, urllib3.exceptions.HTTPError, Stalled,
                    DownloadFailed):
                return None
            if len(content) > 65536:
                continue
            text = content.decode(errors="replace")
            for line in text.splitlines():
                m = pattern.search(line[:1024])
                if m and (name in line or len(text.split()) <= 2):
                    return Expected(algorithm, m.group(1).lower(), f"sidecar {redact(side)}")
        return None

    # --- the cache ----------------------------------------------------------------------------

    def fetch(self, url: str, expected: Expected | None = None, use_sidecar: bool = True,
              arriving: Arriving | None = None) -> Fetched:
        """`url` into the cache or the output dir, checked against `expected` (else a sidecar
        checksum); `arriving` hears each attempt begin and each piece written, for a reader
        that follows the part file as it grows (fetch/arriving.py)."""
        name = file_name(url)
        directory = self.output_dir or self.cache_dir
        for d in dict.fromkeys((self.cache_dir, directory)):
            option = "-o" if d == self.output_dir else "--cache-dir"
            try:
                make_dirs(d)  # 0755 whatever the umask: under 000 anyone could swap the archive
            except FileExistsError:  # a file, a FIFO, a device of that name: left as it is
                mode = os.stat(d).st_mode if os.path.exists(d) else os.lstat(d).st_mode
                what = "a file" if stat.S_ISREG(mode) else kind(mode)
                raise DownloadFailed(f"{show_path(d)} is {what}, not a directory to "
                                     "download into", f"give {option} a directory",
                                     code="download-target-exists") from None
            except OSError as exc:
                error = os_error(exc, f"cannot create the download directory {show_path(d)}",
                                 kind=DownloadFailed)
                error.hint += f" (or pass {option} DIR somewhere writable)"
                raise error from None
        dest = directory / name
        option = "-o" if directory == self.output_dir else "--cache-dir"
        _must_be_a_file_or_nothing(dest)
        expected = expected or expected_for(name, None)
        try:
            with self._locked(dest):
                try:
                    return self._fetch(url, name, dest, expected, use_sidecar, arriving)
                finally:
                    if not os.path.lexists(dest.with_name(name + ".part")):
                        self._forget_part(dest)  # what was said of a part that is gone
        except OSError as exc:
            if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise
            copy = self._read_only_copy(dest, expected)
            if copy is None:  # a download that cannot be written, whichever command asked
                # under -o the lock and the record are the cache's: name the one refused
                in_output = option == "-o" and (exc.filename is None or Path(
                    os.fsdecode(exc.filename)).parent == directory)
                where = "download directory" if in_output else "download cache"
                error = os_error(exc, f"cannot write to the {where} "
                                 f"{show_path(directory if in_output else self.cache_dir)}",
                                 kind=DownloadFailed)
                error.hint += f" (or pass {'-o' if in_output else '--cache-dir'} DIR " \
                              "somewhere writable)"
                raise error from None
            return copy

    def _read_only_copy(self, dest: Path, expected: Expected | None) -> Fetched | None:
        """A cache this user may read but not write (a fleet's CUDNN_SETUP_CACHE_DIR that root
        filled, a read-only mount): a finished copy there with the expected checksum is the
        archive, read without the lock (the tool replaces a cached file only by a rename)."""
        if expected is None or self.output_dir is not None or not dest.is_file():
            return None
        self.on_status(f"checking the copy of {escape(dest.name)} in {show_path(dest.parent)}, "
                       "a cache this user cannot write")
        try:
            if not self._matches(dest, expected):
                return None
            sha = file_digest(dest) if expected.algorithm != "sha256" else expected.digest
            return Fetched(dest, sha, dest.stat().st_size, True, 0, expected, self.requests_made)
        except OSError:
            return None

    def _fetch(self, url: str, name: str, dest: Path, expected: Expected | None,
               use_sidecar: bool, arriving: Arriving | None = None) -> Fetched:
        _must_be_a_file_or_nothing(dest)
        present = dest.exists()
        if present and expected is not None:
            self.on_status(f"checking the copy of {escape(name)} in {show_path(dest.parent)}")
            if self._matches(dest, expected):
                sha = file_digest(dest) if expected.algorithm != "sha256" else expected.digest
                return Fetched(dest, sha, dest.stat().st_size, True, 0, expected, self.requests_made)
        if expected is None and use_sidecar:
            expected = self.sidecar(url)
            if expected is not None:
                return self._fetch(url, name, dest, expected, False, arriving)
        if expected is None and present:
            current = self._still_current(url, dest)
            if current is not None:
                sha, how = current
                return Fetched(dest, sha, dest.stat().st_size, True, 0, None, self.requests_made,
                               validated_by=how)
        if present and self.output_dir is not None:
            # the user's file, and not (as far as anything shows) this archive: left alone
            why = ("its checksum is not the archive's" if expected is not None else
                   "nothing shows it is this archive (no checksum known, and this tool did not "
                   "save it there)")
            raise DownloadFailed(f"{show_path(dest)} already exists and {why}; it was left as "
                                 "it is", "move it aside, choose another -o DIR, or give the "
                                 "archive's --sha256", code="download-target-exists")
        part = dest.with_name(name + ".part")
        _must_be_a_file_or_nothing(part)
        limit = expected.size if expected is not None and expected.size else None
        resumed_from: int | None = None
        validators: dict[str, str] = {}
        attempt = 0
        self.on_status(f"downloading {escape(name)} from {server(url)}")
        digest = _PartDigest(expected.algorithm if expected is not None else "sha256")
        while True:
            try:
                start, validators = self._download(url, name, part, expected, limit, digest,
                                                   arriving)
                if resumed_from is None:
                    resumed_from = start
                break
            except _Retry as exc:
                attempt += 1
                if attempt > self.retries or exc.final:
                    kind = TimedOut if exc.code == "timed-out" else DownloadFailed
                    raise kind(f"download of {redact(url)} failed after {attempt} "
                               f"{'attempt' if attempt == 1 else 'attempts'}: {exc}", exc.hint or "run again: the part "
                               f"already downloaded ({show_path(part)}) is resumed",
                               code=exc.code) from None
                wait = self.backoff * (2 ** (attempt - 1))
                self.on_status(f"downloading {escape(name)}: {exc}; retrying in {wait:.1f} s "
                               f"(attempt {attempt + 1} of {self.retries + 1})")
                time.sleep(wait)
        size = part.stat().st_size
        if expected is not None and expected.size and size != expected.size:
            part.unlink()
            raise size_mismatch(name, expected, size, "as downloaded")
        digest.catch_up(part, size)  # a part found complete (416) was not written by this run
        sha, got = digest.hexdigests()
        if expected is not None and got != expected.digest:
            part.unlink()
            raise mismatch(escape(name), expected, got)
        self._place(part, dest)  # the part's record goes once the part has (fetch)
        self._remember(url, dest, size, sha, validators)
        return Fetched(dest, sha, size, False, resumed_from or 0, expected, self.requests_made)

    def _matches(self, path: Path, expected: Expected) -> bool:
        if expected.size and path.stat().st_size != expected.size:
            return False  # not read at all: the size already says no
        return file_digest(path, expected.algorithm) == expected.digest

    def _place(self, part: Path, dest: Path) -> None:
        """The complete part becomes the archive. In the cache it replaces whatever stale copy
        was there (the tool's own); in the user's directory it never replaces anything."""
        if self.output_dir is None:
            os.replace(part, dest)
            return
        try:
            os.link(part, dest)  # fails, rather than replaces, if a file appeared meanwhile
        except FileExistsError:
            raise DownloadFailed(f"{show_path(dest)} appeared while the archive was "
                                 "downloaded; it was left as it is, the download is kept as "
                                 f"{show_path(part)}", "move one of them aside",
                                 code="download-target-exists") from None
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
                raise
            if os.path.lexists(dest):  # a filesystem without hard links (vfat, some FUSE)
                raise DownloadFailed(f"{show_path(dest)} appeared while the archive was "
                                     "downloaded; it was left as it is",
                                     "move it aside", code="download-target-exists") from None
            os.rename(part, dest)
            return
        part.unlink()

    # --- what the cache knows ---------------------------------------------------------------

    def _meta_path(self, dest: Path) -> Path:
        if self.output_dir is None:
            return dest.with_name(dest.name + META_SUFFIX)
        # a user's directory holds only what they asked for: the record lives in the cache
        key = hashlib.sha256(os.fsencode(os.path.abspath(dest))).hexdigest()[:32]
        return self.cache_dir / "saved" / f"{key}{META_SUFFIX}"

    def _part_meta_path(self, dest: Path) -> Path:
        meta = self._meta_path(dest)
        return meta.with_name(meta.name[:-len(META_SUFFIX)] + PART_META_SUFFIX)

    def _remember_part(self, url: str, dest: Path, validators: dict[str, str]) -> None:
        """What the server said of the file a new part is the start of: a later run resumes
        the part only if the server still says so (If-Range)."""
        path = self._part_meta_path(dest)
        try:
            path.unlink(missing_ok=True)  # an older part's: never this one's
            if validators:
                make_dirs(path.parent)
                write_atomic(path, json.dumps({"url_sha256": hashlib.sha256(
                    url.encode()).hexdigest(), **validators}).encode())
        except OSError:
            pass  # without it the part is not resumed without a checksum: slower, never wrong

    def _forget_part(self, dest: Path) -> None:
        try:
            self._part_meta_path(dest).unlink(missing_ok=True)
        except OSError:
            pass

    def _resume_validator(self, url: str, dest: Path) -> str | None:
        """The If-Range value for resuming dest's part: the strong ETag, else the strong
        Last-Modified date (strong_only), the server gave when the part began; None when none
        was recorded (by this user or root, for this URL) or it is not one a request can
        carry."""
        path = self._part_meta_path(dest)
        if not _nobody_else_wrote(path):
            return None
        try:
            meta = json.loads(read_regular(path, 65536))
        except (OSError, ValueError, RecursionError):
            return None
        if not isinstance(meta, dict) or \
                meta.get("url_sha256") != hashlib.sha256(url.encode()).hexdigest():
            return None
        etag, date = meta.get("etag"), meta.get("last_modified")
        if isinstance(etag, str) and _STRONG_ETAG.fullmatch(etag):
            return etag
        if isinstance(date, str) and _HTTP_DATE.fullmatch(date):
            return date
        return None

    def _remember(self, url: str, dest: Path, size: int, sha: str,
                  validators: dict[str, str]) -> None:
        meta = {"url_sha256": hashlib.sha256(url.encode()).hexdigest(), "size": size,
                "sha256": sha, "path": os.fsdecode(os.path.abspath(dest)), **validators}
        try:
            path = self._meta_path(dest)
            make_dirs(path.parent)
            write_atomic(path, json.dumps(meta).encode())
        except OSError:
            pass  # without it the next run downloads again: slower, never wrong

    def _still_current(self, url: str, dest: Path) -> tuple[str, str] | None:
        """(sha256, how) when the file at dest is still what the server serves at `url`.

        The server must name the same size, and the same value for each of ETag and
        Last-Modified that it and the record both name, as when the file was fetched (a HEAD
        request), and the file must still hash as it did then.
        """
        if not (_nobody_else_wrote(dest) and _nobody_else_wrote(self._meta_path(dest))):
            return None  # a shared cache: another user could have planted both with one size
        try:
            meta = json.loads(read_regular(self._meta_path(dest), 65536))
        except (OSError, ValueError, RecursionError):
            return None
        if not isinstance(meta, dict) or meta.get("url_sha256") != \
                hashlib.sha256(url.encode()).hexdigest() or meta.get("size") != dest.stat().st_size:
            return None
        try:
            with self.client.request("HEAD", url, stream=False) as r:
                if r.status_code != 200:
                    return None
                length = r.headers.get("Content-Length", "")
                now = {"etag": r.headers.get("ETag"), "last_modified": r.headers.get("Last-Modified")}
        except (requests.RequestException, urllib3.exceptions.HTTPError, Stalled):
            return None
        if not length.isdigit() or int(length) != meta["size"]:
            return None
        # every validator both sides name must match: a changed ETag is not outvoted by a
        # Last-Modified that a copy kept, or that a change within the same second left alone
        named = [k for k in ("etag", "last_modified") if now[k] and meta.get(k)]
        if not named or any(now[k] != meta[k] for k in named):
            return None
        how = f"{named[0]} unchanged"
        sha = file_digest(dest)
        return (sha, how) if sha == meta.get("sha256") else None

    # --- one at a time --------------------------------------------------------------------------

    def _locked(self, dest: Path) -> "_ArchiveLock":
        if self.output_dir is None:
            path = dest.with_name(dest.name + ".lock")
        else:
            key = hashlib.sha256(os.fsencode(os.path.abspath(dest))).hexdigest()[:32]
            path = self.cache_dir / f"{key}.lock"
        return _ArchiveLock(path, dest.name, self.on_status)

    # --- one attempt ----------------------------------------------------------------------------

    def _download(self, url: str, name: str, part: Path, expected: Expected | None,
                  limit: int | None, digest: "_PartDigest",
                  arriving: Arriving | None = None) -> tuple[int, dict[str, str]]:
        """Fetch into `part`, resuming it when the server agrees; return (the offset it resumed
        at, 0 when it started over; the server's validators for the cache)."""
        have = part.stat().st_size if part.exists() else 0
        if have and not _nobody_else_wrote(part):
            # another user's bytes would become the start of the archive: started over
            part.unlink()
            have = 0
        if limit is not None and have > limit:
            part.unlink()  # longer than the archive can be: nothing in it is worth keeping
            have = 0
        dest = part.with_name(name)
        if_range = self._resume_validator(url, dest) if have else None
        if have and if_range is None and expected is None:
            # nothing would tell the part's bytes from those of a file the server has changed
            # since, and no checksum judges the result: started over, never spliced
            part.unlink()
            have = 0
        headers = {"Range": f"bytes={have}-"} if have else {}
        if if_range is not None:
            headers["If-Range"] = if_range
        try:
            r = self.client.request("GET", url, headers)
        except Stalled as exc:
            raise _Retry(str(exc), code="timed-out", final=self.client.budget.spent) from None
        except TimedOut as exc:
            raise _Retry(exc.message, exc.hint, code="timed-out", final=True) from None
        except requests.exceptions.SSLError as exc:
            raise DownloadFailed(f"TLS error talking to {redact(url)}: {reason(exc, url)}",
                                 "check the server's certificate, or set REQUESTS_CA_BUNDLE to "
                                 "your CA bundle", code="tls-error") from None
        except requests.exceptions.ConnectionError as exc:
            kind = connection_failure(exc, url)
            if kind == "unknown-host":
                raise DownloadFailed(f"cannot resolve the host of {redact(url)}",
                                     "check the URL and this machine's DNS",
                                     code="unknown-host") from None
            if kind == "connection-refused":
                raise _Retry(f"connection refused by {redact(url)}",
                             "is the server up, and is the port right?",
                             code="connection-refused") from None
            raise _Retry(reason(exc, url)) from None
        except requests.exceptions.InvalidURL as exc:
            raise DownloadFailed(f"{redact(url)} cannot be fetched: {reason(exc, url)}",
                                 "check the URL", code="bad-url") from None
        with r:
            validators = {k: v[:200] for k, v in (("etag", r.headers.get("ETag")),
                                                  ("last_modified", r.headers.get("Last-Modified")))
                          if v}
            # If-Range is honoured by the server, but a proxy may pass Range on without it: a
            # 206 or 416 under another validator than the one asked for is the new file's
            said = validators.get("etag" if (if_range or "").startswith('"')
                                  else "last_modified")
            changed = if_range is not None and said is not None and said != if_range
            # what a later resume, or a reuse of the finished copy, may rest on
            strong = strong_only(validators, r.headers.get("Date"))
            if r.status_code == 416:
                m = _TOTAL_ONLY.match(r.headers.get("Content-Range", "").strip())
                if m and int(m.group(1)) == have and not changed:
                    return have, strong  # the part was already complete
                part.unlink()
                raise _Retry("the server refused to resume (416); starting over" if not changed
                             else "the part is of a file that changed since it began; "
                             "starting over")
            if r.status_code >= 500:
                raise _Retry(f"server error {r.status_code}")
            if r.status_code not in (200, 206):
                raise status_error(url, r.status_code, "check the URL; NVIDIA's own download "
                                   "pages need a login, so use your mirror's address")
            refuse_encoded(r, url)
            if r.status_code == 206:
                if changed:  # the new file's rest
                    part.unlink(missing_ok=True)
                    raise _Retry("the server resumed a file that changed since the part began, "
                                 "though asked not to (If-Range); starting over")
                start, total = _resumed_range(r, have)
                if start is None:
                    part.unlink(missing_ok=True)
                    raise _Retry("the server resumed at another offset than asked; starting "
                                 "over")
                mode = "ab"
            else:  # 200: the server ignored Range, the file changed, or nothing to resume
                mode, start = "wb", 0
                length = r.headers.get("Content-Length", "").strip()
                total = int(length) if length.isdigit() and len(length) < 16 else None
                self._remember_part(url, dest, strong)
            if expected is not None and expected.size and total is not None \
                    and total != expected.size:
                # the manifest and the server disagree: refused before a byte is read
                part.unlink(missing_ok=True)
                raise size_mismatch(name, expected, total, "as the server says")
            cap = limit if limit is not None else (total if total is not None else MAX_ARCHIVE)
            # the bytes kept are hashed before the new ones (read back once, on a resume)
            digest.catch_up(part, start)
            self._write(r, url, name, part, mode, start, total, cap,
                        expected if limit is not None else None, digest, arriving)
            return start, strong

    def _write(self, r: requests.Response, url: str, name: str, part: Path, mode: str,
               have: int, total: int | None, cap: int, promised: Expected | None,
               digest: "_PartDigest", arriving: Arriving | None = None) -> None:
        done = have
        budget_before = self.client.budget.left

        try:
            with _open_part(part, mode) as f:
                if arriving is not None:  # the part exists now, `have` bytes long
                    arriving.begin(part, have, part.with_name(name), f.fileno(),
                                   total if total is not None else
                                   promised.size if promised is not None else None)

                def sink(chunk: bytes) -> None:
                    nonlocal done
                    f.write(chunk)
                    digest.update(chunk)  # the bytes written are the bytes hashed
                    done += len(chunk)
                    if arriving is not None:
                        f.flush()  # in the file before a follower is told it may read them
                        arriving.wrote(done)
                    if self.on_progress:
                        self.on_progress(done, total)

                self.client.read_body(r, url, cap - have, sink)
        except Stalled as exc:
            if done - have >= PROGRESS_REFUNDS:
                # a long download that stalls after real progress is a flaky link, not a silent
                # server: its wait is not held against the command (the retries still bound it)
                self.client.budget.left = max(self.client.budget.left, budget_before)
            raise _Retry(f"{exc}", code="timed-out", final=self.client.budget.spent) from None
        except (requests.exceptions.ChunkedEncodingError, requests.exceptions.ConnectionError,
                urllib3.exceptions.HTTPError, ConnectionError) as exc:
            raise _Retry(f"connection lost after {done} bytes ({reason(exc, url)})") from None
        except OSError as exc:
            error = os_error(exc, f"cannot write {show_path(part)}", kind=DownloadFailed)
            error.hint += " (the part downloaded so far is kept and resumed)"
            raise error from None
        if done > cap:
            part.unlink(missing_ok=True)
            if promised is not None:
                raise size_mismatch(name, promised, f"more than {cap}", "cut off there")
            raise DownloadFailed(f"{redact(url)} sent more than the {cap} bytes it was to "
                                 "have; cut off there and not kept", "the server or the "
                                 "manifest is wrong: check the mirror", code="body-too-long")
        if total is not None and done < total:
            raise _Retry(f"connection closed after {done} of {total} bytes")


class _PartDigest:
    """The part's checksums, computed on the bytes as they are written: sha256 (the cache's
    record) and the algorithm a checksum was published in, when it is another (md5). Bytes a
    run finds in the part already (a resume) are read back once; an attempt that starts over
    starts the hashes over."""

    def __init__(self, algorithm: str):
        self.algorithm = algorithm
        self.hashes = self._fresh()
        self.done = 0

    def _fresh(self) -> list:
        names = ["sha256"] + ([self.algorithm] if self.algorithm != "sha256" else [])
        return [hashlib.new(n) for n in names]

    def update(self, chunk: bytes) -> None:
        for h in self.hashes:
            h.update(chunk)
        self.done += len(chunk)

    def catch_up(self, part: Path, upto: int) -> None:
        """Hash the part's first `upto` bytes, which this run did not write: from the start
        unless what was hashed is exactly a prefix of them."""
        if upto == self.done:
            return
        if upto < self.done:
            self.hashes, self.done = self._fresh(), 0
            if upto == 0:
                return
        with open(part, "rb") as f:
            f.seek(self.done)
            while self.done < upto:
                piece = f.read(min(CHUNK, upto - self.done))
                if not piece:
                    raise OSError(errno.EIO, f"{part.name} was cut short while it was read")
                self.update(piece)

    def hexdigests(self) -> tuple[str, str]:
        """(sha256, the published algorithm's digest)."""
        return self.hashes[0].hexdigest(), self.hashes[-1].hexdigest()


class _ArchiveLock:
    """An exclusive flock on `<name>.lock`, waited for with a status line every few seconds.

    The holder removes the file before letting go, so nothing stays behind; a waiter that then
    holds the lock of a removed file sees that its inode is no longer the path's and tries
    again. A killed holder's lock goes with its process."""

    def __init__(self, path: Path, name: str, on_status: Callable[[str], None]):
        self.path, self.name, self.on_status = path, name, on_status
        self.fd: int | None = None

    def __enter__(self) -> "_ArchiveLock":
        started = time.monotonic()
        last = None  # when the last line about the wait was said
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC |
                             os.O_NONBLOCK, 0o600)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
                    raise
                # the tool makes a plain file there and removes it: a link or a directory in
                # its place is not the tool's, and is never followed or removed
                _must_be_a_file_or_nothing(self.path, "a lock file this tool made")
                raise
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO opens (O_RDWR) and locks too
                os.close(fd)
                _must_be_a_file_or_nothing(self.path, "a lock file this tool made")
                continue  # swapped for a file since it was opened: open that
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                now = time.monotonic()
                if now - started > LOCK_WAIT:
                    raise DownloadFailed(f"another run has been downloading {escape(self.name)} "
                                         f"for over {LOCK_WAIT:.0f} s", "wait for it, or stop "
                                         "it", code="download-failed") from None
                if last is None or now - last >= 5:
                    self.on_status(f"waiting for another run's download of {escape(self.name)} "
                                   f"({now - started:.0f} s so far)")
                    last = now
                time.sleep(0.2)
                continue
            try:
                same = os.fstat(fd).st_ino == os.lstat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                self.fd = fd
                return self
            os.close(fd)  # the holder removed it as we opened it: take the new one

    def __exit__(self, *exc) -> None:
        try:
            os.unlink(self.path)
        except OSError:
            pass
        os.close(self.fd)


class _Retry(Exception):
    """A failure worth another attempt (dropped or refused connection, 5xx, timeout); `final`
    when no attempt may follow (the command's waiting budget is spent)."""

    def __init__(self, message: str, hint: str = "", code: str = "download-failed",
                 final: bool = False):
        super().__init__(message)
        self.hint, self.code, self.final = hint, code, final


def _resumed_range(r: requests.Response, have: int) -> tuple[int | None, int | None]:
    """(start, the size the file will have) of a 206 that continues exactly at `have`; (None,
    None) otherwise. Where the server names no total (`*`), the range's own end is the size:
    a body that stops short of it is cut short, not the end of the file."""
    m = _CONTENT_RANGE.match(r.headers.get("Content-Range", "").strip())
    if not m or int(m.group(1)) != have or int(m.group(2)) < have:
        return None, None
    end = int(m.group(2))
    total = int(m.group(3)) if m.group(3) != "*" else None
    if total is not None and end != total - 1:
        return None, None  # a part of the file, not the rest of it
    length = r.headers.get("Content-Length", "").strip()
    if length and length.isdigit() and int(length) != end - have + 1:
        return None, None
    return have, end + 1


def _nobody_else_wrote(path: Path) -> bool:
    """Whether only this user or root could have written the file at `path` and put it there
    (state/trust.py's rule): a file checked by no checksum is reused only then. The file and its
    directory owned by one of them, neither writable by group or others (the directory may be
    sticky, as /tmp is: others can then add names but not replace this one)."""
    mine = {0, os.geteuid()}
    try:
        st, parent = os.lstat(path), os.stat(path.parent)
    except OSError:
        return False
    return (stat.S_ISREG(st.st_mode) and st.st_uid in mine and not st.st_mode & 0o022
            and parent.st_uid in mine
            and (not parent.st_mode & 0o022 or bool(parent.st_mode & stat.S_ISVTX)))


FILE_MODE = 0o644  # a download, whatever the umask: readable by all, writable by its owner


def _open_part(part: Path, mode: str) -> IO[bytes]:
    """The `.part` file opened to append ("ab") or start over ("wb"), FILE_MODE whatever the
    umask (under `umask 000` open() gives 0666: anyone could change the bytes between the
    checksum and the install), never through a link planted since it was looked at. Open for
    reading too: an install following the download reads this very file (fetch/arriving.py)."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    if mode == "ab":
        flags |= os.O_APPEND
    else:  # a new file: one planted under its name since it was removed is not written into
        part.unlink(missing_ok=True)
        flags |= os.O_EXCL
    fd = os.open(part, flags, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, mode)


def _must_be_a_file_or_nothing(path: Path, what: str = "") -> None:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise DownloadFailed(f"{show_path(path)} exists and is {kind(mode)}, not "
                             f"{what or 'a regular file'}", "move it aside, or download into "
                             "another directory", code="download-target-exists")
