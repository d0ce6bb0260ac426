"""Where cuDNN goes in a CUDA root: the include and library dirs inside the root's real tree,
and the entries (files, ldconfig-style link chains, dependency libraries) as they should end up.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Sequence

from cudnn_setup.archive.package import Package
from cudnn_setup.archive.wheel import dependency_libraries
from cudnn_setup.errors import ArchiveRejected, InstallFailed
from cudnn_setup.facts import cudnn as gen
from cudnn_setup.facts.cuda import CudaRoot
from cudnn_setup.facts.ldresolve.loadable import ElfObject, NotLoadable, read_object
from cudnn_setup.state.manifest import FILE
from cudnn_setup.state.paths import STATE_DIR, is_within
from cudnn_setup.state.plan import Desired
from cudnn_setup.text import escape


def _link_on_the_way(root: Path, path: Path) -> str:
    """The first symlink between `root` and `path`, as `link -> target`."""
    if not path.is_relative_to(root):
        return str(path)
    current = root
    for part in path.relative_to(root).parts:
        current = current / part
        if current.is_symlink():
            return f"{current} -> {os.readlink(current)}"
    return str(path)


def inside_root(root: Path, path: Path, what: str) -> str:
    """`path` relative to the root's real tree, its symlinks followed; a directory that a
    symlink takes out of the root (or into the tool's state) is refused, naming the link."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    if is_within(real, real_root) and real != real_root:
        rel = os.path.relpath(real, real_root)
        if not is_within(rel, STATE_DIR):
            return rel
    raise InstallFailed(
        f"the {what} dir {_link_on_the_way(root, path)} leads out of the CUDA root {root} "
        f"(to {real}); cudnn-setup writes only inside the root",
        f"point --cuda-root at the toolkit the link leads into, or make {path.name} a "
        "directory of the root", code="link-outside-root")


def root_dirs(root: CudaRoot) -> tuple[str, str]:
    """The include and library dirs, relative to the root's real tree (links resolved), so
    that the manifest's paths never pass through a symlinked directory."""
    lib = root.lib_dir()
    for name in ("lib64", "lib"):  # the name in the root, not the resolved path, for messages
        candidate = root.path / name
        if candidate.is_dir() and os.path.realpath(candidate) == os.path.realpath(lib):
            lib = candidate
            break
    return (inside_root(root.path, root.include_dir, "include"),
            inside_root(root.path, lib, "library"))


def desired_entries(pkg: Package, include_rel: str, lib_rel: str, links_dir: Path) -> list[Desired]:
    """Headers, libraries and the ldconfig-style link chains, as they should end up."""
    out = [Desired(f"{include_rel}/{m.name}", FILE, m.sha256, mode=(m.mode & 0o755) | 0o444,
                   source=m.staged, blake3=m.blake3) for m in pkg.headers]
    for m in [lib.member for lib in pkg.libraries] + pkg.static_libraries:
        out.append(Desired(f"{lib_rel}/{m.name}", FILE, m.sha256, mode=(m.mode & 0o755) | 0o444,
                           source=m.staged, blake3=m.blake3))
    for link, target in pkg.chains():
        out.append(Desired(f"{lib_rel}/{link}", "symlink", target=target,
                           source=links_dir / link))
    return out


def dependency_entries(wheels: Sequence[Path], work: Path, root: Path, lib_rel: str,
                       links_dir: Path, desired: list[Desired], owned: Iterable[str] = (),
                       left_alone: list[str] | None = None) -> list[Desired]:
    """The shared libraries of the dependency wheels, staged under `work`, as files in the lib
    dir under their SONAME with the development link, recorded like cuDNN's own files. Each
    must be an ELF shared object for cuDNN's machine, whose SONAME is its file name. A library the root already
    has under any version of its SONAME (a cuBLAS wheel's libcudart.so.12 beside the toolkit's
    runtime) is left alone and said in `left_alone`, unless the tool placed it (`owned`: the
    paths its manifest records)."""
    taken = {d.path for d in desired}
    owned = set(owned)
    present = _libraries_by_stem(root / lib_rel)
    cudnn = _cudnn_object(desired)
    out: list[Desired] = []
    for i, wheel in enumerate(wheels):
        for name, staged, sha in dependency_libraries(wheel, work / str(i)):
            try:
                elf = read_object(staged)
            except NotLoadable as exc:
                raise ArchiveRejected(f"{escape(wheel.name)}: {escape(name)} is not a library "
                                      f"({escape(str(exc)[:120])})", "do not use this wheel") from None
            if cudnn is not None and elf.host != cudnn.host:
                # judged like cuDNN's own libraries: an aarch64 libcublas in an x86_64 root was
                # placed, and only failed at run time
                raise ArchiveRejected(
                    f"{escape(wheel.name)}: {escape(name)} is a {elf.bits}-bit "
                    f"{escape(elf.machine.removeprefix('EM_'))} library; cuDNN's are "
                    f"{cudnn.bits}-bit {escape(cudnn.machine.removeprefix('EM_'))}",
                    "use the wheel built for this machine's platform")
            if elf.soname != name:
                continue  # not under its SONAME (a builtins variant, a stub): not what loads
            path = f"{lib_rel}/{name}"
            stem = gen.SHARED_NAME.match(name)
            have = [n for n in present.get(name.partition(".so")[0], [])
                    if f"{lib_rel}/{n}" not in owned]
            if have:
                if left_alone is not None:
                    left_alone.append(f"{escape(wheel.name)}: {escape(name)} not placed, the "
                                      f"root has {escape(', '.join(have[:3]))}")
                continue
            if path in taken:
                raise ArchiveRejected(f"{escape(wheel.name)} holds {escape(name)}, which another "
                                      "wheel placed already", "do not use these wheels together")
            taken.add(path)
            out.append(Desired(path, FILE, sha, mode=0o755, source=staged))
            dev = f"{lib_rel}/{stem['stem']}.so" if stem else None
            if dev and dev not in taken and not os.path.lexists(root / dev):
                taken.add(dev)
                out.append(Desired(dev, "symlink", target=name,
                                   source=links_dir / f"{stem['stem']}.so"))
    return out


def _cudnn_object(desired: list[Desired]) -> ElfObject | None:
    """The loader's facts of the libcudnn being placed (judged for this machine already)."""
    for d in desired:
        if d.kind == FILE and d.source is not None and \
                os.path.basename(d.path).startswith("libcudnn.so."):
            try:
                return read_object(d.source)
            except NotLoadable:
                return None
    return None


def _libraries_by_stem(lib_dir: Path) -> dict[str, list[str]]:
    """The shared libraries in `lib_dir` by their stem ("libcudart": libcudart.so,
    libcudart.so.12, libcudart.so.12.4.127), files and links alike."""
    out: dict[str, list[str]] = {}
    try:
        names = sorted(os.listdir(lib_dir))
    except OSError:
        return out
    for name in names:
        stem, dot_so, rest = name.partition(".so")
        if dot_so and (not rest or rest.startswith(".")):
            out.setdefault(stem, []).append(name)
    return out
