"""`inspect`: read an archive once and judge it exactly as `install` would before writing
anything (its checksum against the known releases table, its contents, this machine's GPUs and
driver, and with --cuda-root the CUDA major of that root), installing nothing. Its verdict is
install's into that root: the same refusal, word for word, with the same exit code."""
from __future__ import annotations

import re
import tempfile
from pathlib import Path

from cudnn_setup.archive import read_package
from cudnn_setup.archive.package import Package
from cudnn_setup.steps.command_wrapper import command
from cudnn_setup.steps.context import Context, reading, which
from cudnn_setup.placement.fit import built_for, machine_fit
from cudnn_setup.placement.judge import fit_refusal, package_refusal
from cudnn_setup.errors import ArchiveRejected
from cudnn_setup.facts.cuda import FROM_NAME, BuiltFor, find_cuda_root
from cudnn_setup.fetch.checksums import expected_for
from cudnn_setup.report import Result
from cudnn_setup.state.view import look
from cudnn_setup.text import escape


@command("inspect")
def inspect(result: Result, ctx: Context, archive: Path, cuda_root: Path | None = None) -> None:
    root = find_cuda_root(ctx.env, cuda_root) if cuda_root is not None else None
    # the driver is asked only for an archive that passed everything else (no thread or child
    # is left behind by an archive refused first)
    asked = ctx.facts.driver

    expected = expected_for(archive.name, None)
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="cudnn-setup-inspect-") as tmp:
        pkg = read_package(archive, Path(tmp) / "staging", xz=which(ctx, "xz"), env=ctx.env,
                           on_read=reading(ctx, archive),
                           expected_sha256=expected.digest if expected else None)
        built = BuiltFor(pkg.cuda_version, FROM_NAME if pkg.cuda_version else
                         "unknown (not in the file name)")
        refusal = package_refusal(pkg, archive.name, expected)
        if refusal is None and root is not None:
            if not pkg.cuda_version:
                ctx.status("asking the archive's library which CUDA it was built for")
            built = built_for(pkg, Path(tmp) / "probe", ctx.env)
            refusal, notes = fit_refusal(pkg, built, root, archive.name,
                                         look(root.path).manifest, asked, False)
        elif refusal is None:
            refusal, notes = machine_fit(pkg, built, asked(), False)
    result.cudnn_version = pkg.cudnn_version
    result.add("package", pkg.to_dict())
    result.add("built_for_cuda", built.to_dict())
    result.add("checksum", expected.to_dict() if expected else None)
    result.add("verdict", "installable" if refusal is None else "refused")
    result.add("notes", list(notes))
    result.cuda_root = str(root.path) if root is not None else None
    result.lines += describe_package(pkg, built, str(root.path) if root else None,
                                     root.version if root else None, refusal)
    if expected is not None and pkg.sha256 == expected.digest:
        result.lines.append(f"checksum     matches the {expected.source}")
    if root is None:
        result.lines.append("CUDA root    none given: whether the build fits one was not judged "
                            "(--cuda-root names one)")
    result.lines += [f"note         {n}" for n in notes]
    if refusal is not None:
        raise _as_inspect_says_it(refusal)


def _as_inspect_says_it(refusal: ArchiveRejected) -> ArchiveRejected:
    """install's refusal, word for word, but for the hint's --force: inspect takes no such
    option, so the override is named with the command that takes it."""
    refusal.hint = re.sub(r"(?<![\w`-])--force(?![\w-])", "`cudnn-setup install --force`",
                          refusal.hint)
    return refusal


def describe_package(pkg: Package, built: BuiltFor | None = None, root: str | None = None,
                     root_cuda: str | None = None,
                     refusal: ArchiveRejected | None = None) -> list[str]:
    lines = [f"archive      {escape(pkg.archive_name)} ({pkg.compression}, {pkg.size} bytes)",
             f"sha256       {pkg.sha256 or '-'}",
             f"generation   {pkg.generation or 'unknown'} (layout: {pkg.layout or '-'}, "
             f"top dir: {escape(pkg.top_dir or '-')})",
             f"cuDNN        {pkg.cudnn_version or 'unknown'}"
             + (f"  [{pkg.version_source}]" if pkg.version_source else ""),
             f"built for    CUDA {built.version or '-'} ({built.source})" if built else
             f"built for    CUDA {pkg.cuda_version or 'unknown (not in the file name)'}"]
    facts = pkg.name_facts
    platform = f"{facts.os}-{facts.arch} (name)" if facts else "unknown (name)"
    lines.append(f"platform     {platform}; ELF: {', '.join(pkg.elf_machines) or '-'}")
    lines.append(f"headers      {', '.join(m.name for m in pkg.headers) or '-'}")
    for lib in pkg.libraries:
        soname = lib.elf.soname if lib.elf else "?"
        lines.append(f"library      {link_chains(pkg, lib.name)}  (SONAME {soname})")
    for m in pkg.static_libraries:
        lines.append(f"static       {m.name}")
    lines.append(f"complete     {'yes' if not pkg.missing else 'no, missing ' + ', '.join(pkg.missing)}")
    for p in pkg.problems:
        lines.append(f"{p.severity:<12} {p.message}" + (f" — {p.hint}" if p.hint else ""))
    if root is None:
        lines.append("verdict      " + ("installable on this machine" if refusal is None
                                        else "NOT installable on this machine"))
    elif refusal is None:
        lines.append(f"verdict      installable into {root} (CUDA {root_cuda or 'unknown'})")
    else:
        lines.append(f"verdict      NOT installable into {root} (CUDA {root_cuda or 'unknown'})")
    return lines


def link_chains(pkg: Package, name: str) -> str:
    """The archive's links to library `name` as the chains they are, from the name a linker
    uses to the file: "libcudnn.so -> libcudnn.so.9 -> libcudnn.so.9.1.0" (two links that
    lead there apart: "a -> c; b -> c"), whatever order the archive lists its members in."""
    links = [link for link in pkg.links if link.chain and link.chain[-1] == name]
    targeted = {hop for link in links for hop in link.chain[:-1]}
    heads = sorted((link for link in links if link.name not in targeted),
                   key=lambda link: (-len(link.chain), link.name))
    if not heads:
        return escape(name)
    return "; ".join(" -> ".join(escape(n) for n in [link.name, *link.chain]) for link in heads)
