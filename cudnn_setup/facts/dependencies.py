"""What cuDNN's run-time dependencies are for, how bad a missing one is, and how to get it.

Which libraries a cuDNN needs is read from the libraries themselves (DT_NEEDED entries and the
names they keep for dlopen, see ldresolve); this table only says what each known one is for.

Sources:
  [run]   NVIDIA, "Building and Running a cuDNN Dependent Program":
          https://docs.nvidia.com/deeplearning/cudnn/installation/build-run-cudnn.html
          (libz.so "required by ld.so at load-time"; libcublasLt.so "required by dlopen() at
          runtime when using certain convolution engines, legacy convolution APIs, RNN APIs, and
          legacy multihead attention APIs"; libnvrtc.so "required by dlopen() at runtime when
          using runtime-compiled engines")
  [9.0]   cuDNN 9.0.0 release notes: "cuDNN no longer depends on the cuBLAS library; instead
          cuDNN now depends on the cuBLASLt library"
          https://docs.nvidia.com/deeplearning/cudnn/backend/latest/release-notes.html
  [zlib]  cuDNN installation guide, "Installing Zlib" (apt-get install zlib1g / yum install zlib):
          https://docs.nvidia.com/deeplearning/cudnn/installation/linux.html
  [nvrtc] NVRTC user guide (libnvrtc loads libnvrtc-builtins at run time):
          https://docs.nvidia.com/cuda/nvrtc/index.html
  [wheel] the libraries of nvidia-cudnn-cu12 9.1.0.70 and nvidia-cudnn-cu11 8.9.6.50 as read on
          this project's machines: DT_NEEDED libz.so.1 in libcudnn_graph.so.9 and
          libcudnn_cnn_infer.so.8, which import zlib's inflateInit2_/inflate/inflateEnd/deflateEnd
          (nm -D); embedded names libcublasLt.so.12, libnvrtc.so.%d, libcublas.so.11,
          libcublasLt.so.11, libnvrtc.so.%d.%d, libcuda.so.1; libcask_profile_interface.so next
          to "CASK_INJECTION64_PATH" and "InitializeInjectionCask".
  [pypi]  PyPI: nvidia-cublas-cu11/-cu12, nvidia-cuda-nvrtc-cu11/-cu12; for CUDA 13 the
          unsuffixed nvidia-cublas and nvidia-cuda-nvrtc (nvidia-cublas-cu13 and
          nvidia-cuda-nvrtc-cu13 are 0.0.1 placeholders: "DEPRECATED: Use nvidia-cublas instead").
  [repo]  NVIDIA's CUDA repositories name packages per CUDA major-minor: libcublas-12-4,
          cuda-nvrtc-12-4 (CUDA installation guide for Linux, "Meta Packages"/package names:
          https://docs.nvidia.com/cuda/cuda-installation-guide-linux/); Ubuntu's own multiverse
          archive has libcublas12, libcublaslt12, libnvrtc12.
  [distro] Debian's and Ubuntu's own packages of NVIDIA's libraries (packages.debian.org,
          non-free / multiverse): libcublas12, libcublaslt12, libnvrtc12,
          libnvrtc-builtins12.4 (nvidia-cuda-toolkit 12.4), libcuda1 (the driver's libcuda.so.1);
          RPM Fusion's xorg-x11-drv-nvidia-cuda-libs (Fedora, RHEL with RPM Fusion).
  [apt]   apt-cache(8): `policy` prints one block per package the configured sources know
          ("NAME:" then "  Candidate: VERSION", "(none)" when none can be installed) and nothing
          for a name no source has; dnf(8) `list` prints "NAME.ARCH VERSION REPO" for each match
          and exits 1 when nothing matches; zypper(8) `search --match-exact` prints a table row
          "| NAME | …" for each match and exits 104 when there is none.
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from msgspec import Struct

from cudnn_setup.child import Runner, run_command

from cudnn_setup.facts.cudnn import so_base

FAIL, WARN, SKIP = "fail", "warn", "skip"

APT, DNF, ZYPPER = "apt", "dnf", "zypper"
_FAMILIES = {
    APT: {"debian", "ubuntu", "linuxmint", "pop", "raspbian"},
    DNF: {"rhel", "fedora", "centos", "rocky", "almalinux", "ol", "amzn", "scientific"},
    ZYPPER: {"sles", "opensuse", "opensuse-leap", "opensuse-tumbleweed", "suse"},
}


class Need(Struct, frozen=True):
    """One known run-time dependency, by the library's base name (up to ".so")."""

    stem: str
    component: str
    needed_for: str
    missing: str  # fail | warn | skip: how a check rates its absence
    why: str  # why that rating
    sources: tuple[str, ...]
    # package names per manager in NVIDIA's CUDA repositories; "{M}" the CUDA major, "{m}" its
    # minor [repo]
    packages: tuple[tuple[str, str], ...] = ()
    wheel: str | None = None  # "{suffix}": "-cu11", "-cu12", "" for CUDA 13 and later
    # package names per manager in the distributions' own archives [distro]
    distro: tuple[tuple[str, str], ...] = ()


