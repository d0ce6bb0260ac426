"""Every HTTP request the tool makes goes through one `Client`: one redirect policy, one waiting
budget, bounded bodies, errors that show URLs without their secrets.

Redirects are followed here, hop by hop (requests' own following is off):
- on a hop to another host, port or scheme (https → http included; http → https on the same
  host and default ports excepted, as requests decides it for Authorization) every `--header`
  header stays behind, except those named in `keep_on_redirect`, and the credential headers
  (SECRET_HEADERS) stay behind whatever it names; ~/.netrc is asked anew for each host;
- a loop, more than MAX_REDIRECTS hops, a 3xx without a Location, or a Location that is not
  http(s) (file://, ftp://…) is `bad-redirect`.

Waiting is bounded per command, not per request: a `Budget` of seconds (one read timeout, 60 s,
by default) is spent by every request that timed out and by every stretch of SLOW_SECONDS in
which a body brought fewer than SLOW_BYTES (a server sending one byte a second never times a
read out). Each request's timeouts are cut to what is left, and once it is spent the next wait
is refused at once (`timed-out`): a server that accepts and never answers costs one time
limit, however many requests or retries the command makes. (The Downloader gives back what a
stall cost when the attempt had brought a MiB or more first: a long download over a flaky link
is bounded by its retries, not by this budget.) A server that drips its status line and
headers a byte at a time never lets a read time out either: a watchdog shuts the request's
socket down when the answer has not begun within the connect and read timeouts together.

The tool asks for the identity encoding (Accept-Encoding: identity) and refuses a body sent
encoded anyway (`content-encoded`): an archive's checksum is of its bytes, and resuming needs
byte offsets of the file itself.

Nothing here reads the process environment: proxies, the CA bundle and ~/.netrc come from the
`env` and `home` the caller hands in (requests' own `trust_env` is off).
"""
from __future__ import annotations

import netrc
import os
import socket
import stat
import threading
import time
from typing import Callable, Iterable, Mapping
from urllib.parse import urljoin, urlsplit

import requests
import requests.adapters
import urllib3
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from cudnn_setup.errors import DownloadFailed
from cudnn_setup.text import escape
from cudnn_setup.untrusted import NotRegular, kind, regular_size
from cudnn_setup.urls import BadUrl, check, http_carries, redact, scrub, server

MAX_REDIRECTS = 10
# Headers that carry credentials: never sent on past a redirect to another host, whatever the
# caller asks. Every header given with --header is dropped too, unless its name is listed in
# the caller's `keep_on_redirect` ($CUDNN_SETUP_REDIRECT_KEEP_HEADERS for the CLI).
SECRET_HEADERS = ("authorization", "proxy-authorization", "cookie", "x-api-key", "x-auth-token",
                  "private-token")
REDIRECTS = (301, 302, 303, 307, 308)
CHUNK = 1 << 20
SLOW_SECONDS = 30.0  # a body that brings fewer than SLOW_BYTES in this long is stalled
SLOW_BYTES = 1024  # (curl's --speed-limit 1024 --speed-time 30)
BUDGET = 60.0  # seconds a command may spend waiting on servers that do not answer


class TimedOut(DownloadFailed):
    default_code = "timed-out"


class Budget:
    """Seconds one command may still spend waiting on silent or stalled servers."""

    def __init__(self, seconds: float = BUDGET):
        self.total = seconds
        self.left = seconds

    def spend(self, seconds: float) -> None:
        self.left -= max(seconds, 0.0)

    @property
    def spent(self) -> bool:
        return self.left <= 0


class Stalled(Exception):
    """A wait that ended without an answer (a timeout, or a body below the slow limit)."""


def leaves_origin(old: str, new: str) -> bool:
    """Whether a redirect goes to another host, port or scheme (http → https on the same host
    and default ports excepted, as requests decides it for Authorization)."""
    a, b = urlsplit(old), urlsplit(new)
    if a.hostname != b.hostname:
        return True
    defaults = {"http": 80, "https": 443}
    a_port, b_port = a.port or defaults.get(a.scheme), b.port or defaults.get(b.scheme)
    if a.scheme == "http" and b.scheme == "https" and a_port == 80 and b_port == 443:
        return False
    return a.scheme != b.scheme or a_port != b_port


