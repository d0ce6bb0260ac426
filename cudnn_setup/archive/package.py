"""Judge a whole archive listing: which generation, which version, which platform, what is wrong."""
from __future__ import annotations

import posixpath

from msgspec import Struct, field

from cudnn_setup.archive.listing import Listing, Member
from cudnn_setup.archive.problems import ERROR, WARNING, Problem
from cudnn_setup.facts import cudnn as gen
from cudnn_setup.facts.composition import Composition, compose, flavour_of
from cudnn_setup.archive.library_facts import FactsReader
from cudnn_setup.facts.elf import ElfInfo
from cudnn_setup.text import escape, plural

_OS_NAMES = {"osx": "macOS", "windows": "Windows"}


class Library(Struct):
    name: str
    stem: str  # libcudnn_ops_infer
    version: str | None  # from the file name: "7.6.5", "6.5.18"
    member: Member
    elf: ElfInfo | None = None

    def to_dict(self) -> dict:
        return {"name": self.name, "kind": "shared", "version": self.version,
                "soname": self.elf.soname if self.elf else None,
                "machine": self.elf.machine if self.elf else None,
                "size": self.member.size, "sha256": self.member.sha256}


class Link(Struct):
    name: str
    target: str
    chain: list[str]  # names followed, ending at a file ([] when the chain is broken)


class Package(Struct):
    archive_name: str
    compression: str
    sha256: str | None = None
    size: int = 0
    top_dir: str | None = None
    layout: str | None = None  # flat | cuda | archive
    include_dir: str | None = None  # inside the archive
    lib_dir: str | None = None
    generation: str | None = None
    cudnn_version: str | None = None
    version_source: str | None = None
    name_facts: gen.NameFacts | None = None
    elf_machines: list[str] = field(default_factory=list)
    headers: list[Member] = field(default_factory=list)
    libraries: list[Library] = field(default_factory=list)
    static_libraries: list[Member] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    composition: Composition | None = None
    problems: list[Problem] = field(default_factory=list)

    @property
    def installable(self) -> bool:
        return not any(p.severity == ERROR for p in self.problems)

    @property
    def cuda_version(self) -> str | None:
        return self.name_facts.cuda_version if self.name_facts else None

    @property
    def major(self) -> int | None:
        return gen.major_of(self.cudnn_version)

    def library(self, stem: str) -> Library | None:
        return next((lib for lib in self.libraries if lib.stem == stem), None)

    def chains(self) -> list[tuple[str, str]]:
        """(link, target) pairs as ldconfig plus the bare development link would make them."""
        pairs: list[tuple[str, str]] = []
        for lib in self.libraries:
            soname = lib.elf.soname if lib.elf and lib.elf.soname else lib.name
            if soname != lib.name:
                pairs.append((soname, lib.name))
            bare = f"{lib.stem}.so"
            if bare not in (soname, lib.name):
                pairs.append((bare, soname))
        return pairs

    def to_dict(self) -> dict:
        return {
            "archive": self.archive_name,
            "compression": self.compression,
            "sha256": self.sha256,
            "size": self.size,
            "generation": self.generation,
            "layout": self.layout,
            "top_dir": self.top_dir,
            "cudnn_version": self.cudnn_version,
            "version_source": self.version_source,
            "cuda_version": self.cuda_version,
            "platform": {
                "from_name": self.name_facts.to_dict() if self.name_facts else None,
                "elf_machines": self.elf_machines,
            },
            "headers": [m.name for m in self.headers],
            "libraries": [lib.to_dict() for lib in self.libraries],
            "static_libraries": [{"name": m.name, "size": m.size, "sha256": m.sha256}
                                 for m in self.static_libraries],
            "links": [{"name": link.name, "target": link.target, "chain": link.chain}
                      for link in self.links],
            "install_links": [{"name": a, "target": b} for a, b in self.chains()],
            "complete": not self.missing,
            "missing": self.missing,
            "composition": self.composition.to_dict() if self.composition else None,
            "installable": self.installable,
            "problems": [p.to_dict() for p in self.problems],
        }


