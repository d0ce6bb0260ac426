"""The CUDA an installed cuDNN was built for, and where that was learnt: one answer for every
check that needs it (deps, coherence, cuda, driver).

The library's own answer comes first: cudnnGetCudartVersion() of the files in place tells what
they are, whatever was recorded when they were installed (a library replaced since is judged
by what it is). Then what the install recorded in the manifest (read from the archive's name,
header or library, and said so), then the major in an NVIDIA wheel's name.
"""
from __future__ import annotations

from cudnn_setup.facts.cuda import FROM_LIBRARY, FROM_WHEEL_NAME, BuiltFor
from cudnn_setup.installation.model import Installation
from cudnn_setup.probing.load_answer import LoadAnswer


def built_for(inst: Installation, load: LoadAnswer | None) -> BuiltFor:
    if load is not None and load.cuda:
        return BuiltFor(load.cuda, FROM_LIBRARY)
    if inst.manifest is not None and inst.manifest.cuda_version:
        return BuiltFor(inst.manifest.cuda_version, inst.manifest.cuda_learnt_from)
    major = (inst.origin_facts.get("wheel") or {}).get("cuda_major")
    if isinstance(major, int) and not isinstance(major, bool):
        return BuiltFor(str(major), FROM_WHEEL_NAME)
    return BuiltFor(None, None)