NEEDS: tuple[Need, ...] = (
    Need("libz.so", "zlib",
         "loading cuDNN at all: libcudnn_graph.so.9 (9.x) and libcudnn_cnn_infer.so.8 (8.x) list "
         "libz.so.1 as DT_NEEDED and call zlib's inflate to unpack data they carry compressed",
         FAIL, "ld.so refuses to load the sub-library, and with it every cuDNN call",
         ("[run]", "[zlib]", "[wheel]"),
         distro=((APT, "zlib1g"), (DNF, "zlib"), (ZYPPER, "libz1"))),
    Need("libcublasLt.so", "cuBLASLt",
         "engines that use cuBLASLt: certain convolution engines, the legacy convolution API "
         "(cudnnConvolutionForward, which Theano and most frameworks call), RNN and legacy "
         "multi-head attention",
         FAIL, "cuDNN loads, but convolutions through the legacy API fail when it dlopens cuBLASLt",
         ("[run]", "[9.0]", "[wheel]"),
         ((APT, "libcublas-{M}-{m}"), (DNF, "libcublas-{M}-{m}"), (ZYPPER, "libcublas-{M}-{m}")),
         "nvidia-cublas{suffix}", distro=((APT, "libcublaslt{M}"),)),
    Need("libcublas.so", "cuBLAS",
         "cuDNN 8.x GEMM-based paths (libcudnn_ops_infer.so.8 opens it; cuDNN 9 dropped it)",
         FAIL, "cuDNN 8 operations that call cuBLAS fail at run time",
         ("[9.0]", "[wheel]"),
         ((APT, "libcublas-{M}-{m}"), (DNF, "libcublas-{M}-{m}"), (ZYPPER, "libcublas-{M}-{m}")),
         "nvidia-cublas{suffix}", distro=((APT, "libcublas{M}"),)),
    Need("libnvrtc.so", "NVRTC",
         "runtime-compiled engines: cuDNN 9's libcudnn_engines_runtime_compiled and 8.x's "
         "runtime fusion engines in libcudnn_cnn_infer/ops_infer",
         WARN, "precompiled engines still run; fused operation graphs that need runtime "
         "compilation are not available",
         ("[run]", "[wheel]"),
         ((APT, "cuda-nvrtc-{M}-{m}"), (DNF, "cuda-nvrtc-{M}-{m}"), (ZYPPER, "cuda-nvrtc-{M}-{m}")),
         "nvidia-cuda-nvrtc{suffix}", distro=((APT, "libnvrtc{M}"),)),
    Need("libnvrtc-builtins.so", "NVRTC builtins",
         "NVRTC itself: libnvrtc opens it when it compiles, so runtime-compiled engines need both",
         WARN, "as for NVRTC: only runtime-compiled engines are affected",
         ("[nvrtc]",),
         ((APT, "cuda-nvrtc-{M}-{m}"), (DNF, "cuda-nvrtc-{M}-{m}"), (ZYPPER, "cuda-nvrtc-{M}-{m}")),
         "nvidia-cuda-nvrtc{suffix}", distro=((APT, "libnvrtc-builtins{M}.{m}"),)),
    Need("libcuda.so", "the NVIDIA driver (user-mode CUDA driver)",
         "everything that runs on a GPU",
         FAIL, "without it nothing runs on the GPU; on a machine with no NVIDIA driver at all this "
         "is rated skip, since there is nothing cuDNN could run on",
         ("[wheel]",),
         ((APT, "cuda-drivers"), (DNF, "nvidia-driver-cuda-libs"), (ZYPPER, "nvidia-compute-G06")),
         distro=((APT, "libcuda1"), (DNF, "xorg-x11-drv-nvidia-cuda-libs"))),
    Need("libcask_profile_interface.so", "kernel profiling injection",
         "nothing by default: loaded only when CASK_INJECTION64_PATH asks for a profiling hook",
         SKIP, "optional; no CUDA or cuDNN package ships it",
         ("[wheel]",)),
    Need("libcudnn", "cuDNN's own sub-libraries",
         "the part of cuDNN the sub-library holds (ops, cnn, adv, graph, heuristic, engines)",
         FAIL, "cuDNN returns CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED or aborts",
         ("[wheel]",)),
)

_BY_STEM = {n.stem: n for n in NEEDS}

