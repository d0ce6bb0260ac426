"""The `clients` check: whether each client on this machine would work with this cuDNN.

The frameworks found by the frameworks check, and Theano (the client this tool configures),
are each judged by the sub-libraries their calls need (facts/clients.py). A client present that
would break with this cuDNN fails the check, whichever cuDNN it loads today: one that loads its
own wheel's now breaks the day it is pointed at this root (LD_LIBRARY_PATH, LD_PRELOAD, as the
programs that use this cuDNN are), and the detail says which cuDNN it loads now. With none
present it passes and says which kinds of client the install serves and which it does not (the
JIT flavour alone serves PyTorch's fp16 convolution and attention, not its fp32 convolution,
batch normalisation or LSTM). Before cuDNN 9 every client loads the whole release, which the
files check judges: skip.

Theano is judged by its own table first (facts/theano.py): Theano 1.0.5 uses no cuDNN 9, whatever
sub-libraries it has. Under the config this tool writes it then runs without cuDNN, so that is a
warn naming the reason, not a client broken by this install.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Sequence

from cudnn_setup.checks.framework_entry import FrameworkEntry
from cudnn_setup.checks.theano_check import has_theano, theano_range_note, theano_supports
from cudnn_setup.child import Unanswered
from cudnn_setup.installation.model import Installation
from cudnn_setup.facts import clients
from cudnn_setup.facts import cudnn as gen
from cudnn_setup.report import FAIL, PASS, SKIP, WARN, Check

if TYPE_CHECKING:
    from cudnn_setup.checks.check_facts import CheckFacts

NAME = "clients"


def check_clients(inst: Installation, facts: CheckFacts) -> Check:
    """The frameworks the frameworks check found and Theano (asked whether it is installed
    for cuDNN 9 only, where it is judged), each judged against this cuDNN's sub-libraries."""
    skipped = _not_judged(inst)
    if skipped is not None:
        return skipped
    entries = facts.machine.frameworks(facts.python).entries if facts.frameworks else []
    theano = None  # not judged: --no-theano, or the interpreter gave no answer (the theano
    if facts.theano:  # check, which asks it too, says so)
        try:
            theano = has_theano(facts.python, facts.env, facts.runner)
        except Unanswered:
            pass
    return check_clients_with(inst, entries, theano)


def _not_judged(inst: Installation) -> Check | None:
    if inst.generation != gen.V9 or not inst.libraries:
        return Check(NAME, SKIP, "before cuDNN 9 every client loads the whole release (the "
                     "files check judges it)" if inst.libraries else "no cuDNN library")
    return None


def check_clients_with(inst: Installation, frameworks: Sequence[FrameworkEntry],
                       theano: bool | None) -> Check:
    """`frameworks`: the frameworks check's entries; `theano`: whether Theano is installed,
    None when Theano is not judged: its verdict is always given, but fails the check only
    where Theano is there."""
    skipped = _not_judged(inst)
    if skipped is not None:
        return skipped
    present = set(inst.composition().present)
    served = clients.served(present, inst.generation)
    # a framework is a client of cuDNN when it was built for one or loads one: a CPU build of
    # ONNX Runtime, or CuPy 14 (no cuDNN module), never opens it
    found = {e.name: True for e in frameworks if e.importable and e.name in clients.FRAMEWORK_KIND
             and (e.cudnn_built_for or e.cudnn_loaded)}
    # which cuDNN each framework loaded, where the frameworks check saw it (None: not seen,
    # e.g. without a GPU); Theano loads the one its config names, this one
    loads = {e.name: (e.cudnn_loaded.dir if e.cudnn_loaded else None) for e in frameworks}
    if theano is not None:
        found["theano"] = theano
    verdicts: list[dict[str, Any]] = []
    unused: list[str] = []  # present clients that do not use this cuDNN at all
    for name, there in found.items():
        works, why = clients.framework_verdict(name, present, inst.generation)
        if name == "theano" and not theano_supports(inst.version):
            works, why = False, (f"theano would not use this cuDNN: "
                                 f"{theano_range_note(inst.version)}; under the config "
                                 "cudnn-setup writes it runs without cuDNN")
            if there:
                unused.append(name)
        where = loads.get(name)
        this = True if name == "theano" else (None if not where else _same_dir(where, inst.lib_dir))
        if this is False and not works:  # its own copy today; this one when pointed here
            why = (f"{why} with this cuDNN (it loads the cuDNN in {where} now; pointed at this "
                   "root, as the programs that use this cuDNN are, it would break)")
        verdicts.append({"client": name, "present": there, "loads_this": this, "works": works,
                         "why": why})
    kinds = [{"kind": k.name, "clients": k.clients, "served": k in served,
              "lacks": list(clients.lacking(k, present, inst.generation)), "why": k.why}
             for k in clients.KINDS]
    data = {"clients": verdicts, "kinds": kinds}
    broken = [v for v in verdicts
              if not v["works"] and v["present"] and v["client"] not in unused]
    if broken:
        return Check(NAME, FAIL, "; ".join(
            v["why"] + (" (which cuDNN it loads now was not seen here)"
                        if v["loads_this"] is None else "") for v in broken),
                     {**data, "hint": "install the full flavour of this cuDNN release "
                                      "(not cudnn_jit): the clients above call what it adds"})
    not_served = [k for k in clients.KINDS if k not in served]
    serves = "; ".join(k.clients for k in served) or "no kind of client"
    working = [v["client"] for v in verdicts if v["works"]]
    detail = (f"{', '.join(working)} would work with this cuDNN; " if working
              else "" if unused else "no client of cuDNN found on this machine; ")
    # what the release ships, not what loads here: a sub-library whose own dependencies are
    # missing (cuBLAS, say) is the deps check's failure, which names what it breaks
    detail += f"it ships what these call: {serves}"
    for v in verdicts:
        if not v["works"] and v["client"] not in unused:  # not installed here: said, not failed
            detail += f"; {v['client']} is not installed, and would not work: {v['why']}"
    if not_served:
        detail += "; not: " + "; ".join(
            f"{k.clients} (lacks {', '.join(clients.lacking(k, present, inst.generation))})"
            for k in not_served)
    if unused:
        return Check(NAME, WARN, "; ".join(v["why"] for v in verdicts
                                           if v["client"] in unused) + "; " + detail, data)
    return Check(NAME, PASS, detail, data)


def _same_dir(a: str, b) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)