MAX_NETRC_BYTES = 1 << 20  # real ones are a few lines


class Network:
    """What the caller's environment says about reaching a URL: proxies, CA bundle, netrc."""

    def __init__(self, env: Mapping[str, str] | None = None, home=None):
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

    def verify(self, url: str) -> str | bool:
        """The CA bundle for an https `url`: $REQUESTS_CA_BUNDLE, else $CURL_CA_BUNDLE (a file or
        a directory of certificates), else the default. One that is neither is refused from its
        type, never handed to OpenSSL, which blocked for ever opening a FIFO; one that is not
        there is said so (requests said only "OSError")."""
        name = next((n for n in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE") if self.env.get(n)),
                    None)
        if name is None or urlsplit(url).scheme != "https":
            return True if name is None else self.env[name]
        path = self.env[name]
        hint = "point it at a PEM file of CA certificates (or a directory of them), or unset it"
        try:
            mode = os.stat(path).st_mode
        except OSError as exc:
            raise DownloadFailed(f"${name} {escape(path)} cannot be used as a CA bundle: "
                                 f"{exc.strerror or exc}", hint, code="tls-error") from None
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise DownloadFailed(f"${name} {escape(path)} is {kind(mode)}, not a CA bundle",
                                 hint, code="tls-error")
        return path

    def credentials(self, url: str) -> tuple[str, str] | None:
        """(login, password) for the URL's host from $NETRC or ~/.netrc, as curl and requests
        find them; a file that cannot be parsed is ignored, as requests ignores it, and so is
        one past MAX_NETRC_BYTES: the netrc module reads a file whole and lexes it a character
        at a time (a 20 MB one took 15 s and 220 MB here, growing with its size)."""
        if self._netrc is False:
            path = self.env.get("NETRC") or (str(self.home / ".netrc") if self.home else None)
            try:
                fits = bool(path) and regular_size(path) <= MAX_NETRC_BYTES
                self._netrc = netrc.netrc(path) if fits else None
            except (netrc.NetrcParseError, OSError, UnicodeError, NotRegular):
                self._netrc = None
        if not self._netrc:
            return None
        found = self._netrc.authenticators(urlsplit(url).hostname or "")
        if not found:
            return None
        login, _, password = found
        return login or "", password or ""


# The connection each thread's request is using, so the watchdog can cut exactly that one.
_IN_USE: dict[int, object] = {}


class _Tracked:
    def _get_conn(self, timeout=None):
        conn = super()._get_conn(timeout)
        _IN_USE[threading.get_ident()] = conn
        return conn


class _HTTPPool(_Tracked, HTTPConnectionPool):
    pass


class _HTTPSPool(_Tracked, HTTPSConnectionPool):
    pass


_POOLS = {"http": _HTTPPool, "https": _HTTPSPool}


class _Adapter(requests.adapters.HTTPAdapter):
    """requests' adapter, with pools that say which connection a request is using."""

    def init_poolmanager(self, *args, **kwargs):
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = _POOLS

    def proxy_manager_for(self, proxy, **kwargs):
        manager = super().proxy_manager_for(proxy, **kwargs)
        manager.pool_classes_by_scheme = _POOLS
        return manager


class _Watchdog:
    """Shuts down the socket of this thread's request if its answer has not begun in time."""

    def __init__(self, seconds: float):
        self.fired = False
        self.thread = threading.get_ident()
        _IN_USE.pop(self.thread, None)
        self.timer = threading.Timer(seconds, self._cut)
        self.timer.daemon = True

    def _cut(self) -> None:
        self.fired = True
        sock = getattr(_IN_USE.get(self.thread), "sock", None)
        try:
            if sock is not None:
                sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def __enter__(self) -> "_Watchdog":
        self.timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self.timer.cancel()
        _IN_USE.pop(self.thread, None)


class _Session(requests.Session):
    """requests without its own redirect reading: even with allow_redirects=False it parses
    a 3xx's Location ahead (for `Response.next`), and a Location like `http://[::1/x` raised
    ValueError out of the request, an exit 70. `Client.request` reads Location itself, under
    its own policy."""

    def get_redirect_target(self, resp: requests.Response) -> None:
        return None


def carried(url: str, headers: Mapping[str, str], auth: tuple[str, str] | None,
            proxies: Mapping[str, str]) -> None:
    """DownloadFailed, before anything is sent, when a header value or a credential (the URL's
    user-info, ~/.netrc's, the proxy's) holds a character HTTP cannot carry (urls.http_carries;
    it was an exit 70). Only what is sent is named, never its value."""
    from urllib.parse import unquote

    def user_info(address: str, what: str) -> list[tuple[str, str]]:
        try:
            parts = urlsplit(address)
            return [(what, unquote(p)) for p in (parts.username, parts.password) if p]
        except ValueError:  # a proxy that does not parse: requests says so, as bad-url
            return []

    pieces = [(f"the {escape(name[:40])} header", value) for name, value in headers.items()]
    pieces += user_info(url, "the user name or password in the URL")
    pieces += [("the login or password ~/.netrc ($NETRC) gives", part) for part in auth or ()]
    for proxy in proxies.values():
        pieces += user_info(proxy, "the user name or password of the proxy ($http_proxy…)")
    for what, value in pieces:
        if not http_carries(value):
            raise DownloadFailed(f"{what} for {server(url)} holds a character HTTP cannot "
                                 "carry (only Latin-1 text); nothing was sent",
                                 "use only ASCII characters there", code="bad-url")


class Client:
    """One command's HTTP: the user's headers, the environment's network settings, one budget."""

    def __init__(self, headers: Mapping[str, str] | None = None, *,
                 env: Mapping[str, str] | None = None, home=None,
                 keep_on_redirect: Iterable[str] = (), session: requests.Session | None = None,
                 timeout: tuple[float, float] = (10.0, 60.0), budget: Budget | None = None,
                 slow_seconds: float = SLOW_SECONDS):
        self.headers = dict(headers or {})
        self.slow_seconds = slow_seconds
        self.session = session or _Session()
        self.session.trust_env = False  # the environment comes from the caller, through Network
        for prefix in ("http://", "https://"):
            self.session.mount(prefix, _Adapter())
        self.network = Network(env, home)
        self.keep_on_redirect = {h.lower() for h in keep_on_redirect} - set(SECRET_HEADERS)
        self.timeout = timeout
        self.budget = budget or Budget()
        self.requests_made = 0

    def _timeouts(self, url: str) -> tuple[float, float]:
        if self.budget.spent:
            raise TimedOut(f"{redact(url)} was not asked: servers of this command already went "
                           f"unanswered for {self.budget.total:.0f} s",
                           "check the servers and the network, then run again")
        left = self.budget.left
        return min(self.timeout[0], left), min(self.timeout[1], left)

    def request(self, method: str, url: str, extra: Mapping[str, str] | None = None,
                stream: bool = True) -> requests.Response:
        """One request, its redirects followed under the policy above. Errors of the network
        come out as requests' own exceptions (Timeout as Stalled), for the caller to word."""
        extra = {"Accept-Encoding": "identity", **(extra or {})}
        headers = {**self.headers, **extra}
        origin, seen = url, {url}
        for _ in range(MAX_REDIRECTS + 1):
            sent = dict(headers)
            if leaves_origin(origin, url):
                sent = {k: v for k, v in headers.items() if k in extra or (
                    k.lower() in self.keep_on_redirect)}
            auth = None
            if not any(k.lower() == "authorization" for k in sent):
                auth = self.network.credentials(url)
            proxies = self.network.proxies(url)
            carried(url, sent, auth, proxies)
            timeouts = self._timeouts(url)
            self.requests_made += 1
            started = time.monotonic()
            watchdog = _Watchdog(timeouts[0] + timeouts[1])
            try:
                with watchdog:
                    r = self.session.request(method, url, headers=sent, auth=auth,
                                             stream=stream, timeout=timeouts,
                                             allow_redirects=False,
                                             proxies=proxies,
                                             verify=self.network.verify(url))
            except (requests.exceptions.Timeout, urllib3.exceptions.TimeoutError) as exc:
                self.budget.spend(time.monotonic() - started)
                raise Stalled(f"no answer in {timeouts[1]:.0f} s ({reason(exc, url)})") from None
            except requests.RequestException as exc:
                if not watchdog.fired:
                    if isinstance(exc.__context__, urllib3.exceptions.InvalidHeader):
                        # the answer's headers contradict themselves: nothing came to resume
                        raise DownloadFailed(f"{redact(url)} answered with headers that "
                                             f"contradict each other ({reason(exc, url)})",
                                             "the server, or a proxy on the way, is broken: "
                                             "check the mirror", code="download-failed") from None
                    raise
                self.budget.spend(time.monotonic() - started)
                raise Stalled(f"the answer had not begun after {timeouts[0] + timeouts[1]:.0f} s "
                              "(a status line or headers sent a byte at a time)") from None
            if watchdog.fired:  # cut just as the answer came: its body is gone with the socket
                r.close()
                self.budget.spend(time.monotonic() - started)
                raise Stalled(f"the answer came only after {timeouts[0] + timeouts[1]:.0f} s")
            if r.status_code not in REDIRECTS:
                return r
            r.close()
            location = r.headers.get("Location")
            if not location:
                raise DownloadFailed(f"{redact(url)} answered {r.status_code} without a "
                                     "Location", "check the URL and the server",
                                     code="bad-redirect")
            try:
                target = urljoin(url, location.strip())
                check(target)
            except (BadUrl, ValueError) as exc:
                raise DownloadFailed(f"{redact(url)} redirects to {redact(location)}, which "
                                     f"cannot be fetched: {exc}", "check the URL and the server",
                                     code="bad-redirect") from None
            if target in seen:
                raise DownloadFailed(f"{redact(origin)} redirects in a loop (back to "
                                     f"{redact(target)})", "check the URL and the server",
                                     code="bad-redirect")
            seen.add(target)
            url = target
        raise DownloadFailed(f"{redact(origin)} redirects more than {MAX_REDIRECTS} times",
                             "check the URL and the server", code="bad-redirect")

    def read_body(self, r: requests.Response, url: str, limit: int,
                  sink: Callable[[bytes], None] | None = None,
                  deadline: float | None = None) -> bytes:
        """The body (or, with a sink, each chunk handed to it and b"" returned), at most
        limit + 1 bytes so the caller can tell "too large"; Stalled when a read times out,
        the body crawls below the slow limit, or `deadline` (monotonic) passes."""
        refuse_encoded(r, url)
        data = bytearray()
        got = 0
        window_start, window_bytes = time.monotonic(), 0
        started = window_start
        try:
            while got <= limit:
                # read1 hands over whatever has arrived: a dropped connection loses nothing that
                # reached us, and a server dripping bytes is seen between reads.
                chunk = r.raw.read1(min(CHUNK, limit + 1 - got))
                if not chunk:
                    break
                got += len(chunk)
                if sink is None:
                    data += chunk
                else:
                    sink(chunk)
                now = time.monotonic()
                window_bytes += len(chunk)
                if deadline is not None and now > deadline:
                    self.budget.spend(now - started)
                    raise Stalled(f"still not complete after {now - started:.0f} s "
                                  f"({got} bytes)")
                if now - window_start >= self.slow_seconds:
                    if window_bytes < SLOW_BYTES:
                        self.budget.spend(now - window_start)
                        raise Stalled(f"{window_bytes} bytes in {now - window_start:.0f} s: "
                                      "the server has all but stopped")
                    window_start, window_bytes = now, 0
        except (requests.exceptions.Timeout, urllib3.exceptions.TimeoutError,
                TimeoutError) as exc:
            self.budget.spend(min(self.timeout[1], time.monotonic() - window_start))
            raise Stalled(f"no data for {self.timeout[1]:.0f} s after {got} bytes "
                          f"({reason(exc, url)})") from None
        return bytes(data)

    def read_small(self, r: requests.Response, url: str, limit: int, whose: str,
                   seconds: float = 60.0) -> bytes:
        """A small file's body (a manifest, an index page) within `seconds` however the server
        trickles it, with a stall or a dropped connection said as the tool's own errors;
        `whose` names what to check ("the mirror", "the index")."""
        try:
            return self.read_body(r, url, limit, deadline=time.monotonic() + seconds)
        except Stalled as exc:
            raise TimedOut(f"reading {redact(url)}: {exc}",
                           f"check {whose} and the network") from None
        except (requests.RequestException, urllib3.exceptions.HTTPError,
                ConnectionError) as exc:
            raise DownloadFailed(f"reading {redact(url)} failed: {reason(exc, url)}",
                                 "run again") from None


def refuse_encoded(r: requests.Response, url: str) -> None:
    """A body whose bytes are not the file's: a Content-Encoding other than identity, or a
    Transfer-Encoding other than chunked framing alone. The client undoes neither (http.client
    reads a body framed `gzip, chunked` as if it had no framing): its bytes would be kept as
    the archive, framing and all, and judged as a checksum mismatch or a damaged archive."""
    encoding = r.headers.get("Content-Encoding", "").strip().lower()
    if encoding not in ("", "identity"):
        raise DownloadFailed(f"{redact(url)} was sent {escape(encoding[:40])}-encoded, though "
                             "the identity encoding was asked for", "the server or a proxy "
                             "re-encodes files: serve the archive as it is (no Content-Encoding)",
                             code="content-encoded")
    transfer = r.headers.get("Transfer-Encoding", "").strip().lower()
    if [c.strip() for c in transfer.split(",") if c.strip()] not in ([], ["chunked"]):
        raise DownloadFailed(f"{redact(url)} was sent with Transfer-Encoding "
                             f"{escape(transfer[:40])}, which this client does not undo",
                             "the server or a proxy re-encodes files: serve the archive as it "
                             "is (no transfer coding but chunked)", code="content-encoded")


def status_error(url: str, status: int, what: str = "") -> DownloadFailed:
    """The error for a status other than success, redirect or "not there"."""
    if status in (401, 403):
        return DownloadFailed(f"{redact(url)} answered {status} "
                              f"{'Unauthorized' if status == 401 else 'Forbidden'}",
                              "give credentials in ~/.netrc or with --header 'Authorization: …'",
                              code="unauthorized")
    if status == 404:
        return DownloadFailed(f"{redact(url)} answered 404 Not Found",
                              what or "check the URL", code="not-found")
    return DownloadFailed(f"{redact(url)} answered {status}", "check the URL and the server")


def reason(exc: BaseException, url: str = "") -> str:
    """A network error in a few words, with every URL in it redacted."""
    text = str(exc)[:600]
    for marker, words in (("Name or service not known", "the host name does not resolve"),
                          ("Temporary failure in name resolution", "the host name does not resolve"),
                          ("No address associated", "the host name does not resolve"),
                          ("Connection refused", "connection refused"),
                          ("Errno 111", "connection refused"),
                          ("Read timed out", "read timed out"),
                          ("timed out", "timed out"),
                          ("Connection reset", "connection reset"),
                          ("RemoteDisconnected", "the server closed the connection"),
                          ("IncompleteRead", "the connection broke off mid-body"),
                          ("CERTIFICATE_VERIFY_FAILED", "the certificate did not verify")):
        if marker in text:
            return words
    return escape(scrub(f"{type(exc).__name__}: {text[:200]}", url))


def connection_failure(exc: requests.RequestException, url: str) -> str:
    """Which kind of failure a ConnectionError was: unknown-host, connection-refused or other."""
    text = str(exc)
    if "Name or service not known" in text or "No address associated" in text or \
            "Temporary failure in name resolution" in text:
        return "unknown-host"
    if "Connection refused" in text or "Errno 111" in text:
        return "connection-refused"
    return "download-failed"
