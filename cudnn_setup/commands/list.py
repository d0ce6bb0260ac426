"""`list`: the cuDNN releases published for this machine (the known table plus the manifests of
NVIDIA's tree or the mirror), newest first per CUDA variant, and which one the root holds.

The platform is this machine's, or `--platform` (e.g. windows-x86_64, to see what a mirror for
Windows machines would hold). On a Jetson each release is shown in the build install would
take: linux-aarch64 where NVIDIA published one, else linux-sbsa, and the output says so and why.
Both flavours are listed: cuDNN itself and its graph JIT library (`cudnn_jit`, 9.10 on).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

from packaging.version import InvalidVersion, Version

from cudnn_setup.probing.driver import DriverFacts, describe_gpus, has_driver
from cudnn_setup.steps.command_wrapper import command
from cudnn_setup.steps.context import Context, root_if_any
from cudnn_setup.steps.by_version import (asking, choose_source, host_choice, machine_wheel_tags,
                                             target)
from cudnn_setup.errors import DownloadFailed
from cudnn_setup.facts import gpu_support as S
from cudnn_setup.facts.cuda import CudaRoot
from cudnn_setup.facts.host import wheel_tags_for
from cudnn_setup.fetch import known_releases, redist
from cudnn_setup.fetch.candidates import Release, newest_first
from cudnn_setup.fetch.resolve import TABLE
from cudnn_setup.sources.base import MIRROR, NVIDIA, Offer
from cudnn_setup.sources.tree import RedistTree, offer_of
from cudnn_setup.report import WARN, Check, Result
from cudnn_setup.state.view import look

# Whether a release runs on this machine's GPU and driver, as (fits, why), or None when that is
# not known; `rows` adds a `fits` entry per release when it is given one.
FitJudge = Callable[[Release], Optional[tuple[bool, str]]]


def machine_judge(facts: DriverFacts) -> FitJudge | None:
    """The judge for the GPUs and driver that `facts` (checks.driver.driver_facts) describe, by
    facts/gpu_support.py's tables; None when neither a driver nor a GPU is known."""
    if not has_driver(facts):
        return None
    gpus = facts.gpu_pairs

    def judge(release: Release) -> tuple[bool, str] | None:
        try:
            major, minor = redist.parse_variant(release.cuda_variant)
            misfits = S.fits(release.version, str(major) if minor is None else f"{major}.{minor}",
                             gpus, facts.cuda_driver_version, facts.driver_version)
        except (ValueError, InvalidVersion):
            return None
        if not misfits:
            return True, f"runs on {describe_gpus(facts)}"
        ok = not any(m.severity == "fail" for m in misfits)
        return ok, "; ".join(f"{m.subject}: {m.reason} ({m.hint})" for m in misfits)

    return judge


def installed_archive(root: CudaRoot | None) -> dict | None:
    """{name, sha256, version} of the archive the tool installed in the root, if any."""
    if root is None:
        return None
    manifest = look(root.path).manifest  # read-only: state it cannot use is no manifest
    if manifest is None:
        return None
    return {"name": manifest.source.name, "sha256": manifest.source.sha256,
            "version": manifest.cudnn_version}


def _flavour(r) -> str:
    return r.details.get("flavour", "cudnn") if isinstance(r, Offer) else r.flavour


def _provenance(r) -> list[str]:
    return list(r.details.get("provenance", [])) if isinstance(r, Offer) else list(r.provenance)


def best_builds(releases: list, choice: redist.PlatformChoice) -> list:
    """One build per version, flavour and CUDA variant: the one on the most preferred platform
    (on a Jetson the linux-aarch64 build where one exists, else the sbsa one)."""
    best: dict[tuple, object] = {}
    for r in releases:
        rank = choice.rank(r.platform)
        if rank is None:
            continue
        key = (r.version, _flavour(r), r.cuda_variant)
        if key not in best or rank < choice.rank(best[key].platform):
            best[key] = r
    return [r for r in releases if best.get((r.version, _flavour(r), r.cuda_variant)) is r]


def rows(releases: list, installed: dict | None, judge: FitJudge | None = None) -> list[dict]:
    """The JSON entries (from sources.base.Offer): newest first, per version cuDNN before its
    JIT library, and the variants in CUDA order, newest first."""
    ordered = sorted(newest_first(releases), reverse=True,  # stable: variants keep their order
                     key=lambda r: (Version(r.version), _flavour(r) == "cudnn"))
    out = []
    for r in ordered:
        offer = isinstance(r, Offer)
        row = {"version": r.version, "cuda_variant": r.cuda_variant, "platform": r.platform,
               "flavour": _flavour(r), "file_name": r.file_name, "sha256": r.sha256,
               "size": r.size,
               # a tree's own words ("known table", "redistrib_… at …"); an index's sentence
               "source": r.details.get("source", r.checksum_from) if offer else r.source,
               "provenance": _provenance(r),
               "format": r.format if offer else "archive",
               "installed": installed is not None and r.sha256 == installed["sha256"]}
        if getattr(r, "repacked_from", None):
            row["repacked_from"] = r.repacked_from
        if judge is not None:
            verdict = judge(r)
            row["fits"] = None if verdict is None else {"ok": verdict[0], "why": verdict[1]}
        out.append(row)
    return out


