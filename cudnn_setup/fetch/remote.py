"""Small reads from a redist tree (NVIDIA's or a mirror of it): the manifests, the index page
that lists them, and whether an archive is there. http(s) goes through the command's
`fetch.http.Client` (one redirect policy, one waiting budget, proxies and ~/.netrc from the
caller's environment, the user's --header lines); a `file://` tree is read from disk, so a
mirror on a shared filesystem needs no server. Every body and file is read with a cap and an
overall deadline; a FIFO or device in a file:// tree is refused from its type, never opened
for reading.
"""
from __future__ import annotations

import os
import re
from typing import Mapping

import requests

from cudnn_setup.errors import DownloadFailed
from cudnn_setup.fetch.http import (Client, Stalled, TimedOut, connection_failure, reason,
                                    status_error)
from cudnn_setup.fetch.redist import listed_labels, local_path
from cudnn_setup.text import show_path
from cudnn_setup.untrusted import NotRegular, read_regular, regular_size
from cudnn_setup.urls import redact

INDEX_LIMIT = 4 << 20  # an index page listing a few hundred files
READ_DEADLINE = 60.0  # seconds for one small file, however its server trickles it
_MANIFEST_NAME = re.compile(r"^redistrib_(\d{1,4}\.\d{1,4}\.\d{1,6})\.json\Z")


def _label_order(label: str) -> tuple[int, ...]:
    return tuple(int(p) for p in label.split("."))


# What to try when NVIDIA's own tree cannot be read: the other two sources of a version, in
# the option every command that reads the tree takes (`mirror` has no --mirror).
ELSEWHERE = "or take it from a mirror (--from URL|DIR) or a PyPI index (--from pypi)"


class Reader:
    """Reads small files below http(s) and file URLs; every failure other than "not there" is
    DownloadFailed (exit 6), with the URL shown without credentials. `mirror`: whether the
    tree is a mirror someone set (its URL may be wrong), or NVIDIA's own; `set_by`: where a
    mirror was set when not on the command line (a settings file, a variable), for the hints."""

    def __init__(self, session: requests.Session | None = None,
                 headers: Mapping[str, str] | None = None,
                 timeout: tuple[float, float] = (10.0, 30.0), client: Client | None = None,
                 mirror: bool = True, set_by: str | None = None):
        self.client = client or Client(headers, session=session, timeout=timeout)
        self.mirror = mirror
        self.tree = "the mirror" if mirror else "NVIDIA's redist tree"
        self.set_by = f" (set by {set_by})" if set_by else ""

    @property
    def requests_made(self) -> int:
        return self.client.requests_made

    # --- the three questions a tree is asked ---------------------------------------------------

    def labels(self, base: str) -> list[str] | None:
        """Labels of the redistrib_<X.Y.Z>.json files the tree lists, newest first; None when it
        lists none (no index page, or one that links to no manifest)."""
        path = local_path(base)
        if path is not None:
            try:
                names = os.listdir(path)
            except OSError as exc:
                raise DownloadFailed(f"cannot list the mirror directory {show_path(path)}: "
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
        return listed_labels(page[:INDEX_LIMIT].decode("utf-8", "replace")) or None

    def read(self, url: str, limit: int) -> bytes | None:
        """The file's bytes (at most limit + 1, so the caller can tell it was too large), or
        None when the tree does not have it."""
        path = local_path(url)
        if path is None:
            return self._get(url, limit, absent=(404, 410))
        try:
            return read_regular(path, limit + 1)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except NotRegular as exc:
            raise DownloadFailed(f"{show_path(path)} in the mirror is {exc.what}, not "
                                 "a file; not opened",
                                 "a mirror holds plain files: replace it with the manifest "
                                 "NVIDIA publishes", code="manifest-damaged") from None
        except OSError as exc:
            raise DownloadFailed(f"cannot read {show_path(path)}: {exc.strerror or exc}",
                                 "check the mirror's permissions") from None

    def exists(self, url: str) -> bool:
        """Whether the tree has an archive. Asked with a one-byte ranged GET rather than HEAD:
        every server that can serve the download answers it the same way, body unread."""
        path = local_path(url)
        if path is not None:
            try:
                regular_size(path)
                return True
            except OSError:
                return False
        response = self._request(url, {"Range": "bytes=0-0"})
        with response:
            if response.status_code in (200, 206):
                return True
            if response.status_code in (404, 410, 416):
                return False
            raise status_error(url, response.status_code)

    # --- http ----------------------------------------------------------------------------------

    def _request(self, url: str, headers: Mapping[str, str]) -> requests.Response:
        try:
            return self.client.request("GET", url, headers)
        except Stalled as exc:
            raise TimedOut(f"{redact(url)}: {exc}", f"check the mirror{self.set_by} and the network"
                           if self.mirror else f"check the network, {ELSEWHERE}") from None
        except requests.RequestException as exc:
            network = "the network (proxy settings come from the environment)"
            # the codes the downloader gives the same failures (docs/json.md)
            code = "tls-error" if isinstance(exc, requests.exceptions.SSLError) else \
                connection_failure(exc, url)
            raise DownloadFailed(f"cannot reach {redact(url)}: {reason(exc, url)}",
                                 f"check the mirror URL{self.set_by} and {network}" if self.mirror
                                 else f"check {network}, {ELSEWHERE}", code=code) from None

    def _get(self, url: str, limit: int, absent) -> bytes | None:
        response = self._request(url, {})
        with response:
            if response.status_code in absent:
                return None
            if response.status_code != 200:
                raise status_error(url, response.status_code, f"check the mirror{self.set_by} and "
                                   "run again" if self.mirror else f"run again later, {ELSEWHERE}")
            return self.client.read_small(response, url, limit, self.tree, READ_DEADLINE)