def wanted(member: Member) -> bool:
    """Members whose bytes are worth staging: headers and libraries."""
    name = member.name
    return (name.startswith("cudnn") and name.endswith(".h")) or name.startswith("libcudnn")


def judge(listing: Listing, archive_name: str, host_machine: str,
          name_facts: gen.NameFacts | None = None) -> Package:
    """`name_facts`: what the name says when it is not NVIDIA's archive name (a wheel's)."""
    pkg = Package(archive_name=archive_name, compression=listing.compression,
                  sha256=listing.sha256, size=listing.size, problems=list(listing.problems))
    pkg.name_facts = name_facts or gen.parse_archive_name(archive_name)
    if any(p.code == "corrupt" for p in pkg.problems) and not listing.members:
        return pkg
    facts = listing.facts or FactsReader()
    _layout(pkg, listing)
    _collect(pkg, listing)
    _version(pkg)
    _elf(pkg, host_machine, facts)
    _platform(pkg, host_machine)
    _links(pkg, listing)
    _completeness(pkg, facts)
    return pkg


def _add(pkg: Package, code: str, message: str, hint: str = "", severity: str = ERROR) -> None:
    pkg.problems.append(Problem(code, message, hint, severity))


def _layout(pkg: Package, listing: Listing) -> None:
    tops = sorted({m.path.split("/")[0] for m in listing.members})
    if len(tops) > 1:
        shown = ", ".join(escape(t) for t in tops[:5]) + (" …" if len(tops) > 5 else "")
        _add(pkg, "several-tops", f"the archive has {len(tops)} top-level entries ({shown}); "
             "cuDNN archives have one directory", "this is not an archive NVIDIA made")
    pkg.top_dir = tops[0] if len(tops) == 1 else None
    header_dirs = sorted({m.parent for m in listing.members
                          if m.kind == "file" and m.name.startswith("cudnn") and m.name.endswith(".h")})
    lib_dirs = sorted({m.parent for m in listing.members
                       if m.kind in ("file", "symlink") and m.name.startswith("libcudnn")})
    for what, dirs in (("headers", header_dirs), ("libraries", lib_dirs)):
        if len(dirs) > 1:
            _add(pkg, "scattered", f"cuDNN {what} lie in several directories: "
                 + ", ".join(escape(d) for d in dirs), "this is not an archive NVIDIA made")
    pkg.include_dir = header_dirs[0] if header_dirs else None
    pkg.lib_dir = lib_dirs[0] if lib_dirs else None
    if pkg.include_dir and pkg.include_dir == pkg.lib_dir:
        pkg.layout = "flat"
    elif pkg.top_dir == "cuda":
        pkg.layout = "cuda"
    elif pkg.include_dir or pkg.lib_dir:
        pkg.layout = "archive"


def _collect(pkg: Package, listing: Listing) -> None:
    for m in listing.members:
        if m.kind != "file":
            continue
        if m.parent == pkg.include_dir and m.name.startswith("cudnn") and m.name.endswith(".h"):
            pkg.headers.append(m)
        elif m.parent == pkg.lib_dir and m.name.startswith("libcudnn"):
            shared = gen.SHARED_NAME.match(m.name)
            if m.name.endswith(".a"):
                pkg.static_libraries.append(m)
            elif shared:
                pkg.libraries.append(Library(m.name, shared["stem"], shared["ver"], m))
            else:
                _add(pkg, "unknown-file", f"{escape(m.path)} is neither a shared nor a static "
                     "library", "this is not an archive NVIDIA made", WARNING)
    pkg.headers.sort(key=lambda m: m.name)
    pkg.libraries.sort(key=lambda lib: lib.name)
    pkg.static_libraries.sort(key=lambda m: m.name)
    if not any(h.name == "cudnn.h" for h in pkg.headers):
        _add(pkg, "no-header", "the archive has no cudnn.h", "a cuDNN archive is incomplete "
             "without it; download the full archive again")
    for stem in {lib.stem for lib in pkg.libraries}:
        files = [lib.name for lib in pkg.libraries if lib.stem == stem]
        if len(files) > 1:
            _add(pkg, "duplicate-library", f"several files of {stem}: {', '.join(files)}",
                 "NVIDIA archives hold one file per library and link the other names to it")