@command("list")
def list_releases(result: Result, ctx: Context, *, cuda: str | None = None,
                  cuda_root: Path | None = None, mirror: str | None = None,
                  headers: list[str] | None = None, from_: str | None = None,
                  index_url: str | None = None, platform: str | None = None) -> None:
    root = root_if_any(ctx, cuda_root)
    if root is not None:
        result.cuda_root = str(root.path)
    choice = host_choice(ctx, platform)
    _, cuda_version = target(root, cuda, choice.primary)
    # --platform names another machine's builds: an index's wheels must carry its tags
    tags = wheel_tags_for(choice.primary, machine_wheel_tags(ctx)) if platform else None
    source = choose_source(ctx, from_=from_, mirror=mirror, index_url=index_url, headers=headers,
                           wheel_tags=tags)
    asking(ctx, source, "its releases" + (f" for CUDA {cuda_version}" if cuda_version else ""))
    try:
        # a redist tree is asked for every platform whose builds go here; an index's wheels
        # carry this machine's platform tags
        found = source.releases(choice.platforms if isinstance(source, RedistTree)
                                else choice.primary, cuda_version)
        releases, notes = found.offers, list(found.notes)
    except DownloadFailed as exc:
        if source.kind != NVIDIA:
            raise
        # NVIDIA's tree out of reach (offline, firewalled): the table is still NVIDIA's list.
        releases = [offer_of(r, r.url()) for r in known_releases.releases()
                    if r.platform in choice.platforms]
        notes = []
        result.checks.append(Check("manifests", WARN, f"{exc.message}; showing the known table "
                                   "only, without releases newer than it"))
    if cuda_version is not None:
        releases = [r for r in releases if redist.variant_fits(r.cuda_variant, cuda_version)]
    releases = best_builds(releases, choice)
    installed = installed_archive(root)
    if installed:
        result.cudnn_version = installed["version"]
    listed = rows(releases, installed, machine_judge(ctx.facts.driver()))
    if source.kind == MIRROR and listed and all(r["source"] == TABLE for r in listed):
        # said in the human note too: a program keys off checks, and a mirror URL mistyped
        # (404 for everything) would list as many releases as a good one, ok and exit 0
        result.checks.append(Check("manifests", WARN, f"the mirror {source.where} lists no "
                                   "redistrib_*.json: these are the known table's releases, "
                                   "not checked one by one against the mirror"))
    result.add("releases", listed)
    result.add("platform", choice.primary)
    result.add("platforms", list(choice.platforms))
    result.add("platform_why", choice.why)
    result.add("cuda_version", cuda_version)
    result.add("mirror", source.where if source.kind == MIRROR else None)
    result.add("source", {"kind": source.kind, "where": source.where})
    result.add("notes", list(notes))
    _describe(result, listed, choice, cuda_version, root, source.where, installed, notes)


def _describe(result: Result, listed: list[dict], choice: redist.PlatformChoice,
              cuda_version: str | None, root: CudaRoot | None, tree_url: str,
              installed: dict | None, notes: list[str]) -> None:
    for_cuda = f"CUDA {cuda_version}" if cuda_version else "every CUDA version"
    where = f" (root {root.path})" if root is not None else ""
    platforms = " or ".join(choice.platforms)
    result.lines.append(f"cuDNN for {platforms} and {for_cuda}{where}, from {tree_url}:")
    result.lines.append(f"  platform: {choice.why}")
    variants = sorted({row["cuda_variant"] for row in listed}, key=redist.variant_key, reverse=True)
    for variant in variants:
        result.lines.append(f"  {variant}:")
        for row in (r for r in listed if r["cuda_variant"] == variant):
            mark = "  installed" if row["installed"] else ""
            fits = row.get("fits")
            if fits and not fits["ok"]:
                mark += f"  does not fit this machine: {fits['why']}"
            on = f"  ({row['platform']})" if len(choice.platforms) > 1 else ""
            jit = "  JIT library" if row["flavour"] != "cudnn" else ""
            result.lines.append(f"    {row['version']:<12} {row['file_name']}{jit}{on}{mark}")
    if not listed:
        result.lines.append("  nothing published fits")
    if installed and not any(row["installed"] for row in listed):
        result.lines.append(f"installed: cuDNN {installed['version']} from {installed['name']}, "
                            "not among these releases")
    result.lines += [f"note: {n}" for n in notes]
