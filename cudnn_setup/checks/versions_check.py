"""The `versions` layer: the header, the library file and the record say one version."""
from __future__ import annotations

from typing import TYPE_CHECKING

from cudnn_setup.installation.model import Installation
from cudnn_setup.facts import cudnn as gen
from cudnn_setup.report import FAIL, PASS, SKIP, Check

if TYPE_CHECKING:
    from cudnn_setup.checks.check_facts import CheckFacts


def check_versions(inst: Installation, facts: CheckFacts) -> Check:
    """The header's version, the library file's name and the record agree."""
    header = inst.header_version
    main = inst.library("libcudnn")
    if header is None or main is None:
        return Check("versions", SKIP, "no header or no libcudnn to compare")
    found = {"header": header, "library file": gen.library_file_version(main.name)}
    if inst.manifest:
        found["manifest"] = inst.manifest.cudnn_version
    problems = []
    if inst.manifest and found["manifest"] != header:
        problems.append(f"the manifest says {found['manifest']}, the header {header}")
    follows_cuda = inst.generation and gen.version_follows_cuda(inst.generation)
    lib_version = found["library file"] or ""
    if not follows_cuda and not (header + ".").startswith(lib_version + "."):
        problems.append(f"the header says {header}, the library file is {main.name}")
    if problems:
        return Check("versions", FAIL, "; ".join(problems) + " (Theano: 'Mixed dnn version')",
                     found)
    extra = f" (library named for CUDA {lib_version})" if follows_cuda else ""
    return Check("versions", PASS, f"cuDNN {header} in header, library file"
                 + (" and manifest" if inst.manifest else "") + extra, found)