# cuDNN's wheels carry RUNPATH $ORIGIN:$ORIGIN/../../cublas/lib:$ORIGIN/../../nvrtc/lib. The
# cuBLAS wheel installs into nvidia/cublas/lib, which matches; the NVRTC wheel installs into
# nvidia/cuda_nvrtc/lib (nvidia-cuda-nvrtc-cu12 12.4.127), which does not [wheel].
_WHEEL_NOTE = {
    "libcublasLt.so": "a cuDNN wheel in the same site-packages finds it through its RUNPATH",
    "libcublas.so": "a cuDNN wheel in the same site-packages finds it through its RUNPATH",
    "libnvrtc.so": "its directory (site-packages/nvidia/cuda_nvrtc/lib) is not in the cuDNN "
                   "wheel's RUNPATH (…/nvidia/nvrtc/lib): add it to LD_LIBRARY_PATH too",
}


def classify(name: str) -> Need | None:
    """The table's entry for a soname ("libcublasLt.so.12" → cuBLASLt), None when unknown."""
    if name.startswith("libcudnn"):
        return _BY_STEM["libcudnn"]
    return _BY_STEM.get(so_base(name))


def severity(name: str, driver_present: bool) -> str:
    """How a check rates this library being missing; unknown libraries are a warning."""
    need = classify(name)
    if need is None:
        return WARN
    if need.stem == "libcuda.so" and not driver_present:
        return SKIP
    return need.missing


def package_manager(distro_id: str, like: str = "") -> str | None:
    """apt, dnf or zypper for an os-release ID (and ID_LIKE), None when not one of those."""
    ids = [distro_id.lower(), *like.lower().split()]
    for manager, members in _FAMILIES.items():
        if any(i in members or any(i.startswith(m) for m in members) for i in ids):
            return manager
    return None


def this_distro() -> tuple[str, str]:
    """(ID, ID_LIKE) of this machine, read by the `distro` package."""
    import distro

    return distro.id(), distro.like()


def wheel_suffix(cuda_major: int) -> str:
    return f"-cu{cuda_major}" if cuda_major <= 12 else ""


class Fix(Struct, frozen=True):
    how: str  # directory | with-deps | wheel | package | repository | reinstall
    text: str  # what to run or do
    detail: str = ""


# Which of some package names this machine's configured repositories have: name → True/False,
# or None when the package manager could not be asked (not on PATH, timed out, failed).
Availability = Callable[[str, Sequence[str]], "dict[str, bool] | None"]

_INSTALL = {APT: "apt-get install", DNF: "dnf install", ZYPPER: "zypper install"}
_ASKED = {APT: "apt-cache policy", DNF: "dnf list", ZYPPER: "zypper search"}
NVIDIA_REPOS = "https://developer.download.nvidia.com/compute/cuda/repos/"


def fixes(name: str, cuda_version: str | None, manager: str | None,
          found_in: Sequence[Path] = (), available: Availability | None = None,
          wheel_cudnn: bool = False) -> list[Fix]:
    """Ways to provide a missing library on this machine, in the order a user would try them:
    a directory here that has it, the pip wheel for this CUDA major, the distribution's package
    where this machine's repositories have it (`available` says which do), NVIDIA's CUDA
    repository otherwise, said as such. `cuda_version` "12.4" or "12"; `wheel_cudnn`: the cuDNN
    is a pip wheel's (which finds the cuBLAS wheel through its RUNPATH)."""
    need = classify(name)
    out = [Fix("directory", f"add {d} to LD_LIBRARY_PATH or to a file in /etc/ld.so.conf.d/ "
               "and run ldconfig", f"{name} is there") for d in found_in]
    if need is None:
        return out
    major, minor = _split(cuda_version)
    if need.wheel and major is not None and major >= 11:
        wheel = need.wheel.format(suffix=wheel_suffix(major))
        out.append(Fix("wheel", f"pip install {wheel}", _WHEEL_NOTE.get(need.stem, "")
                       if wheel_cudnn else _wheel_dir_note(wheel)))
    if manager is None:
        return out
    distro = [p for p in (_fill(t, major, minor) for m, t in need.distro if m == manager) if p]
    nvidia = [p for p in (_fill(t, major, minor) for m, t in need.packages if m == manager) if p]
    askable = [p for p in distro + nvidia if "<minor>" not in p]
    known = (available or (lambda m, names: None))(manager, askable) if askable else None
    there = [p for p in askable if known and known.get(p)]
    for pkg in there:
        out.append(Fix("package", f"{_INSTALL[manager]} {pkg}", "in this machine's configured "
                       f"repositories (`{_ASKED[manager]} {pkg}` lists it)"))
    if there:
        return out
    if known is None:  # could not be asked: said as such, never as a sure thing
        for pkg in distro:
            out.append(Fix("package", f"{_INSTALL[manager]} {pkg}", "the distribution's package; "
                           f"not confirmed: `{_ASKED[manager]}` could not be asked here"))
    for pkg in nvidia:
        minor_note = ("; <minor> is the CUDA minor version you run" if "<minor>" in pkg else "")
        out.append(Fix("repository", f"add NVIDIA's CUDA repository ({NVIDIA_REPOS}<distro>/"
                       f"<arch>/), then {_INSTALL[manager]} {pkg}",
                       "from NVIDIA's CUDA repository, which this machine's repositories do not "
                       f"include{minor_note}"))
    return out


