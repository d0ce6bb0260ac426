"""A project page of a package index: PEP 691 JSON or PEP 503 HTML, parsed in one linear pass
with every field checked and every count bounded.

JSON (`application/vnd.pypi.simple.v1+json`): {"meta": {"api-version"}, "name", "files":
[{"filename", "url", "hashes": {"sha256": …}, "yanked", "size"…}]}. HTML (PEP 503, also
`application/vnd.pypi.simple.v1+html`): one `<a href="URL#sha256=HEX">filename</a>` per file,
`data-yanked` marking a yanked one. Relative URLs are taken from the page's own URL (after
redirects). A page that is neither is refused (DownloadFailed, exit 6), naming the index.
"""
from __future__ import annotations

import html.parser
import json
import re
import urllib.parse
from dataclasses import dataclass

from cudnn_setup.errors import DownloadFailed
from cudnn_setup.urls import redact

JSON_TYPE = "application/vnd.pypi.simple.v1+json"
HTML_TYPES = ("application/vnd.pypi.simple.v1+html", "text/html")
ACCEPT = f"{JSON_TYPE}, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"
MAX_PAGE_BYTES = 64 << 20  # PyPI's page for a project with 10,000 files is a few MB
MAX_FILES = 100_000
_HEX64 = re.compile(r"^[0-9a-fA-F]{64}\Z")
_NAME = re.compile(r"^[A-Za-z0-9._+!-]{1,255}\Z")


@dataclass(frozen=True)
class IndexFile:
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
    if not isinstance(href, str) or not href or len(href) > 8192 or any(
            c in href for c in "\r\n\0"):
        raise _bad(page_url, f"{filename}: its URL is missing or not one line")
    url = urllib.parse.urljoin(page_url, href)
    url, _, _ = url.partition("#")
    if urllib.parse.urlsplit(url).scheme not in ("http", "https", "file"):
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


class _Anchors(html.parser.HTMLParser):
    """The <a> elements of a page: (attributes, text), at most MAX_FILES of them."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.anchors: list[tuple[dict, list[str]]] = []
        self.open: tuple[dict, list[str]] | None = None
        self.too_many = False

    def handle_starttag(self, tag, attrs):
        if tag != "a":
            return
        if len(self.anchors) >= MAX_FILES:
            self.too_many = True
            return
        self.open = ({k: v for k, v in attrs}, [])
        self.anchors.append(self.open)

    def handle_endtag(self, tag):
        if tag == "a":
            self.open = None

    def handle_data(self, data):
        if self.open is not None and sum(map(len, self.open[1])) < 1024:
            self.open[1].append(data)


def parse_html(data: bytes, page_url: str) -> list[IndexFile]:
    parser = _Anchors()
    try:
        parser.feed(data.decode("utf-8", "replace"))
        parser.close()
    except (AssertionError, ValueError) as exc:  # what HTMLParser raises on broken markup
        raise _bad(page_url, f"not HTML ({str(exc)[:100]})") from None
    if parser.too_many:
        raise _bad(page_url, f"more than {MAX_FILES} links")
    out = []
    for attrs, text in parser.anchors:
        href = attrs.get("href")
        if not href:
            continue
        fragment = urllib.parse.urlsplit(href).fragment
        algorithm, _, digest = fragment.partition("=")
        item = _file(page_url, "".join(text).strip(), href,
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
