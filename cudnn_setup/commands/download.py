"""`download`: fetch an archive into the cache (resumable, checksummed), from its URL or, given a
version, from a source of releases (NVIDIA's tree, a mirror, a PyPI index); also the first
step of `install URL`.
"""
from __future__ import annotations

from pathlib import Path

from cudnn_setup.steps.command_wrapper import command
from cudnn_setup.steps.context import Context, root_if_any
from cudnn_setup.steps.by_version import (VERSION, asking, choose_source, classify,
                                             describe_offer, fetcher, host_choice,
                                             pick_version)
from cudnn_setup.steps.fetching import check_sha256, fetch, saved_line
from cudnn_setup.errors import DownloadFailed, UsageError
from cudnn_setup.report import Result
from cudnn_setup.sources.base import PYPI
from cudnn_setup.urls import redact


@command("download", fails_as=DownloadFailed)
def download(result: Result, ctx: Context, url: str, output: Path | None = None,
             sha256: str | None = None, headers: list[str] | None = None,
             cache_dir: Path | None = None, *, from_: str | None = None,
             index_url: str | None = None, mirror: str | None = None, cuda: str | None = None,
             cuda_root: Path | None = None) -> None:
    check_sha256(sha256)
    pypi = from_ == PYPI or index_url is not None
    choosing = from_ is not None or index_url is not None or mirror is not None or cuda is not None
    if classify(url, prerelease=pypi) != VERSION:
        if choosing:
            raise UsageError("--from, --index-url, --mirror and --cuda choose a release by version; "
                             f"{redact(url)} is not a version", "give a version such as 9.1, or drop them")
        fetched = fetch(result, ctx, url, sha256, headers, cache_dir, output_dir=output)
        result.add("path", str(fetched.path))
        result.lines.append(saved_line(fetched.path))
        return
    root = root_if_any(ctx, cuda_root)
    if root is not None:
        result.cuda_root = str(root.path)
    source = choose_source(ctx, from_=from_, mirror=mirror, index_url=index_url,
                           headers=headers, cache_dir=cache_dir)
    asking(ctx, source, f"cuDNN {url.strip()}")
    offer = pick_version(source, url, root, cuda, host_choice(ctx))
    describe_offer(result, offer, source, f"newest {url.strip()}")
    obtained = source.obtain(offer, fetcher(result, ctx, headers, cache_dir, source,
                                            output_dir=output), sha256)
    result.add("provenance", obtained.provenance.to_dict())
    result.add("path", str(obtained.path))
    result.lines.append(saved_line(obtained.path))
