"""The `cuda` layer: the CUDA this cuDNN was built for against the root's toolkit."""
from __future__ import annotations

from typing import TYPE_CHECKING

from cudnn_setup.installation.built_for import built_for
from cudnn_setup.installation.model import Installation
from cudnn_setup.facts import cuda
from cudnn_setup.probing.load_answer import LoadAnswer
from cudnn_setup.report import FAIL, PASS, SKIP, Check
from cudnn_setup.state.view import command_line

if TYPE_CHECKING:
    from cudnn_setup.checks.check_facts import CheckFacts


def check_cuda(inst: Installation, facts: CheckFacts) -> Check:
    """The CUDA major this cuDNN was built for against the root's."""
    return check_cuda_with(inst, facts.machine.load(inst).answer)


def check_cuda_with(inst: Installation, load_data: LoadAnswer | None) -> Check:
    root_version = inst.root.version
    learnt = built_for(inst, load_data)
    built, source = learnt.version, learnt.source or ""
    if not root_version or not built:
        return Check("cuda", SKIP, "CUDA version of the root or of cuDNN's build unknown",
                     {"root": root_version, "cudnn_built_for": built})
    data = {"root": root_version, "cudnn_built_for": built, "source": source,
            "root_path": str(inst.root.path), "root_found_via": inst.root.found_via}
    root = root_phrase(inst)
    if not cuda.same_major(built, root_version):
        if inst.origin is None:  # the root's own cuDNN: another archive is the fix
            again = command_line(f"install {inst.major or 'VERSION'}", inst.root.path)
            hint = f"install the build for CUDA {root_version.split('.')[0]}: `{again}` picks it"
        else:  # a cuDNN elsewhere, judged against a toolkit it may not be meant for
            hint = (f"pass --cuda-root naming the CUDA {built.split('.')[0]} toolkit your "
                    f"programs build against, or use a cuDNN built for CUDA "
                    f"{root_version.split('.')[0]}")
        return Check("cuda", FAIL, f"this cuDNN was built for CUDA {built} ({source}) but "
                     f"{root} is CUDA {root_version}", dict(data, hint=hint))
    return Check("cuda", PASS, f"built for CUDA {built} ({source}); {root} is CUDA "
                 f"{root_version}", data)


def root_phrase(inst: Installation) -> str:
    """The CUDA root a check judged against, and whether the user named it: a cuDNN outside a
    root (--lib-dir) is judged against a discovered one unless --cuda-root is given."""
    if inst.origin is None:
        return "the root"
    how = ("given by --cuda-root" if inst.root.found_via == "--cuda-root" else
           f"discovered via {inst.root.found_via}, not given; --cuda-root names another")
    return f"the CUDA root {inst.root.path} ({how})"
