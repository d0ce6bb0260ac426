"""`inspect`: read an archive once and judge it, installing nothing."""
from __future__ import annotations

from pathlib import Path

from cudnn_setup.archive import inspect_archive
from cudnn_setup.archive.package import Package
from cudnn_setup.commands.base import Context, command, which
from cudnn_setup.errors import ArchiveRejected
from cudnn_setup.report import Result
from cudnn_setup.text import escape


@command("inspect")
def inspect(result: Result, ctx: Context, archive: Path) -> None:
    pkg = inspect_archive(archive, xz=which(ctx, "xz"))
    result.cudnn_version = pkg.cudnn_version
    result.add("package", pkg.to_dict())
    result.lines += describe_package(pkg)
    if not pkg.installable:
        errors = [p for p in pkg.problems if p.severity == "error"]
        raise ArchiveRejected(f"{escape(archive.name)} cannot be installed here: "
                              f"{len(errors)} problem(s)", errors[0].hint, problems=errors)


def describe_package(pkg: Package) -> list[str]:
    lines = [f"archive      {escape(pkg.archive_name)} ({pkg.compression}, {pkg.size} bytes)",
             f"sha256       {pkg.sha256 or '-'}",
             f"generation   {pkg.generation or 'unknown'} (layout: {pkg.layout or '-'}, "
             f"top dir: {escape(pkg.top_dir or '-')})",
             f"cuDNN        {pkg.cudnn_version or 'unknown'}"
             + (f"  [{pkg.version_source}]" if pkg.version_source else ""),
             f"built for    CUDA {pkg.cuda_version or 'unknown (not in the file name)'}"]
    facts = pkg.name_facts
    platform = f"{facts.os}-{facts.arch} (name)" if facts else "unknown (name)"
    lines.append(f"platform     {platform}; ELF: {', '.join(pkg.elf_machines) or '-'}")
    lines.append(f"headers      {', '.join(m.name for m in pkg.headers) or '-'}")
    for lib in pkg.libraries:
        soname = lib.elf.soname if lib.elf else "?"
        chain = " <- ".join([lib.name] + [link.name for link in pkg.links
                                          if link.chain and link.chain[-1] == lib.name])
        lines.append(f"library      {chain}  (SONAME {soname})")
    for m in pkg.static_libraries:
        lines.append(f"static       {m.name}")
    lines.append(f"complete     {'yes' if not pkg.missing else 'no, missing ' + ', '.join(pkg.missing)}")
    for p in pkg.problems:
        lines.append(f"{p.severity:<12} {p.message}" + (f" — {p.hint}" if p.hint else ""))
    lines.append("verdict      " + ("installable on this machine" if pkg.installable
                                    else "NOT installable on this machine"))
    return lines
