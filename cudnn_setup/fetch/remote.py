"""Small reads from a redist tree (NVIDIA's or a mirror of it): the manifests, the index page
that lists them, and whether an archive is there. http(s) goes through a requests session like
the Downloader's (proxies and ~/.netrc from the environment, the user's --header lines); a
`file://` tree is read from disk, so a mirror on a shared filesystem needs no server.
"""
from __future__ import annotations

import os
import re
from typing import Mapping

import requests

from cudnn_setup.errors import DownloadFailed
from cudnn_setup.fetch.download import redact
from cudnn_setup.fetch.redist import listed_labels, local_path

INDEX_LIMIT = 4 << 20  # an index page listing a few hundred files
_MANIFEST_NAME = re.compile(r"^redistrib_(\d{1,4}\.\d{1,4}\.\d{1,6})\.json$")


def _label_order(label: str) -> tuple[int, ...]:
    return tuple(int(p) for p in label.split("."))


class Reader:
    """Reads small files below http(s) and file URLs; every failure other than "not there" is
    DownloadFailed (exit 6), with the URL shown without credentials."""

    def __init__(self, session: requests.Session | None = None,
                 headers: Mapping[str, str] | None = None,
                 timeout: tuple[float, float] = (10.0, 30.0)):
        self.session = session or requests.Session()
        self.headers = dict(headers or {})
        self.timeout = timeout
        self.requests_made = 0

    # --- the three questions a tree is asked ---------------------------------------------------

    def labels(self, base: str) -> list[str] | None:
        """Labels of the redistrib_<X.Y.Z>.json files the tree lists, newest first; None when it
        lists none (no index page, or one that links to no manifest)."""
        path = local_path(base)
        if path is not None:
            try:
                names = os.listdir(path)
            except OSError as exc:
                raise DownloadFailed(f"cannot list the mirror directory {path}: "
                                     f"{exc.strerror or exc}",
                                     "check the mirror path (--mirror, CUDNN_SETUP_MIRROR or the "
                                     "config file)") from None
            found = sorted({m[1] for m in map(_MANIFEST_NAME.match, names) if m},
                           key=_label_order, reverse=True)
            return found or None
        # A server without directory listings answers 403 or 404 here (nginx, S3): that is "no
        # index", not a failure; a real access problem shows on the manifest or archive itself.
        page = self._get(base, INDEX_LIMIT, absent=range(400, 500))
        if page is None:
            return None
        return listed_labels(page.decode("utf-8", "replace")) or None

    def read(self, url: str, limit: int) -> bytes | None:
        """The file's bytes (at most limit + 1, so the caller can tell it was too large), or
        None when the tree does not have it."""
        path = local_path(url)
        if path is None:
            return self._get(url, limit, absent=(404, 410))
        try:
            with open(path, "rb") as f:
                return f.read(limit + 1)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise DownloadFailed(f"cannot read {path}: {exc.strerror or exc}",
                                 "check the mirror's permissions") from None

    def exists(self, url: str) -> bool:
        """Whether the tree has an archive. Asked with a one-byte ranged GET rather than HEAD:
        every server that can serve the download answers it the same way, body unread."""
        path = local_path(url)
        if path is not None:
            return path.is_file()
        response = self._request(url, {"Range": "bytes=0-0"})
        with response:
            if response.status_code in (200, 206):
                return True
            if response.status_code in (404, 410, 416):
                return False
            raise self._status_error(url, response.status_code)

    # --- http ----------------------------------------------------------------------------------

    def _request(self, url: str, headers: Mapping[str, str]) -> requests.Response:
        self.requests_made += 1
        try:
            return self.session.get(url, headers={**self.headers, **headers}, stream=True,
                                    timeout=self.timeout, allow_redirects=True)
        except requests.RequestException as exc:
            raise DownloadFailed(f"cannot reach {redact(url)}: {_reason(exc)}",
                                 "check the mirror URL and the network (proxy settings come "
                                 "from the environment)") from None

    def _get(self, url: str, limit: int, absent) -> bytes | None:
        response = self._request(url, {})
        with response:
            if response.status_code in absent:
                return None
            if response.status_code != 200:
                raise self._status_error(url, response.status_code)
            data = bytearray()
            try:
                for chunk in response.iter_content(64 << 10):
                    data += chunk
                    if len(data) > limit:
                        break
            except requests.RequestException as exc:
                raise DownloadFailed(f"reading {redact(url)} failed: {_reason(exc)}",
                                     "run again") from None
            return bytes(data[:limit + 1])

    @staticmethod
    def _status_error(url: str, status: int) -> DownloadFailed:
        if status in (401, 403):
            return DownloadFailed(f"{redact(url)} answered {status}",
                                  "give credentials in ~/.netrc or with --header "
                                  "'Authorization: …'")
        return DownloadFailed(f"{redact(url)} answered {status}", "check the mirror and run again")


def _reason(exc: Exception) -> str:
    text = str(exc)
    for marker in ("Name or service not known", "Temporary failure in name resolution",
                   "Connection refused", "timed out"):
        if marker in text:
            return marker.lower()
    return f"{type(exc).__name__}: {text[:160]}"