def _version(pkg: Package) -> None:
    by_name = {h.name: h for h in pkg.headers}
    for name in gen.HEADERS_WITH_VERSION:
        header = by_name.get(name)
        version = gen.header_version(header.text or "") if header else None
        if version:
            pkg.cudnn_version = "%d.%d.%d" % version
            pkg.version_source = f"version macros in {header.path}"
            break
    main = pkg.library("libcudnn")
    if pkg.cudnn_version is None and "cudnn.h" in by_name:
        pkg.cudnn_version = gen.R1_VERSION
        pkg.version_source = ("cudnn.h has no version macros, as in R1; reported as 1.0.0"
                              + (f" (library file {main.name})" if main else ""))
    if pkg.cudnn_version is None:
        return
    major, minor, patch = gen.split_version(pkg.cudnn_version)
    pkg.generation = gen.generation_for(major, pkg.layout or "", minor, patch)
    facts = pkg.name_facts
    if facts and facts.cudnn_version:
        named = facts.cudnn_version.split(".")
        if named[0] != str(major) or (len(named) > 1 and named[1] != str(minor)):
            _add(pkg, "name-version", f"the file name says cuDNN {facts.cudnn_version}, the "
                 f"headers say {pkg.cudnn_version}", "the archive may have been renamed; the "
                 "headers are what gets installed", WARNING)
    for lib in pkg.libraries:
        if not lib.version:
            continue
        if gen.version_follows_cuda(pkg.generation):
            if facts and not lib.version.startswith(facts.cuda_version + "."):
                _add(pkg, "version-mismatch", f"{lib.name} was built for CUDA "
                     f"{'.'.join(lib.version.split('.')[:2])}, the archive name says CUDA "
                     f"{facts.cuda_version}", "the archive mixes files of two releases")
        elif not gen.same_release(pkg.cudnn_version, lib.version):
            _add(pkg, "version-mismatch", f"the headers say cuDNN {pkg.cudnn_version} but the "
                 f"library file is {lib.name}", "header and library come from different "
                 "releases; Theano would report 'Mixed dnn version'")


def _elf(pkg: Package, host_machine: str, facts: FactsReader) -> None:
    machines: set[str] = set()
    for lib in pkg.libraries:
        m = lib.member
        if m.size == 0:
            _add(pkg, "empty-library", f"{escape(m.name)} is empty (0 bytes)",
                 "the archive is damaged; download it again")
            continue
        if m.staged is None:
            continue
        read = facts.get(m.staged)  # read_elf, and code_problem where it is asked
        if read.elf is None:
            cut = read.code  # a truncated file says so, not pyelftools' complaint
            if cut and cut.startswith("is truncated"):
                _add(pkg, "damaged-library", f"{escape(m.name)} {cut}",
                     "the archive is damaged; download it again")
            else:
                _add(pkg, "not-elf", f"{escape(m.name)} is {read.not_elf}, not an ELF shared "
                     "library", "the archive is damaged or is not cuDNN for Linux")
            continue
        lib.elf = read.elf
        machines.add(lib.elf.machine)
        useless = read.code if lib.elf.is_shared_object else None
        if useless:
            _add(pkg, "no-code" if "exports no symbols" in useless else "damaged-library",
                 f"{escape(m.name)} {useless}", "the archive is damaged or not NVIDIA's; "
                 "download it again")
        if not lib.elf.is_shared_object:
            _add(pkg, "not-shared", f"{escape(m.name)} is an ELF {lib.elf.kind}, not a shared "
                 "object", "the archive is damaged or is not cuDNN")
        if lib.elf.bits != 64:
            _add(pkg, "elf-class", f"{escape(m.name)} is a {lib.elf.bits}-bit library; this "
                 "machine runs 64-bit programs", "cuDNN has only ever shipped 64-bit libraries; "
                 "the archive is damaged or not NVIDIA's")
        expected = gen.expected_soname(lib.stem, lib.version, pkg.generation)
        if expected and lib.elf.soname != expected:
            _add(pkg, "soname", f"{escape(m.name)} has SONAME {lib.elf.soname or '(none)'}, "
                 f"expected {expected}", "programs linked against it would look for the "
                 "wrong file; the archive is not NVIDIA's")
    for m in pkg.static_libraries:
        if not m.head.startswith(b"!<arch>\n"):
            _add(pkg, "not-static", f"{escape(m.name)} is not a static library (ar archive)",
                 "the archive is damaged; download it again")
    pkg.elf_machines = sorted(machines)


