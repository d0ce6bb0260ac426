"""A project page of a package index: PEP 691 JSON or PEP 503 HTML, parsed in one linear pass
with every field checked and every count bounded.

JSON (`application/vnd.pypi.simple.v1+json`): {"meta": {"api-version"}, "name", "files":
[{"filename", "url", "hashes": {"sha256": …}, "yanked", "size"…}]}. HTML (PEP 503, also
`application/vnd.pypi.simple.v1+html`): one `<a href="URL#sha256=HEX">filename</a>` per file,
`data-yanked` marking a yanked one. Relative URLs are taken from the page's own URL (after
redirects). A page that is neither is refused (DownloadFailed, exit 6), naming the index.
"""
from __future__ import annotations

import html
import json
import re
import urllib.parse

from msgspec import Struct

from cudnn_setup.errors import DownloadFailed
from cudnn_setup.text import escape
from cudnn_setup.urls import redact

JSON_TYPE = "application/vnd.pypi.simple.v1+json"
HTML_TYPES = ("application/vnd.pypi.simple.v1+html", "text/html")
ACCEPT = f"{JSON_TYPE}, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"
MAX_PAGE_BYTES = 16 << 20  # PyPI's page for a project with 10,000 files is a few MB
MAX_FILES = 100_000
_HEX64 = re.compile(r"^[0-9a-fA-F]{64}\Z")
_NAME = re.compile(r"^[A-Za-z0-9._+!-]{1,255}\Z")
_NOT_ONE_LINE = re.compile("[\r\n\0]")


class IndexFile(Struct, frozen=True):
    filename: str
    url: str  # absolute, without the fragment
    sha256: str | None  # as the index publishes it (lower case), or None
    yanked: bool = False
    size: int | None = None


def _bad(page_url: str, why: str) -> DownloadFailed:
    return DownloadFailed(f"the package index page {redact(page_url)} is damaged: {why}",
                          "check the index URL (--index-url, PIP_INDEX_URL, pip.conf)",
                          code="index-damaged")


def _file(page_url: str, filename, href, sha256, yanked, size) -> IndexFile | None:
    """One checked entry; None for an entry that is not a file this tool could use."""
    if not isinstance(filename, str) or not _NAME.match(filename):
        return None
    if not isinstance(href, str) or not href or len(href) > 8192 or _NOT_ONE_LINE.search(href):
        raise _bad(page_url, f"{filename}: its URL is missing or not one line")
    try:  # `http://[x/` and `http://[::1` raise ValueError in urllib
        # an absolute href (PyPI's, most mirrors') needs no joining, the slow part of a page
        url = href if href.startswith(("https://", "http://")) else \
            urllib.parse.urljoin(page_url, href)
        url, _, _ = url.partition("#")
        parts = urllib.parse.urlsplit(url)
        parts.port  # a port that is not a number in range raises too
    except ValueError:
        raise _bad(page_url, f"{filename}: its URL does not parse") from None
    if parts.scheme not in ("http", "https", "file"):
        raise _bad(page_url, f"{filename}: its URL is not http(s) or file://")
    if sha256 is not None:
        if not isinstance(sha256, str) or not _HEX64.match(sha256):
            raise _bad(page_url, f"{filename}: its sha256 is not 64 hex digits")
        sha256 = sha256.lower()
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        size = None
    return IndexFile(filename, url, sha256, bool(yanked), size)


