"""URLs given by users, config files and servers: judged before use, and shown without secrets.

Every message, error, note or JSON value that shows a URL goes through `redact`, whichever
layer makes it (mirror settings, manifests, downloads, redirects), so a password or a token in
the user-info, the query or the fragment never reaches a screen or a log. A URL that does not
even parse is still redacted, by plain text rules.
"""
from __future__ import annotations

import ipaddress
import re
from urllib.parse import SplitResult, urlsplit

from cudnn_setup.text import escape, hide_userinfo

SHOWN = 300  # characters of a URL shown; the rest is elided
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]{0,31}):")
# A URL inside free text (an exception's words): scheme, then anything up to a space or quote.
_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,31}://[^\s'\"<>]*")
_URL_WORD = re.compile(r"(url: ?)(\S+)")  # urllib3's "with url: /path?query"
_HOST_LABEL = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?\Z")
_CONTROL = re.compile(r"[\x00-\x20\x7f-\x9f]")
# A lone surrogate: an undecodable byte of a command line, or JSON's `\ud800` escape in an
# index page or a mirror's manifest. No request can carry it, and the file name taken from
# the URL would make every system call raise.
_SURROGATE = re.compile("[\ud800-\udfff]")


class BadUrl(ValueError):
    """Why a URL cannot be used, in words fit for a message (the URL itself is not in it)."""


# An `@` that user-info ends at: followed by a host (a name, an address, [IPv6]), an optional
# port-like tail, then the end, a path, a query or a fragment. Neither class holds `@`, so
# scanning every `@` of a long text stays linear. `_AT_NO_HOST`: an `@` with no host after it
# (`https://u:p@/x` still shows a password), taken only where no `@` has a host.
_AT_HOST = re.compile(r"@(?=(?:\[[^\]/?#@]*\]?|[A-Za-z0-9._~%!$&'()*+,;=-]+)(?::[^/?#@]*)?"
                      r"(?:[/?#]|\Z))")
_AT_NO_HOST = re.compile(r"@(?=(?::[^/?#@]*)?(?:[/?#]|\Z))")
_PATHLIKE = ("/", "./", "../", "~")


def _userinfo(text: str) -> tuple[str, str, str] | None:
    """(scheme part, user-info, host and the rest) when `text` holds user-info: the text
    before the last `@` that a host follows, back to `//` (with or without the scheme's colon:
    `https//u:p@h/`), or to the start when there is no `//` (`u:p@host/x`). The password may
    hold any character, `#`, `/` and `?` included. None for a text without user-info, and for
    a schemeless local path."""
    at = _last(_AT_HOST, text)
    hostless = at is None
    at = _last(_AT_NO_HOST, text) if at is None else at
    if at is None:
        return None
    head = text[:at]
    slashes = head.find("//")
    if slashes >= 0 and "@" not in head[:slashes]:
        start = slashes + 2
        if hostless and "/" in head[start:]:
            return None  # `https://h/a@/b`, `file:///a@/b`: an `@` in the path, not user-info
    elif text.startswith(_PATHLIKE) or ("/" in head and ":" not in head):
        return None  # a file path with an `@` in it, not a URL
    else:
        start = 0
    return text[:start], head[start:], text[at + 1:]


def _last(pattern: re.Pattern[str], text: str) -> int | None:
    at = None
    for m in pattern.finditer(text):
        at = m.start()
    return at


def http_carries(text: str) -> bool:
    """Whether a request can carry `text` in a header or in Basic credentials: http.client
    sends header values, and requests the credentials, as Latin-1 (anything else raised
    UnicodeEncodeError from deep inside the request)."""
    try:
        text.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return True


# In a file path: a segment `user:password@host` (a URL given where a path was expected, its
# `//` folded by the path's normalisation) loses what is before its last `@`.
def redact(url: str) -> str:
    """The URL fit to print: no user:password@ (whatever form the URL has, parsed or not), the
    query and fragment shown as `?…` / `#…`, escaped, at most SHOWN characters. A local path
    is only escaped."""
    text = str(url)
    split = _userinfo(text)
    if split is not None:
        prefix, _, rest = split
        return _cap(escape(prefix + _elide(rest)))
    if "://" not in text:
        return _cap(escape(hide_userinfo(text)))
    scheme, _, rest = text.partition("://")
    return _cap(escape(f"{scheme}://{_elide(rest)}"))


