"""The manifest: what cudnn-setup installed in a CUDA root, as typed records.

Written last by an install (its commit point), removed last by an uninstall. `Manifest.load`
accepts only what the tool writes: the format version it knows, every field of its type, every
path relative, normalised and inside the root.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from msgspec import Struct, field

from cudnn_setup.digest import BLAKE3, CONTENT_HASHES, SHA256 as SHA256_HASH
from cudnn_setup.facts import cuda, cudnn as gen
from cudnn_setup.state.fields import HEX_ID, SHA256, Fields, text
from cudnn_setup.state.paths import Damaged, contained, relative

# 3: a file's bytes recorded by their BLAKE3 hash ("blake3"), sha256, or both;
# 2: the source's provenance; 1: neither. Manifests of formats 1 and 2 (every file by its
# sha256) still load, verify and uninstall.
FORMAT = 3
OLDER_FORMATS = (1, 2)
CONTENT_HASHES_SINCE = 3  # the first format whose files may carry "blake3"
PROVENANCE_SOURCES = ("nvidia", "mirror", "pypi", "path", "url")
FILE, SYMLINK, DIR, OTHER = "file", "symlink", "dir", "other"
_VERSION = re.compile(r"^\d{1,6}\.\d{1,6}\.\d{1,6}\Z")
_CUDA = re.compile(r"^\d{1,4}(\.\d{1,4}){0,2}\Z")
_NAME = re.compile(r"^[^/\x00]{1,255}\Z")


class Content(Struct, frozen=True):
    """What stands at a path: a file (bytes and mode), a symlink (target), a dir, or other.

    A file's bytes are known by their sha256, their BLAKE3 hash, or both (digest.py says why
    two); `same` compares the first hash both sides have, and whoever looks at a file on disk
    hashes it with every hash the records it is compared with hold (`hashes`)."""

    type: str
    sha256: str | None = None
    mode: int | None = None
    target: str | None = None
    blake3: str | None = None

    @property
    def hashes(self) -> tuple[str, ...]:
        """The content hashes this record holds (none for what is not a file)."""
        return tuple(a for a in CONTENT_HASHES if self.digest(a))

    def digest(self, algorithm: str) -> str | None:
        return self.blake3 if algorithm == BLAKE3 else self.sha256 if algorithm == SHA256_HASH \
            else None

    def same(self, other: "Content | None") -> bool:
        """Same bytes or same link target (the mode is compared separately)."""
        if other is None or other.type != self.type:
            return False
        if self.type == SYMLINK:
            return other.target == self.target
        if self.type == FILE:
            for algorithm in CONTENT_HASHES:
                mine, theirs = self.digest(algorithm), other.digest(algorithm)
                if mine and theirs:
                    return mine == theirs
            # a bug, never an answer: the file on disk is hashed as its records need
            raise ValueError(f"no content hash in common ({self.hashes} and {other.hashes})")
        return True

    def to_dict(self) -> dict:
        out: dict = {"type": self.type}
        if self.type == FILE:
            if self.sha256 is not None or self.blake3 is None:
                out["sha256"] = self.sha256
            if self.blake3 is not None:
                out["blake3"] = self.blake3
            out["mode"] = self.mode
        elif self.type == SYMLINK:
            out["target"] = self.target
        return out

    @staticmethod
    def load(f: Fields, fmt: int = FORMAT) -> "Content":
        """`fmt`: the manifest's format; before format 3 every file is known by its sha256."""
        kind = f.choice("type", (FILE, SYMLINK, DIR, OTHER))
        if kind == FILE:
            if fmt < CONTENT_HASHES_SINCE:
                return Content(FILE, f.text("sha256", pattern=SHA256),
                               f.integer("mode", high=0o7777))
            sha = f.text("sha256", optional=True, pattern=SHA256)
            blake = f.text("blake3", optional=True, pattern=SHA256)  # 32 bytes too
            if sha is None and blake is None:
                raise Damaged(f"{f.at('sha256')} is missing (and there is no blake3)")
            return Content(FILE, sha, f.integer("mode", high=0o7777), blake3=blake)
        if kind == SYMLINK:
            return Content(SYMLINK, target=f.text("target"))
        return Content(kind)


