"""What verification looks at: the cuDNN found in a CUDA root, from the manifest or the files.

A root may hold several cuDNN versions side by side (one copied by hand, one installed by the
tool). Verification judges the one the links select, as the compiler (`-lcudnn` finds
`libcudnn.so`) and the loader (`libcudnn.so.N`) do, and lists the others.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import Version

from cudnn_setup.facts import cudnn as gen
from cudnn_setup.facts.ldresolve.read_once import Objects
from cudnn_setup.facts.composition import Composition, compose, flavour_of
from cudnn_setup.facts.cuda import CudaRoot
from cudnn_setup.state.layout import StateDir
from cudnn_setup.state.manifest import Manifest
from cudnn_setup.untrusted import read_regular

MAX_HEADER_BYTES = 1 << 20  # cuDNN's version headers are a few kB; cudnn.h itself is < 200 kB


def _header_text(path: Path) -> str | None:
    """The start of a header as text; None when it is missing or not a regular file."""
    try:
        return read_regular(path, MAX_HEADER_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return None


# A dataclass, not a Struct: its caches are left out of __init__, comparison and repr.
@dataclass
class Installation:
    root: CudaRoot
    lib_dir: Path
    manifest: Manifest | None
    header_version: str | None = None
    header_file: Path | None = None
    libraries: list[Path] = field(default_factory=list)  # the selected version's library files
    others: list[Path] = field(default_factory=list)  # library files of other versions
    selected_by: str | None = None  # how the main library was chosen
    # A cuDNN that cudnn-setup did not install (installation/locate.py): where its headers are, how it
    # was chosen ("lib-dir", "multiarch", "wheel"), and what was read to find it.
    include_path: Path | None = None
    origin: str | None = None
    origin_facts: dict = field(default_factory=dict)
    _composition: Composition | None = field(default=None, init=False, repr=False, compare=False)
    # its libraries' ELF facts, read once for every check of one command (facts/ldresolve/)
    objects: Objects = field(default_factory=Objects, init=False, repr=False, compare=False)

    @property
    def include_dir(self) -> Path:
        return self.include_path or self.root.path / "include"

    @property
    def version(self) -> str | None:
        if self.manifest:
            return self.manifest.cudnn_version
        return self.header_version

    @property
    def major(self) -> int | None:
        return gen.major_of(self.version)

    @property
    def generation(self) -> str | None:
        if self.manifest:
            return self.manifest.generation
        return gen.generation_of_version(self.version) if self.version else None

    def composition(self) -> Composition:
        """What this cuDNN is made of, read from its own libraries (facts/composition.py); the
        flavour from the archive name the manifest kept, else from the files."""
        if self._composition is None:
            files = {gen.library_stem(p.name): p for p in self.libraries}
            files.pop(None, None)
            name = self.manifest.source.name if self.manifest else None
            self._composition = compose(files, self.generation,
                                        flavour_of(name, files, self.generation), self.objects)
        return self._composition

    def library(self, stem: str) -> Path | None:
        return next((p for p in self.libraries if gen.library_stem(p.name) == stem), None)

    def other_versions(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for p in self.others:
            out.setdefault(gen.library_file_version(p.name) or "?", []).append(p.name)
        return out

    def soname_path(self) -> Path | None:
        """The name programs load (libcudnn.so.7, libcudnn.so.7.0 for v3…)."""
        main = self.library("libcudnn")
        if main is None:
            return None
        soname = gen.expected_soname("libcudnn", gen.library_file_version(main.name),
                                     self.generation)
        candidate = self.lib_dir / soname if soname else main
        return candidate if os.path.lexists(candidate) else main


def _newest(paths: list[Path]) -> Path:
    def key(p: Path) -> Version:
        return Version(gen.library_file_version(p.name) or "0")
    return max(paths, key=key)


def select_main(lib_dir: Path, files: list[Path],
                manifest: Manifest | None) -> tuple[Path | None, str | None]:
    """The main libcudnn file that `libcudnn.so` leads to (through `libcudnn.so.N`); without
    that link, the manifest's, else the newest."""
    mains = [p for p in files if gen.library_stem(p.name) == "libcudnn"]
    if not mains:
        return None, None
    real = Path(os.path.realpath(lib_dir / "libcudnn.so"))
    for p in mains:
        if os.path.realpath(p) == str(real):
            return p, "libcudnn.so"
    if manifest is not None:
        for p in mains:
            if p.name in manifest.libraries:
                return p, "manifest"
    return _newest(mains), "newest version"


UNREAD = object()


def find_installation(root: CudaRoot, manifest: Manifest | None | object = UNREAD
                      ) -> Installation:
    """The root's cuDNN; `manifest`: the one already read (state/view.py), else read here."""
    if manifest is UNREAD:
        manifest = StateDir(root.path).manifest()
    assert manifest is None or isinstance(manifest, Manifest)
    lib_dir = root.path / manifest.lib_dir if manifest else root.lib_dir()
    inst = Installation(root=root, lib_dir=lib_dir, manifest=manifest)
    for name in gen.HEADERS_WITH_VERSION:
        header = inst.include_dir / name
        text = _header_text(header)
        if text is not None:
            version = gen.header_version(text)
            if version:
                inst.header_version, inst.header_file = "%d.%d.%d" % version, header
                break
            if name == "cudnn.h":
                inst.header_version, inst.header_file = gen.R1_VERSION, header
    if not lib_dir.is_dir():
        return inst
    files = sorted(p for p in lib_dir.iterdir() if gen.LIBRARY_FILE.match(p.name)
                   and p.is_file() and not p.is_symlink())
    main, inst.selected_by = select_main(lib_dir, files, manifest)
    if main is None:
        inst.libraries = files
        return inst
    version = gen.library_file_version(main.name)
    inst.libraries = [p for p in files if gen.library_file_version(p.name) == version]
    inst.others = [p for p in files if p not in inst.libraries]
    return inst


def find_cudart(inst: Installation) -> str | None:
    """The CUDA runtime a program built against `inst` would load: beside cuDNN, else in the
    CUDA root."""
    for directory in (inst.lib_dir, inst.root.lib_dir()):
        found = sorted(directory.glob("libcudart.so*")) if directory.is_dir() else []
        if found:
            return str(found[0])
    return None