def _fill(template: str, major: int | None, minor: int | None) -> str | None:
    """A package name for this CUDA version; None when it needs a major that is not known."""
    if ("{M}" in template or "{m}" in template) and major is None:
        return None
    return template.replace("{M}", str(major)).replace(
        "{m}", str(minor) if minor is not None else "<minor>")


def _wheel_dir_note(wheel: str) -> str:
    sub = "cuda_nvrtc" if "nvrtc" in wheel else "cublas"
    return (f"it installs into site-packages/nvidia/{sub}/lib: add that directory to "
            "LD_LIBRARY_PATH for programs that load this cuDNN")


MAX_ASKED = 8  # package names asked about in one call
ASK_TIMEOUT = 15.0  # seconds for the package manager to answer from its local cache


def query_packages(manager: str, names: Sequence[str], env: Mapping[str, str],
                   timeout: float = ASK_TIMEOUT, runner: Runner | None = None) -> dict[str, bool] | None:
    """Which of `names` the configured repositories have, asked of this machine's package
    manager from its local cache (never refreshed: nothing is downloaded), as a child with a
    time limit, found on `env`'s PATH; None when it cannot be asked."""
    names = [n for n in names if _PACKAGE.fullmatch(n)][:MAX_ASKED]
    if not names:
        return {}
    path = env.get("PATH", os.defpath)
    cmd: list[str] | None = {APT: ["apt-cache", "policy"], DNF: ["dnf", "--cacheonly", "--quiet", "list"],
           ZYPPER: ["zypper", "--no-refresh", "--non-interactive", "search", "--match-exact",
                    "--type", "package"]}.get(manager)
    program = shutil.which(cmd[0], path=path) if cmd is not None else None
    if cmd is None or program is None:
        return None
    run_env = {**env, "LC_ALL": "C", "LANG": "C"}
    done = run_command([program, *cmd[1:], "--", *names] if manager != ZYPPER
                       else [program, *cmd[1:], *names], timeout, env=run_env, runner=runner)
    if done.timed_out or done.returncode is None:
        return None
    text = done.stdout.decode("utf-8", "replace")
    if manager == APT:
        if done.returncode != 0:
            return None
        found = _apt_candidates(text)
    elif manager == DNF:
        if done.returncode not in (0, 1):
            return None
        found = {line.split()[0].rsplit(".", 1)[0] for line in text.splitlines()
                 if line.strip() and not line.startswith((" ", "Installed", "Available"))}
    else:
        if done.returncode not in (0, 104):
            return None
        found = {cols[1].strip() for cols in (line.split("|") for line in text.splitlines())
                 if len(cols) > 2}
    return {n: n in found for n in names}


_PACKAGE = re.compile(r"[a-z0-9][a-z0-9+.-]{0,100}")  # a package name, nothing an option


def _apt_candidates(text: str) -> set[str]:
    """The packages of `apt-cache policy` output that have an installation candidate."""
    found, current = set(), None
    for line in text.splitlines():
        if line and not line[0].isspace() and line.endswith(":"):
            current = line[:-1]
        elif current and line.strip().startswith("Candidate:"):
            if line.split(":", 1)[1].strip() not in ("(none)", ""):
                found.add(current)
            current = None
    return found


def _split(version: str | None) -> tuple[int | None, int | None]:
    if not version:
        return None, None
    m = re.fullmatch(r"(\d+)(?:\.(\d+))?(?:\.\d+)*", version.strip())
    if not m:
        return None, None
    return int(m.group(1)), int(m.group(2)) if m.group(2) is not None else None


def find_elsewhere(candidates: Iterable[str], dirs: Iterable[str | os.PathLike]) -> list[Path]:
    """Directories among `dirs` holding a file by one of the names (to suggest adding them)."""
    names = list(candidates)
    out = []
    for d in dirs:
        p = Path(d)
        if any((p / n).is_file() for n in names):
            out.append(p)
    return list(dict.fromkeys(out))