def _platform(pkg: Package, host_machine: str) -> None:
    facts = pkg.name_facts
    if facts and facts.os != "linux":
        _add(pkg, "platform", f"this archive is for {_OS_NAMES.get(facts.os, facts.os)}; this "
             "machine runs Linux", f"download the Linux {host_machine} archive")
        return
    foreign = [m for m in pkg.elf_machines if m != host_machine]
    if foreign:
        _add(pkg, "platform", f"this archive is for {', '.join(foreign)}; this machine is "
             f"{host_machine}", f"download the linux-{host_machine} archive")
    elif facts and facts.arch != host_machine and not pkg.elf_machines:
        _add(pkg, "platform", f"this archive is for {facts.arch}; this machine is {host_machine}",
             f"download the linux-{host_machine} archive")


def _links(pkg: Package, listing: Listing) -> None:
    members = listing.by_path()
    for m in listing.members:
        if m.kind != "symlink" or m.parent != pkg.lib_dir:
            continue
        chain: list[str] = []
        current = m
        while current.kind == "symlink" and len(chain) < 16:
            nxt = members.get(posixpath.join(current.parent, current.target or ""))
            if nxt is None or nxt.path in chain:
                chain = []
                break
            chain.append(nxt.name)
            current = nxt
        if not chain or current.kind != "file":
            _add(pkg, "dangling-link", f"symlink {escape(m.name)} -> {escape(m.target or '')} "
                 "does not lead to a file of the archive", "the archive is damaged or hostile")
            chain = []
        pkg.links.append(Link(m.name, m.target or "", chain))


def _completeness(pkg: Package, facts: FactsReader) -> None:
    if not pkg.libraries:
        pkg.missing = ["libcudnn"]
        _add(pkg, "no-library", "the archive has no libcudnn shared library",
             "download the full archive again")
        return
    if not pkg.generation:
        return
    files = {lib.stem: lib.member.staged for lib in pkg.libraries}
    name = pkg.archive_name if gen.flavour_of_name(pkg.archive_name) else pkg.top_dir
    pkg.composition = comp = compose(files, pkg.generation,
                                     flavour_of(name, files, pkg.generation),
                                     named=lambda path: facts.get(path).named)
    pkg.missing = list(comp.missing)
    flavour = " (JIT flavour)" if comp.flavour == gen.JIT else ""
    for stem in pkg.missing:
        _add(pkg, "incomplete", f"{stem} is missing: {comp.reason(stem)}; this cuDNN "
             f"{pkg.cudnn_version}{flavour} is made of {plural(len(comp.required), 'library')}",
             "download the full archive again; a partial cuDNN aborts programs that load it, or "
             "fails with CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED")