class FileRecord(Struct):
    """One header, library or link the tool placed."""

    path: str
    content: Content
    replaced: Content | None = None  # what stood there before the tool first wrote the path
    stat: tuple[int, int, int, int] | None = None  # inode, size, mtime, ctime once in place

    @property
    def type(self) -> str:
        return self.content.type

    def to_dict(self) -> dict:
        out = dict(self.content.to_dict(), path=self.path,
                   replaced=self.replaced.to_dict() if self.replaced else None)
        if self.stat is not None:
            out["stat"] = list(self.stat)
        return out


class Original(Struct, frozen=True):
    """A file the tool found where cuDNN goes and did not write.

    Kept in the originals store and put back by uninstall, or, when it was already exactly what
    the archive holds, left in place (`in_place`): then uninstall leaves it alone.
    """

    content: Content
    in_place: bool = False

    def to_dict(self) -> dict:
        return dict(self.content.to_dict(), kept="in-place" if self.in_place else "store")


class Source(Struct):
    """The archive an install read: its name, sha256 and size, and the stat of the file it was
    read from (device, inode, size, mtime, ctime; None when it changed while it was read), by
    which the same file given again is known without reading it (placement.same_archive)."""

    name: str
    sha256: str | None
    size: int
    stat: tuple[int, int, int, int, int] | None = None
    # Where the bytes came from and who vouched for their checksum (sources.base.Provenance):
    # {source, location, checksum_from, sha256, format, repacked_from}; None in format 1.
    provenance: dict | None = None

    def to_dict(self) -> dict:
        out = {"name": self.name, "sha256": self.sha256, "size": self.size}
        if self.stat is not None:
            out["stat"] = list(self.stat)
        if self.provenance is not None:
            out["provenance"] = self.provenance
        return out


def _provenance(f: Fields | None) -> dict | None:
    """The provenance record, every field checked; None when absent."""
    if f is None:
        return None
    repack = f.sub("repacked_from", optional=True)
    deps = []
    for where, item in f.items("with_deps", optional=True):
        d = Fields(item, where)
        deps.append({"wheel": d.text("wheel", pattern=_NAME),
                     "sha256": d.text("sha256", pattern=SHA256),
                     "location": d.text("location"),
                     "checksum_from": d.text("checksum_from", optional=True)})
    out = {
        "source": f.choice("source", PROVENANCE_SOURCES),
        "location": f.text("location"),
        "checksum_from": f.text("checksum_from", optional=True),
        "sha256": f.text("sha256", optional=True, pattern=SHA256),
        "format": f.choice("format", ("archive", "wheel"), optional=True) or "archive",
        "repacked_from": None if repack is None else {
            "wheel": repack.text("wheel", pattern=_NAME),
            "sha256": repack.text("sha256", pattern=SHA256)},
    }
    if "with_deps" in f.data:
        out["with_deps"] = deps
    return out


