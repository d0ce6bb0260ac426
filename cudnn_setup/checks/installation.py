"""What verification looks at: the cuDNN found in a CUDA root, from the manifest or the files."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from cudnn_setup.facts import cudnn as gen
from cudnn_setup.facts.cuda import CudaRoot
from cudnn_setup.state.layout import StateDir


@dataclass
class Installation:
    root: CudaRoot
    lib_dir: Path
    manifest: dict | None
    header_version: str | None = None
    header_file: Path | None = None
    libraries: list[Path] = field(default_factory=list)  # regular files libcudnn*.so.X.Y.Z
    # A cuDNN that cudnn-setup did not install (checks/locate.py): where its headers are, how it
    # was chosen ("lib-dir", "multiarch", "wheel"), and what was read to find it.
    include_path: Path | None = None
    origin: str | None = None
    origin_facts: dict = field(default_factory=dict)

    @property
    def include_dir(self) -> Path:
        return self.include_path or self.root.path / "include"

    @property
    def version(self) -> str | None:
        if self.manifest:
            return self.manifest.get("cudnn_version")
        return self.header_version

    @property
    def major(self) -> int | None:
        return gen.major_of(self.version)

    @property
    def generation(self) -> str | None:
        if self.manifest:
            return self.manifest.get("generation")
        return gen.generation_of_version(self.version) if self.version else None

    def library(self, stem: str) -> Path | None:
        return next((p for p in self.libraries if gen.library_stem(p.name) == stem), None)

    def soname_path(self) -> Path | None:
        """The name programs load (libcudnn.so.7, libcudnn.so.7.0 for v3…)."""
        main = self.library("libcudnn")
        if main is None:
            return None
        soname = gen.expected_soname("libcudnn", gen.library_file_version(main.name),
                                     self.generation)
        candidate = self.lib_dir / soname if soname else main
        return candidate if os.path.lexists(candidate) else main


def find_installation(root: CudaRoot) -> Installation:
    manifest = StateDir(root.path).manifest()
    lib_dir = root.path / manifest["lib_dir"] if manifest else root.lib_dir()
    inst = Installation(root=root, lib_dir=lib_dir, manifest=manifest)
    for name in gen.HEADERS_WITH_VERSION:
        header = inst.include_dir / name
        if header.is_file():
            version = gen.header_version(header.read_text(errors="replace"))
            if version:
                inst.header_version, inst.header_file = "%d.%d.%d" % version, header
                break
            if name == "cudnn.h":
                inst.header_version, inst.header_file = gen.R1_VERSION, header
    if lib_dir.is_dir():
        inst.libraries = sorted(p for p in lib_dir.iterdir() if gen.LIBRARY_FILE.match(p.name)
                                and p.is_file() and not p.is_symlink())
    return inst
