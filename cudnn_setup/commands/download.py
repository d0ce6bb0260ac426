"""`download`: fetch an archive into the cache (resumable, checksummed); also the first step of
`install URL`.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from cudnn_setup.commands.base import Context, command
from cudnn_setup.errors import UsageError
from cudnn_setup.fetch.checksums import Expected, expected_for
from cudnn_setup.fetch.download import Downloader, Fetched, default_cache_dir, file_name
from cudnn_setup.report import Result


def parse_headers(headers: list[str] | None) -> dict[str, str]:
    parsed = {}
    for h in headers or []:
        if ":" not in h:
            raise UsageError("--header must look like 'Name: value'",
                             "e.g. --header 'Authorization: Bearer TOKEN'")
        key, value = h.split(":", 1)
        parsed[key.strip()] = value.strip()
    return parsed


def check_sha256(value: str | None) -> None:
    if value is not None and not (len(value) == 64 and
                                  all(c in "0123456789abcdefABCDEF" for c in value)):
        raise UsageError(f"--sha256 {value!r} is not 64 hex digits", "copy the checksum whole")


def fetch(result: Result, ctx: Context, url: str, sha256: str | None,
          headers: list[str] | None, cache_dir: Path | None,
          expected: Expected | None = None) -> Fetched:
    """Download `url` into the cache (or reuse it), checked against what is known of it
    (`expected`, when the caller knows where the checksum comes from)."""
    cache = cache_dir or default_cache_dir(ctx.env, ctx.home)
    downloader = Downloader(cache, headers=parse_headers(headers),
                            on_progress=ctx.progress("downloading"))
    fetched = downloader.fetch(url, expected or expected_for(file_name(url), sha256))
    result.add("download", fetched.to_dict())
    how = "reused from the cache" if fetched.from_cache else (
        f"resumed at byte {fetched.resumed_from}" if fetched.resumed_from else "downloaded")
    check = (f"{fetched.expected.algorithm} matches ({fetched.expected.source})" if fetched.expected
             else "no checksum known: pass --sha256 to check it")
    result.lines.append(f"{fetched.path.name}: {how}, {fetched.size} bytes; {check}")
    return fetched


@command("download")
def download(result: Result, ctx: Context, url: str, output: Path | None = None,
             sha256: str | None = None, headers: list[str] | None = None,
             cache_dir: Path | None = None) -> None:
    check_sha256(sha256)
    fetched = fetch(result, ctx, url, sha256, headers, output or cache_dir)
    result.add("path", str(fetched.path))
    if output and fetched.path.parent != output:
        shutil.copy2(fetched.path, output)
