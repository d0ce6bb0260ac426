"""Which clients of cuDNN need which of its sub-libraries, and why: the one table.

cuDNN 9 serves two APIs. The legacy API (cudnnConvolutionForward, cudnnBatchNormalization…,
cudnnRNN…) lives in libcudnn_cnn, libcudnn_adv and libcudnn_ops. The graph API lives in
libcudnn_graph and runs engines: precompiled ones found through libcudnn_heuristic, and
runtime-compiled ones (libcudnn_engines_runtime_compiled, which NVRTC compiles on the GPU).
The JIT flavour (libcudnn, libcudnn_graph, libcudnn_engines_runtime_compiled) is the graph API
with runtime-compiled engines only. Measured on an H200 with PyTorch 2.11 and cuDNN 9.19, the
JIT flavour alone: fp16 convolution and scaled-dot-product attention work; fp32 convolution
fails ("unable to find an engine": no precompiled engine, no heuristic), batch normalisation and
LSTM fail with CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE (they call the legacy API).

A client kind needs every sub-library in its `needs`, for the reason given. cuDNN 8 is one
API in six sub-libraries that every client loads (libcudnn.so.8 opens all six by SONAME), so
there a client needs the whole release.
"""
from __future__ import annotations

from msgspec import Struct

from cudnn_setup.facts import cudnn as gen

LEGACY = "legacy"
GRAPH = "graph"
JIT_ONLY = "jit-only"

LEGACY_LIBS = ("libcudnn_ops", "libcudnn_cnn", "libcudnn_adv")
PRECOMPILED_LIBS = ("libcudnn_graph", "libcudnn_heuristic", "libcudnn_engines_precompiled")
# What PyTorch 2.11 (cuDNN 9.19, H200) opened for fp32 convolution, batch normalisation and
# LSTM, in this order (LD_DEBUG=libs): graph, engines_precompiled, heuristic,
# engines_runtime_compiled, ops, adv. Not libcudnn_cnn: the legacy convolution is not called,
# which is why a stubbed libcudnn_cnn leaves PyTorch working and Theano not.
GRAPH_LEGACY_LIBS = ("libcudnn_ops", "libcudnn_adv")


class ClientKind(Struct, frozen=True):
    name: str
    clients: str  # who they are, in words
    needs: tuple[str, ...]  # library stems, cuDNN 9
    why: str


KINDS = (
    # Not Theano: Theano 1.0.5 calls functions cuDNN 8 removed (facts/theano.py), so no cuDNN
    # 9 serves it, whatever its sub-libraries.
    ClientKind(LEGACY, "ONNX Runtime and code written for cuDNN v7 (the legacy API)",
               ("libcudnn", "libcudnn_graph", *LEGACY_LIBS),
               "cudnnConvolutionForward and the other legacy calls live in libcudnn_cnn, "
               "libcudnn_adv and libcudnn_ops, which list libcudnn_graph as DT_NEEDED"),
    ClientKind(GRAPH, "PyTorch's fp32 convolution, batch normalisation and LSTM; TensorFlow; "
                      "JAX (the graph API with heuristics and precompiled engines, and the "
                      "ops and adv calls they still make)",
               ("libcudnn", *PRECOMPILED_LIBS, *GRAPH_LEGACY_LIBS),
               "fp32 convolution needs a precompiled engine that the heuristics pick "
               "(\"unable to find an engine\" without them); batch normalisation and LSTM call "
               "libcudnn_ops and libcudnn_adv (NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE without "
               "them)"),
    ClientKind(JIT_ONLY, "PyTorch's fp16 convolution and scaled-dot-product attention (the "
                         "graph API with runtime-compiled engines)",
               ("libcudnn", "libcudnn_graph", "libcudnn_engines_runtime_compiled"),
               "NVRTC compiles their engines at run time; this is all the JIT flavour has"),
)

BY_NAME = {k.name: k for k in KINDS}

# Frameworks the frameworks check finds, and Theano: the kinds of call each makes (PyTorch
# both: fp32 work through precompiled engines, fp16 convolution and attention through the
# runtime-compiled ones).
FRAMEWORK_KIND = {"torch": (GRAPH, JIT_ONLY), "tensorflow": (GRAPH,), "jax": (GRAPH,),
                  "jaxlib": (GRAPH,), "onnxruntime": (LEGACY,), "theano": (LEGACY,),
                  "cupy": (LEGACY,)}


def lacking(kind: ClientKind, present: set[str] | frozenset[str],
            generation: str | None) -> tuple[str, ...]:
    """The libraries `kind` needs that are not `present` (stems); before 9 every client needs
    the release's whole set, which the files check already judges."""
    if generation != gen.V9:
        return ()
    return tuple(s for s in kind.needs if s not in present)


def callers_of(stem: str) -> str | None:
    """Who calls into the cuDNN 9 sub-library `stem`, in words (None: no kind needs it): what
    damage to it breaks."""
    who = [k.clients for k in KINDS if stem in k.needs]
    return "; ".join(who) if who else None


def served(present, generation: str | None) -> list[ClientKind]:
    """The kinds of client a release made of `present` serves."""
    return [k for k in KINDS if not lacking(k, set(present), generation)]


def framework_verdict(framework: str, present, generation: str | None) -> tuple[bool, str]:
    """(works, why) for `framework` (a name FRAMEWORK_KIND knows) with a cuDNN of `present`."""
    kinds = [BY_NAME[k] for k in FRAMEWORK_KIND.get(framework, (GRAPH,))]
    needs = list(dict.fromkeys(s for k in kinds for s in k.needs))
    short = [k for k in kinds if lacking(k, set(present), generation)]
    if not short:
        return True, f"has what {framework} calls ({', '.join(needs)})"
    missing = list(dict.fromkeys(s for k in short for s in lacking(k, set(present), generation)))
    return False, (f"{framework} needs {', '.join(missing)}, which this cuDNN lacks: "
                   + "; ".join(k.why for k in short))


def link_clients(stem: str, generation: str | None) -> str:
    """Who loads a sub-library by its SONAME link, and so breaks when that link is gone or
    points elsewhere."""
    who = (f"programs linked against {stem} (-l{stem[3:]}) and setups that find cuDNN through "
           "the ldconfig cache load it by that name")
    if gen.opens_by_soname(generation):
        return who + "; libcudnn itself opens it by that name too, so cuDNN does not load"
    return who + ("; cuDNN's own libcudnn opens it by its full file name and does not use "
                  "the link")