class Manifest(Struct):
    txid: str
    cudnn_version: str
    generation: str | None
    cuda_version: str | None
    source: Source
    lib_dir: str
    files: list[FileRecord]
    libraries: list[str] = field(default_factory=list)
    originals: dict[str, Original] = field(default_factory=dict)
    created_dirs: list[str] = field(default_factory=list)
    include_dir: str = "include"
    cuda_source: str | None = None  # how cuda_version was learnt: archive name, library
    tool_version: str = ""
    installed_at: str = ""
    format: int = FORMAT

    def file(self, path: str) -> FileRecord | None:
        return next((f for f in self.files if f.path == path), None)

    @property
    def cuda_learnt_from(self) -> str:
        """How cuda_version was learnt, as the install said it; manifests from before it was
        recorded took it from the archive name, the only way then."""
        if self.cuda_source in (cuda.FROM_NAME, cuda.FROM_LIBRARY):
            return self.cuda_source
        return cuda.FROM_NAME if self.cuda_source is None else "the manifest"

    def to_dict(self) -> dict:
        return {
            "format": self.format, "tool_version": self.tool_version, "txid": self.txid,
            "installed_at": self.installed_at, "cudnn_version": self.cudnn_version,
            "generation": self.generation, "cuda_version": self.cuda_version,
            "cuda_source": self.cuda_source,
            "source": self.source.to_dict(),
            "lib_dir": self.lib_dir, "include_dir": self.include_dir,
            "libraries": list(self.libraries),
            "files": [f.to_dict() for f in self.files],
            "originals": {p: o.to_dict() for p, o in sorted(self.originals.items())},
            "created_dirs": list(self.created_dirs),
        }

    @staticmethod
    def load(data: object, root: Path) -> "Manifest":
        """The manifest in `data` (parsed JSON), or Damaged saying what is wrong with it."""
        f = Fields.record(data, "manifest", FORMAT, OLDER_FORMATS)
        fmt = f.integer("format")
        real_root = os.path.realpath(root)

        def path(value: object, where: str) -> str:
            rel = relative(value, where)
            contained(root, rel, where, real_root)
            return rel

        src = f.sub("source")
        files: list[FileRecord] = []
        seen: set[str] = set()
        for where, item in f.items("files"):
            e = Fields(item, where)
            rel = path(e.data.get("path"), f"{where}.path")
            if rel in seen:
                raise Damaged(f"{where}.path {rel!r} is listed twice")
            seen.add(rel)
            content = Content.load(e, fmt)
            if content.type not in (FILE, SYMLINK):
                raise Damaged(f"{where}.type is {content.type!r}; the tool places files and links")
            replaced = e.sub("replaced", optional=True)
            stat = [v for _, v in e.items("stat", optional=True)]
            if stat and (len(stat) != 4 or not all(type(v) is int and v >= 0 for v in stat)):
                raise Damaged(f"{where}.stat is not four counts")
            files.append(FileRecord(rel, content, Content.load(replaced, fmt) if replaced else None,
                                    (stat[0], stat[1], stat[2], stat[3]) if stat else None))
        originals = {}
        for where, key, item in f.mapping("originals"):
            o = Fields(item, where)
            kept = o.choice("kept", ("in-place", "store"), optional=True)
            originals[path(key, where)] = Original(Content.load(o, fmt), kept == "in-place")
        generation = f.text("generation", optional=True)
        if generation is not None and generation not in gen.GENERATIONS:
            raise Damaged(f"generation {generation[:40]!r} is not a cuDNN generation")
        libraries = [text(v, w, _NAME) for w, v in f.items("libraries")]
        return Manifest(
            format=FORMAT,
            txid=f.text("txid", pattern=HEX_ID),
            tool_version=f.text("tool_version", optional=True) or "",
            installed_at=f.text("installed_at", optional=True) or "",
            cudnn_version=f.text("cudnn_version", pattern=_VERSION),
            generation=generation,
            cuda_version=f.text("cuda_version", optional=True, pattern=_CUDA),
            cuda_source=f.text("cuda_source", optional=True),
            source=Source(src.text("name"),
                          src.text("sha256", optional=True, pattern=SHA256),
                          src.integer("size"), _source_stat(src),
                          _provenance(src.sub("provenance", optional=True))),
            lib_dir=path(f.data.get("lib_dir"), "lib_dir"),
            include_dir=path(f.data.get("include_dir", "include"), "include_dir"),
            libraries=libraries,
            files=files,
            originals=originals,
            created_dirs=[path(v, w) for w, v in f.items("created_dirs")],
        )


def _source_stat(src: Fields) -> tuple[int, int, int, int, int] | None:
    """The archive's recorded stat (manifests before it was recorded have none)."""
    values = [v for _, v in src.items("stat", optional=True)]
    if not values:
        return None
    if len(values) != 5 or not all(type(v) is int and v >= 0 for v in values):
        raise Damaged(f"{src.at('stat')} is not five counts")
    return (values[0], values[1], values[2], values[3], values[4])
