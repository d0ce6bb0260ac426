"""Fetching for every command that downloads: the Downloader built from the command's context
(cache, --header lines, the caller's environment and home), and one line for people about what
it did.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from cudnn_setup.steps.context import Context
from cudnn_setup.errors import UsageError
from cudnn_setup.fetch.checksums import Expected, expected_for
from cudnn_setup.report import Result
from cudnn_setup.text import escape, show_path
from cudnn_setup.urls import http_carries

if TYPE_CHECKING:  # requests and what it imports (about 70 ms): only for what downloads
    from cudnn_setup.fetch.arriving import Arriving
    from cudnn_setup.fetch.downloader import Downloader, Fetched
    from cudnn_setup.fetch.http import Client

# Names of --header headers that may follow a redirect to another host (comma-separated);
# by default none does, and credentials (Authorization, Cookie…) never do.
KEEP_HEADERS_VAR = "CUDNN_SETUP_REDIRECT_KEEP_HEADERS"
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an HTTP header name (RFC 9110)


def parse_headers(headers: list[str] | None) -> dict[str, str]:
    parsed = {}
    for h in headers or []:
        key, colon, value = h.partition(":")
        key, value = key.strip(), value.strip()
        if not colon or not _TOKEN.fullmatch(key) or any(c in value for c in "\r\n\0"):
            raise UsageError("--header must look like 'Name: value' (one line, a name of "
                             "letters, digits and -)", "e.g. --header 'Authorization: Bearer TOKEN'")
        if not http_carries(value):
            raise UsageError(f"--header {escape(key)}: its value holds a character HTTP cannot "
                             "carry (only Latin-1 text)", "use only ASCII characters there")
        parsed[key] = value
    return parsed


def check_sha256(value: str | None) -> None:
    if value is not None and not (len(value) == 64 and
                                  all(c in "0123456789abcdefABCDEF" for c in value)):
        raise UsageError(f"--sha256 {value[:80]!r} is not 64 hex digits", "copy the checksum whole")


def client_for(ctx: Context, headers: list[str] | None,
               env: Mapping[str, str] | None = None) -> Client:
    """The one HTTP client of a command (ctx.facts.http_client): its --header lines, the
    caller's network settings (or `env`, the caller's with a source's own additions), the
    redirect policy, and one waiting budget for every request the command makes: every
    source, the dependency wheels and each of a mirror's platforms share it."""
    keep = [h.strip() for h in ctx.env.get(KEEP_HEADERS_VAR, "").split(",") if h.strip()]
    return ctx.facts.http_client(parse_headers(headers), ctx.env if env is None else env, keep)


def downloader_for(ctx: Context, headers: list[str] | None, cache_dir: Path | None,
                   env: Mapping[str, str] | None = None, client: Client | None = None,
                   output_dir: Path | None = None) -> Downloader:
    """The Downloader for this command: the cache (or `cache_dir`), `output_dir` for
    `download -o`, the command's client (made from the --header lines and the caller's
    environment and home when not given), retries reported through ctx.status."""
    from cudnn_setup.fetch.downloader import Downloader, default_cache_dir

    cache = cache_dir or default_cache_dir(ctx.env, ctx.home)
    return Downloader(cache, client=client or client_for(ctx, headers, env),
                      on_progress=ctx.progress("downloading"),  # named per file by fetch
                      output_dir=output_dir, on_status=ctx.status)


def fetch(result: Result, ctx: Context, url: str, sha256: str | None,
          headers: list[str] | None, cache_dir: Path | None,
          expected: Expected | None = None, downloader: Downloader | None = None,
          output_dir: Path | None = None, client: Client | None = None,
          record: bool = True, arriving: Arriving | None = None) -> Fetched:
    """Download `url` into the cache, or `output_dir` (or reuse it), checked against what is
    known of it (`expected`, when the caller knows where the checksum comes from); `arriving`
    hears the bytes as they are written, for an install that reads them meanwhile."""
    from cudnn_setup.fetch.downloader import file_name

    downloader = downloader or downloader_for(ctx, headers, cache_dir, client=client,
                                              output_dir=output_dir)
    if output_dir is not None:
        downloader.output_dir = output_dir
    name = file_name(url)
    # progress goes to the CLI's renderer: a bar on a terminal, a line every few seconds else
    downloader.on_progress = ctx.progress(f"downloading {escape(name)}")
    fetched = downloader.fetch(url, expected or expected_for(name, sha256), arriving=arriving)
    if record:  # the one download a command is about (a dependency's is said in its own key)
        result.add("download", fetched.to_dict())
    if fetched.from_cache:
        how = ("already there, the same archive" if downloader.output_dir else
               "reused from the cache") + (
            f" (the server's {fetched.validated_by.replace('_', '-')})"
            if fetched.validated_by else "")
    elif fetched.resumed_from:
        how = f"resumed at byte {fetched.resumed_from} (the server sent the rest: 206)"
    else:
        how = "downloaded"
    check = (f"{fetched.expected.algorithm} matches ({fetched.expected.source})" if fetched.expected
             else "no checksum known: pass --sha256 to check it")
    result.lines.append(f"{escape(fetched.path.name)}: {how}, {fetched.size} bytes; {check}")
    return fetched


def saved_line(path: Path) -> str:
    return f"saved as {show_path(path)}"
