"""`download`: fetch an archive into the cache (resumable, checksummed), or into `-o DIR`
without replacing anything there; also the first step of `install URL` and `install VERSION`.
"""
from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Callable, Optional

from cudnn_setup.commands.base import Context, command
from cudnn_setup.errors import DownloadFailed, UsageError
from cudnn_setup.fetch.checksums import Expected, expected_for
from cudnn_setup.fetch.download import Downloader, Fetched, default_cache_dir, file_name
from cudnn_setup.fetch.http import Client
from cudnn_setup.report import Result
from cudnn_setup.text import escape, show_path

# Names of --header headers that may follow a redirect to another host (comma-separated);
# by default none does, and credentials (Authorization, Cookie…) never do.
KEEP_HEADERS_VAR = "CUDNN_SETUP_REDIRECT_KEEP_HEADERS"
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an HTTP header name (RFC 9110)
STATUS_EVERY = 5.0  # seconds between "downloading N of M MB" lines where there is no terminal


def parse_headers(headers: list[str] | None) -> dict[str, str]:
    parsed = {}
    for h in headers or []:
        key, colon, value = h.partition(":")
        key, value = key.strip(), value.strip()
        if not colon or not _TOKEN.fullmatch(key) or any(c in value for c in "\r\n\0"):
            raise UsageError("--header must look like 'Name: value' (one line, a name of "
                             "letters, digits and -)", "e.g. --header 'Authorization: Bearer TOKEN'")
        parsed[key] = value
    return parsed


def check_sha256(value: str | None) -> None:
    if value is not None and not (len(value) == 64 and
                                  all(c in "0123456789abcdefABCDEF" for c in value)):
        raise UsageError(f"--sha256 {value[:80]!r} is not 64 hex digits", "copy the checksum whole")


def client_for(ctx: Context, headers: list[str] | None) -> Client:
    """The one HTTP client of a command: its --header lines, the caller's network settings,
    the redirect policy and one waiting budget for every request the command makes."""
    keep = [h.strip() for h in ctx.env.get(KEEP_HEADERS_VAR, "").split(",") if h.strip()]
    return Client(parse_headers(headers), env=ctx.env, home=ctx.home, keep_on_redirect=keep)


def status_progress(ctx: Context, name: str) -> Callable[[int, Optional[int]], None]:
    """Progress as a status line at most every STATUS_EVERY seconds, for a log or a pipe."""
    last = [0.0]

    def update(done: int, total: Optional[int]) -> None:
        now = time.monotonic()
        if now - last[0] < STATUS_EVERY and (total is None or done < total):
            return
        last[0] = now
        of = f" of {_size(total)}" if total else ""
        ctx.status(f"downloading {escape(name)}: {_size(done)}{of}")

    return update


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB"


def fetch(result: Result, ctx: Context, url: str, sha256: str | None,
          headers: list[str] | None, cache_dir: Path | None,
          expected: Expected | None = None, output_dir: Path | None = None,
          client: Client | None = None) -> Fetched:
    """Download `url` into the cache, or `output_dir` (or reuse it), checked against what is
    known of it (`expected`, when the caller knows where the checksum comes from)."""
    cache = cache_dir or default_cache_dir(ctx.env, ctx.home)
    name = file_name(url)
    progress = ctx.progress("downloading") or status_progress(ctx, name)
    downloader = Downloader(cache, client=client or client_for(ctx, headers),
                            on_progress=progress, output_dir=output_dir, on_status=ctx.status)
    fetched = downloader.fetch(url, expected or expected_for(name, sha256))
    result.add("download", fetched.to_dict())
    if fetched.from_cache:
        how = ("already there, the same archive" if output_dir else "reused from the cache") + (f" (the server's {fetched.validated_by.replace('_', '-')})"
                       if fetched.validated_by else "")
    elif fetched.resumed_from:
        how = f"resumed at byte {fetched.resumed_from} (the server sent the rest: 206)"
    else:
        how = "downloaded"
    check = (f"{fetched.expected.algorithm} matches ({fetched.expected.source})" if fetched.expected
             else "no checksum known: pass --sha256 to check it")
    result.lines.append(f"{escape(fetched.path.name)}: {how}, {fetched.size} bytes; {check}")
    return fetched


@command("download", fails_as=DownloadFailed)
def download(result: Result, ctx: Context, url: str, output: Path | None = None,
             sha256: str | None = None, headers: list[str] | None = None,
             cache_dir: Path | None = None) -> None:
    check_sha256(sha256)
    fetched = fetch(result, ctx, url, sha256, headers, cache_dir, output_dir=output)
    result.add("path", str(fetched.path))
    result.lines.append(f"saved as {show_path(fetched.path)}")
