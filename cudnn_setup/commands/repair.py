"""`repair`: put a managed install back as its manifest records it, from the archive it was
installed from (the cache's copy, or fetched again where the manifest says it came from)."""
from __future__ import annotations

import errno
import os
from pathlib import Path

from cudnn_setup.errors import ArchiveRejected, UsageError
from cudnn_setup.facts.cuda import find_cuda_root
from cudnn_setup.fetch.checksums import Expected
from cudnn_setup.placement import repair as engine
from cudnn_setup.report import Result
from cudnn_setup.state.manifest import Manifest
from cudnn_setup.steps.command_wrapper import command
from cudnn_setup.steps.context import Context, which
from cudnn_setup.text import escape, plural, show_path
from cudnn_setup.urls import redact


@command("repair")
def repair(result: Result, ctx: Context, *, cuda_root: Path | None = None,
           dry_run: bool = False) -> None:
    root = find_cuda_root(ctx.env, cuda_root)
    result.cuda_root = str(root.path)
    outcome = engine.repair(root, lambda manifest: obtain(result, ctx, manifest),
                            dry_run=dry_run, lock_timeout=ctx.lock_timeout,
                            on_status=ctx.status, xz=which(ctx, "xz"), env=ctx.env,
                            on_commit=lambda: setattr(result, "changed", True))
    result.cudnn_version = outcome.manifest.cudnn_version if outcome.manifest else None
    result.changed = outcome.changed and not dry_run
    result.add("repair", outcome.to_dict())
    result.add("would_change", outcome.changed if dry_run else None)
    _describe(result, outcome, str(root.path), dry_run)


def obtain(result: Result, ctx: Context, manifest: Manifest) -> Path:
    """The archive the manifest's install read, as a local file: where it was read from when
    that was a file here, else the cache's copy, else fetched again from the URL it came from
    (the download checks the recorded sha256; the staging checks it again)."""
    from cudnn_setup.fetch.downloader import default_cache_dir
    from cudnn_setup.fetch.redist import local_path

    source = manifest.source
    location = (source.provenance or {}).get("location")
    remote = location is not None and location.split("://", 1)[0].lower() in ("http", "https")
    tried = []
    if location is not None and not remote:
        try:
            local = local_path(location) if location.lower().startswith("file:") else \
                Path(location)
            if local.is_file():
                return local
            tried.append(show_path(local))
        except (UsageError, OSError) as exc:  # read from disk: a file:// URL of another
            if isinstance(exc, OSError) and exc.errno != errno.ENAMETOOLONG:  # host, a name
                raise  # too long for any file: as gone
            tried.append(redact(location))
    # the recorded name is read from disk: only a plain file name may lead into the cache
    plain = source.name not in ("", ".", "..") and "/" not in source.name and \
        len(os.fsencode(source.name)) <= 255  # a name no file system holds is in no cache
    cached = default_cache_dir(ctx.env, ctx.home) / source.name if plain else None
    if not remote:
        if cached is not None and cached.is_file():
            return cached
        tried += [show_path(cached)] if cached is not None else []
        if not tried:
            tried.append(escape(source.name))
        raise ArchiveRejected(
            f"the archive cudnn-setup installed from, {escape(source.name)}, is gone "
            f"(looked for {', '.join(tried)}); nothing was changed",
            f"put it back at {tried[0]}, or install again with --force from a copy of it",
            code="archive-unreadable")
    if "?…" in location or "#…" in location:
        # recorded as shown: without its query, which may have held a token; asking for the
        # URL as recorded would fetch something else
        if cached is not None and cached.is_file():
            return cached  # staged against the recorded sha256 like any other copy
        raise ArchiveRejected(
            f"the archive cudnn-setup installed from, {escape(source.name)}, came from "
            f"{location}, recorded without its query (it may hold a token), and the cache "
            "holds no copy; nothing was changed",
            "fetch it into the cache with `cudnn-setup download URL` (the whole URL), then run "
            "repair again", code="archive-unreadable")
    from cudnn_setup.steps.fetching import fetch

    expected = Expected("sha256", source.sha256, "the manifest's record of the archive "
                        "installed") if source.sha256 else None
    return fetch(result, ctx, location, None, None, None, expected=expected).path


def _describe(result: Result, outcome: engine.RepairOutcome, root: str, dry_run: bool) -> None:
    if outcome.recovered:
        result.lines.append(outcome.recovered)
    version = outcome.manifest.cudnn_version if outcome.manifest else "?"
    if outcome.manifest is None:  # only an interrupted transaction was (or would be) completed
        result.lines += [f"note: {n}" for n in outcome.notes]
        result.lines.append(f"cudnn-setup has no install in {root} besides that; nothing else "
                            "to repair")
        return
    if not outcome.damage:
        result.lines.append(f"cuDNN {version} in {root} is as cudnn-setup installed it; "
                            "nothing to repair")
    else:
        head = "would put back" if dry_run else "put back"
        what = plural(len(outcome.damage), 'file and link', 'files and links')
        result.lines.append(f"{head} {what} of cuDNN {version} in {root}:")
        result.lines += [f"  {d.path}: {d.describe()}" for d in outcome.damage]
    kept = [d.path for d in outcome.damage if d.kept]
    if kept:
        where = outcome.kept_in or ".cudnn-setup/changed/"
        result.lines.append(f"{'would keep' if dry_run else 'kept'} what stood at "
                            f"{', '.join(kept)} in {where} (changed since install; "
                            "uninstall removes it: copy it elsewhere to keep it)")
    if outcome.archive:
        result.lines.append(f"the files came from {escape(outcome.archive)} (its sha256 is the "
                            "manifest's)")
    result.lines += [f"note: {n}" for n in outcome.notes]
