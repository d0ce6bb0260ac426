"""The same archive again: how an archive is known to be the one the manifest records without
decoding it, and the plan that answers such an install from the manifest alone.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from cudnn_setup import __version__
from cudnn_setup.placement.fit import fit_before_install
from cudnn_setup.digest import file_digest
from cudnn_setup.facts.cuda import CudaRoot, same_major
from cudnn_setup.fetch.checksums import Expected
from cudnn_setup.state.manifest import Manifest, Source
from cudnn_setup.state.plan import Desired, Plan, make_plan

if TYPE_CHECKING:
    from cudnn_setup.probing.driver import DriverFacts


def archive_stat(archive: Path) -> tuple[int, int, int, int, int] | None:
    """What identifies the archive file without reading it: device, inode, size, mtime and
    ctime (a write, a rename onto it or a chmod moves ctime, which no user can set back)."""
    try:
        st = os.stat(archive)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def same_archive(archive: Path | None, source: Source,
                 known: Expected | None = None) -> str | None:
    """How `archive` is known to be the one the manifest's install read, or None.

    The file it was read from, unchanged (its recorded stat); else a checksum published for
    the release the user asked for (`known`, from the table or the mirror's manifest, never
    from the file's name alone) that is the recorded one; else the same size and the same
    sha256 (reading the file once, a few seconds per GB, instead of decoding it). `archive`
    None: no file to look at (a release not fetched), only `known` can tell."""
    if not source.sha256:
        return None
    if known is not None and known.algorithm == "sha256" and known.digest == source.sha256:
        return f"its published sha256 ({known.source}) is the installed archive's"
    if archive is None:
        return None
    if source.stat is not None and archive_stat(archive) == source.stat:
        return "the file it was installed from, unchanged since (device, inode, size, mtime, ctime)"
    st = archive_stat(archive)
    if st is None or st[2] != source.size:
        return None
    try:
        if file_digest(archive) == source.sha256:
            return "its sha256 is the installed archive's"
    except OSError:
        return None
    return None


def plan_again(archive: Path | None, root: CudaRoot, old: Manifest | None, include_rel: str,
               lib_rel: str, known: Expected | None,
               driver: Callable[[], DriverFacts | None], deep: bool) -> tuple[Plan, str] | None:
    """The plan for installing the very archive the manifest records again, worked out from
    the manifest alone, when that is sure to be the plan reading the archive would make: the
    same tool version (same rules) and layout, a build that fits this root and machine
    without a note, every file as recorded (stat, mode, link target; `deep`: hashed). None
    sends the install the long way, which reports whatever differs as it always has.
    `archive` None: not fetched, known by `known` alone; `driver` waits for the machine's
    facts, asked only when the manifest could answer."""
    if old is None or old.tool_version != __version__ or (old.include_dir, old.lib_dir) != (
            include_rel, lib_rel):
        return None
    if not same_major(old.cuda_version, root.major):
        return None
    facts = driver()
    if facts and fit_before_install(old.cudnn_version, old.cuda_version, facts):
        return None
    how = same_archive(archive, old.source, known)
    if how is None:
        return None
    desired = [Desired(f.path, f.type, f.content.sha256, f.content.target,
                       f.content.mode if f.content.mode is not None else 0o644,
                       blake3=f.content.blake3)
               for f in old.files]
    plan = make_plan(root.path, old, desired, False, deep=deep)
    if plan.changed or plan.conflicts:
        return None
    return plan, how