def parse_json(data: bytes, page_url: str) -> list[IndexFile]:
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise _bad(page_url, f"not valid JSON ({str(exc)[:100]})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("files"), list):
        raise _bad(page_url, "no `files` list")
    meta = doc.get("meta")
    version = meta.get("api-version") if isinstance(meta, dict) else None
    if not isinstance(version, str) or not version.startswith("1."):
        raise _bad(page_url, f"api-version {version!r:.20} is not 1.x (PEP 691)")
    files = doc["files"]
    if len(files) > MAX_FILES:
        raise _bad(page_url, f"{len(files)} files, more than {MAX_FILES}")
    out = []
    for entry in files:
        if not isinstance(entry, dict):
            raise _bad(page_url, "a file entry is not an object")
        hashes = entry.get("hashes")
        if not isinstance(hashes, dict):
            raise _bad(page_url, f"{str(entry.get('filename'))[:80]}: `hashes` is not an object")
        item = _file(page_url, entry.get("filename"), entry.get("url"), hashes.get("sha256"),
                     entry.get("yanked"), entry.get("size"))
        if item is not None:
            out.append(item)
    return out


# The HTML scanner. The standard library's html.parser rescans what it has seen: 60 KB of `<a `
# took it 42 s, 4 MB of `<!x` never ended. Here the regular expressions search for the few marks
# that matter (a comment, `<a`, `</a`), one pass in C; an anchor's tag is read within a bounded
# window by stepping from quote to quote; every search for a closing mark moves the scan past
# it or ends the page (HTML's own rule: an unclosed comment or tag runs to the end). Only
# anchors matter on a PEP 503 page.
_MARK = re.compile(r"<!--|</?[Aa](?=[\s/>])")
_TAG_MAX = 64 << 10  # an anchor's tag: an 8 KiB href and its attributes fit many times over
_TAG_SPECIAL = re.compile(r"[>\"']")
_ATTR = re.compile(r"([^\s/>=\"']+)(?:\s*=\s*(?:\"([^\"]*)\"|'([^']*)'|([^\s\"'>]*)))?")
_TAGS_IN_TEXT = re.compile(r"<[^>]*>?")
_TEXT_CAP = 1024  # characters of an anchor's text looked at; a file name is at most 255


def _attributes(body: str) -> dict[str, str]:
    """A tag's attributes: names in lower case, the first of each name wins, values unescaped."""
    attrs: dict[str, str] = {}
    for name, double, single, bare in _ATTR.findall(body):
        attrs.setdefault(name.lower(), html.unescape(double or single or bare))
    return attrs


def _tag_end(text: str, pos: int, limit: int) -> int:
    """Where the tag whose attributes start at `pos` ends (its `>`, quoted ones skipped), or -1
    when it does not end before `limit`. Each step moves past a quote or ends."""
    while True:
        m = _TAG_SPECIAL.search(text, pos, limit)
        if m is None:
            return -1
        if m.group() == ">":
            return m.start()
        close = text.find(m.group(), m.end(), limit)
        if close < 0:
            return -1
        pos = close + 1


def _anchors(text: str, page_url: str) -> list[tuple[dict[str, str], str]]:
    """The <a> elements of a page, (attributes, text), in one linear pass."""
    anchors: list[tuple[dict[str, str], str]] = []
    current: tuple[dict[str, str], int] | None = None
    pos, end = 0, len(text)
    while True:
        m = _MARK.search(text, pos)
        stop = end if m is None else m.start()
        if current is not None:  # an anchor's text runs to the next mark
            attrs, start = current
            shown = text[start:min(stop, start + _TEXT_CAP)]
            if "<" in shown:
                shown = _TAGS_IN_TEXT.sub("", shown)
            anchors.append((attrs, html.unescape(shown)))
            current = None
        if m is None:
            break
        mark = m.group()
        if mark == "<!--" or mark.startswith("</"):
            close = text.find("-->" if mark == "<!--" else ">", m.end())
            if close < 0:
                break
            pos = close + (3 if mark == "<!--" else 1)
            continue
        tag_end = _tag_end(text, m.end(), min(end, m.end() + _TAG_MAX))
        if tag_end < 0:
            if end - m.end() < _TAG_MAX:
                break  # the page ends inside the tag
            raise _bad(page_url, f"a link's tag is longer than {_TAG_MAX} characters")
        if len(anchors) >= MAX_FILES:
            raise _bad(page_url, f"more than {MAX_FILES} links")
        current, pos = (_attributes(text[m.end():tag_end]), tag_end + 1), tag_end + 1
    return anchors


def _href_name(href: str) -> str:
    """The file name an href ends with: its path's last segment, percent-decoded."""
    path = href.partition("#")[0].partition("?")[0]
    return urllib.parse.unquote(path.rpartition("/")[2])


def parse_html(data: bytes, page_url: str) -> list[IndexFile]:
    """The files of a PEP 503 page. The file name is the href's (what is downloaded is what is
    judged); anchor text that names another file is a damaged page, never a second opinion."""
    out = []
    for attrs, text in _anchors(data.decode("utf-8", "replace"), page_url):
        href = attrs.get("href")
        if not href:
            continue
        filename, shown = _href_name(href), text.strip()
        if shown and filename and shown != filename:
            raise _bad(page_url, f"a link's text {escape(shown[:100])!r} is not the name of the "
                       f"file it points to ({escape(filename[:100])!r})")
        fragment = href.partition("#")[2]
        algorithm, _, digest = fragment.partition("=")
        item = _file(page_url, filename or shown, href,
                     digest if algorithm == "sha256" else None,
                     "data-yanked" in attrs, None)
        if item is not None:
            out.append(item)
    return out


def parse_page(data: bytes, content_type: str, page_url: str) -> list[IndexFile]:
    if len(data) > MAX_PAGE_BYTES:
        raise _bad(page_url, f"larger than {MAX_PAGE_BYTES} bytes")
    kind = content_type.split(";")[0].strip().lower()
    if kind == JSON_TYPE:
        return parse_json(data, page_url)
    if kind in HTML_TYPES or not kind:
        return parse_html(data, page_url)
    raise _bad(page_url, f"its content type {kind[:60]!r} is neither PEP 691 JSON nor HTML")