def server(url: str) -> str:
    """Where a URL's bytes come from, in a few words: its host (and port), else the URL as
    redact shows it (a file:// URL, one that does not parse)."""
    try:
        host = urlsplit(url).netloc.rpartition("@")[2]
    except ValueError:
        host = ""
    return escape(host) if host else redact(url)


def _elide(rest: str) -> str:
    """host[:port]/path with the query and fragment replaced by `?…` / `#…`."""
    path, query, fragment = rest, "", ""
    if "#" in path:
        path, fragment = path.split("#", 1)[0], "#…"
    if "?" in path:
        path, query = path.split("?", 1)[0], "?…"
    return f"{path}{query}{fragment}"


def _cap(text: str) -> str:
    return text if len(text) <= SHOWN else text[:SHOWN] + "…"


def scrub(text: str, *urls: str) -> str:
    """Free text (an exception's message, a server's words) with every URL in it redacted, and
    the secret parts of `urls` (user-info, query, fragment) removed wherever they appear."""
    text = _IN_TEXT.sub(lambda m: redact(m.group()), str(text))
    text = _URL_WORD.sub(lambda m: m.group(1) + _without_query(m.group(2)), text)
    for url in urls:
        for secret in _secret_parts(url):
            text = text.replace(secret, "…")
    return text


def _without_query(path: str) -> str:
    cut = min((i for i in (path.find("?"), path.find("#")) if i >= 0), default=-1)
    return path if cut < 0 else path[:cut] + "?…"


def _secret_parts(url: str) -> list[str]:
    parts = []
    split = _userinfo(url)
    rest = url.partition("://")[2] if "://" in url else ""
    if split is not None:
        userinfo = split[1]
        parts += [userinfo] + [p for p in re.split(r"[:#/?]", userinfo) if len(p) >= 3]
        rest = split[2]
    end = min((i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0),
              default=len(rest))
    tail = rest[end:]
    for mark in ("?", "#"):
        if mark in tail:
            secret = tail.split(mark, 1)[1].split("#", 1)[0]
            if len(secret) >= 3:
                parts.append(secret)
    return sorted(parts, key=len, reverse=True)


def check(url: str, schemes: tuple[str, ...] = ("http", "https")) -> SplitResult:
    """The URL split, once it is one this tool can use: a scheme of `schemes`, no spaces or
    control characters, a host that a resolver could be asked for (http/https), a port in range.
    BadUrl (a ValueError) otherwise, saying why without repeating the URL."""
    text = str(url)
    if _CONTROL.search(text):
        raise BadUrl("it holds a space or a control character")
    if _SURROGATE.search(text):
        raise BadUrl("it holds a byte or a character that is not UTF-8 text (percent-encode it)")
    m = _SCHEME.match(text)
    if m and m[1].lower() not in schemes:
        raise BadUrl(f"scheme {m[1].lower()[:16]!r} is not supported (only "
                     f"{', '.join(schemes)})")
    if not m or not text[m.end():].startswith("//") and m[1].lower() != "file":
        raise BadUrl(f"it is not a URL (give {' or '.join(s + '://…' for s in schemes)})")
    scheme = m[1].lower()
    try:
        parts = urlsplit(text)
        port = parts.port  # raises for a port that is not a number in range
    except ValueError as exc:  # "Invalid IPv6 URL", "Port out of range 0-65535"…
        raise BadUrl(_why(str(exc))) from None
    if scheme == "file":
        return parts
    host = parts.hostname
    if not host:
        raise BadUrl("it names no host")
    if port == 0:
        raise BadUrl("port 0 cannot be connected to")
    _check_host(host, "[" in parts.netloc)
    return parts


def _why(text: str) -> str:
    if "IPv6" in text:
        return "its IPv6 address is not closed with ]"
    if "Port" in text or "port" in text:
        return "its port is not a number from 1 to 65535"
    return "it does not parse"


def _check_host(host: str, bracketed: bool) -> None:
    if bracketed:
        try:
            ipaddress.IPv6Address(host.split("%", 1)[0])
        except ValueError:
            raise BadUrl("the address in [ ] is not an IPv6 address") from None
        return
    if len(host) > 253:
        raise BadUrl("its host name is longer than 253 characters")
    try:
        ascii_host = host.encode("idna").decode("ascii")
    except UnicodeError:
        raise BadUrl("its host name is not a valid domain name") from None
    labels = ascii_host.rstrip(".").split(".")
    if not all(_HOST_LABEL.match(label) for label in labels):
        raise BadUrl("its host name is not a valid domain name")
