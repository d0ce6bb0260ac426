"""`doctor`: everything about cuDNN on this machine, problems first, and Theano's startup line explained."""
from __future__ import annotations

import configparser
import os
import re
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Mapping

import distro

from cudnn_setup import gpus, loader
from cudnn_setup.checks.context import find_installation, library_version
from cudnn_setup.checks.system import cudnn_copies
from cudnn_setup.cuda import CudaRoot, cuda_version, discovery_steps, why_not_toolkit
from cudnn_setup.report import FAIL, PASS, WARN, Check

CIFAR_WITH, CIFAR_WITHOUT = 21, 37  # minutes, CIFAR-10 conv net on a K20c (DESIGN §6)


@dataclass
class Finding:
    severity: str  # fail | warn | info
    message: str
    fix: str = ""

    def to_dict(self) -> dict:
        return {"severity": self.severity, "message": self.message, "fix": self.fix}


@dataclass
class Diagnosis:
    cuda_roots: list[dict] = field(default_factory=list)
    cudnn_copies: list[dict] = field(default_factory=list)
    loads: list[dict] = field(default_factory=list)
    theano_config: dict = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    explanation: list[dict] = field(default_factory=list)
    system: dict = field(default_factory=dict)

    def ordered(self) -> list[Finding]:
        rank = {"fail": 0, "warn": 1, "info": 2}
        return sorted(self.findings, key=lambda f: rank[f.severity])

    def to_dict(self) -> dict:
        return {"cuda_roots": self.cuda_roots, "cudnn_copies": self.cudnn_copies,
                "loads": self.loads, "theano_config": self.theano_config,
                "problems": [f.to_dict() for f in self.ordered()],
                "explanation": self.explanation, "system": self.system}


def all_cuda_roots(env: Mapping[str, str], explicit: Path | None) -> list[dict]:
    """Every discovery step's candidate, usable or not, in DESIGN §4 order."""
    out = []
    for step in discovery_steps(env, explicit):
        path, via, why = step()
        if path is None:
            out.append({"path": None, "found_via": via, "usable": False, "why": why})
            continue
        why = why_not_toolkit(path)
        entry = {"path": str(path), "real": os.path.realpath(path), "found_via": via,
                 "usable": why is None, "why": why}
        if why is None:
            entry["version"] = cuda_version(path)[0]
        out.append(entry)
    return out


def wheel_cudnn() -> list[dict]:
    """cuDNN shipped inside pip wheels (nvidia-cudnn-cu11/12/13) of this interpreter."""
    found = []
    for dist in metadata.distributions():
        name = (dist.metadata.get("Name") or "").lower()
        if not name.startswith("nvidia-cudnn"):
            continue
        libs = [f for f in (dist.files or []) if re.search(r"libcudnn\.so\.\d+$", str(f))]
        for lib in libs:
            found.append({"path": str(dist.locate_file(lib)), "via": f"pip wheel {name} {dist.version}",
                          "version": dist.version})
    return found


def machine_cudnn(roots: list[dict], conf: Path) -> list[dict]:
    """Every libcudnn.so.N file in CUDA roots, the loader's directories, and wheels."""
    seen: set[str] = set()
    copies = []
    dirs = []
    for r in roots:
        if r.get("usable"):
            root = CudaRoot(Path(r["path"]), r["found_via"], r.get("version"), None)
            dirs.append((root.lib_dir(), f"CUDA root {r['path']}"))
    dirs += [(Path(d), "loader path") for d in loader.search_dirs(conf)]
    for directory, via in dirs:
        if not directory.is_dir():
            continue
        for lib in sorted(directory.glob("libcudnn.so.*")):
            real = os.path.realpath(lib)
            if real in seen or not re.fullmatch(r"libcudnn\.so\.\d+", lib.name):
                continue
            seen.add(real)
            copies.append({"path": str(lib), "real": real, "via": via,
                           "version": library_version(Path(real))})
    for w in wheel_cudnn():
        real = os.path.realpath(w["path"])
        if real not in seen:
            seen.add(real)
            copies.append(dict(w, real=real))
    return copies


def theano_config(env: Mapping[str, str], home: Path) -> dict:
    """Theano's effective settings that matter for cuDNN: files of $THEANORC, then THEANO_FLAGS."""
    files = [e for e in env.get("THEANORC", "").split(os.pathsep) if e] or [str(home / ".theanorc")]
    files = [os.path.expanduser(f) for f in files]
    parser = configparser.RawConfigParser(strict=False)
    read = []
    for f in files:
        try:
            read += parser.read(f, encoding="utf-8")
        except (configparser.Error, UnicodeDecodeError) as exc:
            read.append(f"{f} (unreadable: {exc})")
    effective: dict[str, dict] = {}
    keys = ["global.device", "global.floatx", "global.optimizer_including",
            "global.optimizer_excluding", "dnn.enabled", "dnn.include_path", "dnn.library_path",
            "dnn.base_path", "cuda.root"]
    for key in keys:
        section, option = key.split(".")
        if parser.has_option(section, option):
            effective[key] = {"value": parser.get(section, option), "from": "theanorc"}
    for item in [f for f in env.get("THEANO_FLAGS", "").split(",") if "=" in f]:
        name, value = item.split("=", 1)
        name = name.strip().lower()
        full = name if "." in name else f"global.{name}"
        if full in keys:
            effective[full] = {"value": value, "from": "THEANO_FLAGS"}
    return {"files": files, "read": read, "flags": env.get("THEANO_FLAGS", ""),
            "effective": effective}


_STARTUP = re.compile(r"Using gpu device (?P<index>\d+):\s*(?P<gpu>[^(]+?)\s*\((?P<inner>.*)\)\s*$")
_NEW_BACKEND = re.compile(r"Mapped name \S+ to device (?P<dev>\S+):\s*(?P<gpu>[^(]+?)\s*(\(|$)")
_CUDNN_VERSION = re.compile(r"(?:Using )?cuDNN (?:version )?(?P<v>\d{4,5})")


def _version_text(number: int) -> str:
    if number >= 10000:
        return f"{number // 10000}.{(number % 10000) // 100}.{number % 100}"
    return f"{number // 1000}.{(number % 1000) // 100}.{number % 100}"


def explain(message: str) -> list[dict]:
    """Explain a Theano startup line, part by part."""
    parts: list[dict] = []
    text = message.strip()
    m = _STARTUP.search(text) or _NEW_BACKEND.search(text)
    gpu_name = m["gpu"].strip() if m else None
    if m and "index" in m.groupdict():
        parts.append({"part": f"Using gpu device {m['index']}", "meaning":
                      "Theano's old CUDA backend (device=gpu) picked GPU number "
                      f"{m['index']}; the backend and its messages date from Theano 0.7–0.9"})
    if gpu_name:
        cc = gpus.lookup(gpu_name)
        meaning = f"the GPU is a {gpu_name}"
        if cc:
            meaning += f", compute capability {cc}"
            if gpus.cc_tuple(cc) < gpus.cc_tuple(gpus.THEANO_MIN_CC):
                meaning += (f": older than {gpus.THEANO_MIN_CC}, the minimum of cuDNN and of "
                            "Theano's cuDNN support, so cuDNN can never be used on it")
        else:
            meaning += " (not in this tool's table of GPUs)"
        parts.append({"part": gpu_name, "meaning": meaning, "compute_capability": cc})
    inner = m["inner"] if m and "inner" in m.groupdict() else text
    cnmem = re.search(r"CNMeM is (enabled|disabled)(?: with initial size: (?P<pct>[\d.]+)% of memory)?",
                      inner)
    if cnmem:
        if cnmem.group(1) == "enabled":
            pct = cnmem["pct"]
            meaning = ("CNMeM is NVIDIA's memory pool library: Theano reserves GPU memory once and "
                       "hands it out itself, which is much faster than asking the driver for every "
                       "allocation")
            if pct:
                meaning += (f"; {pct}% means it grabbed {pct}% of the GPU's memory at start "
                            "(lib.cnmem=0.95), leaving little for other programs on that GPU")
        else:
            meaning = "Theano allocates GPU memory from the driver each time (lib.cnmem=0)"
        parts.append({"part": cnmem.group(0), "meaning": meaning})
    if re.search(r"cuDNN not available", inner):
        reason = "Theano could not use cuDNN"
        cc = next((p.get("compute_capability") for p in parts if p.get("compute_capability")), None)
        if cc and gpus.cc_tuple(cc) < gpus.cc_tuple(gpus.THEANO_MIN_CC):
            reason += (f": this GPU has compute capability {cc} and Theano's cuDNN path needs "
                       f"{gpus.THEANO_MIN_CC} or newer, so no cuDNN install can change that")
        else:
            reason += (": it could not find, compile against or load cuDNN (cudnn.h and libcudnn "
                       "not found with [dnn] include_path/library_path, or a version Theano does "
                       "not support); run `cudnn-setup verify` to find which")
        parts.append({"part": "cuDNN not available", "meaning": reason + ". Cost: convolutions run "
                      "without cuDNN (Theano's own GEMM-based kernels), e.g. a CIFAR-10 conv net "
                      f"took {CIFAR_WITHOUT} min instead of {CIFAR_WITH} on a K20c; a plain MLP "
                      "loses nothing, having no convolutions"})
    v = _CUDNN_VERSION.search(inner)
    if v:
        number = int(v["v"])
        parts.append({"part": v.group(0), "meaning": f"Theano uses cuDNN {_version_text(number)} "
                      f"(CUDNN_VERSION {number}): convolutions go through cuDNN"})
    if "Mixed dnn version" in text:
        parts.append({"part": "Mixed dnn version", "meaning": "the cudnn.h Theano compiled "
                      "against and the libcudnn it loaded are different versions; reinstall one "
                      "cuDNN (`cudnn-setup install`) and remove or shadow the other"})
    if not parts:
        parts.append({"part": text, "meaning": "not a Theano startup line this tool knows"})
    return parts


def diagnose(env: Mapping[str, str], home: Path, explicit: Path | None = None,
             message: str | None = None, conf: Path = Path("/etc/ld.so.conf")) -> Diagnosis:
    d = Diagnosis()
    d.system = {"os": distro.name(pretty=True) or "unknown", "machine": os.uname().machine}
    d.cuda_roots = all_cuda_roots(env, explicit)
    usable = [r for r in d.cuda_roots if r["usable"]]
    if not usable:
        d.findings.append(Finding("fail", "no CUDA toolkit found",
                                  "install the CUDA toolkit or pass --cuda-root"))
    d.cudnn_copies = machine_cudnn(d.cuda_roots, conf)
    majors = sorted({c["version"].split(".")[0] for c in d.cudnn_copies if c.get("version")})
    for major in majors:
        name = f"libcudnn.so.{major}"
        chain = cudnn_copies(name, env, conf)
        d.loads.append({"name": name, "would_load": chain[0] if chain else None, "candidates": chain})
    if len({c["version"] for c in d.cudnn_copies if c.get("version")}) > 1:
        listing = "; ".join(f"{c['path']} ({c['version']}, {c['via']})" for c in d.cudnn_copies)
        d.findings.append(Finding("warn", f"several cuDNN versions on this machine: {listing}",
                                  "make sure each program loads the one its headers match "
                                  "(`cudnn-setup verify` checks the loader)"))
    if usable:
        inst = find_installation(CudaRoot(Path(usable[0]["path"]), usable[0]["found_via"],
                                          usable[0].get("version"), None))
        from cudnn_setup.verify import verify

        for check in verify(inst.root, theano=False, env=env, conf=conf):
            if check.status in (FAIL, WARN) and check.name != "theano":
                d.findings.append(Finding(check.status, f"{check.name}: {check.detail}",
                                          (check.data or {}).get("hint", "")))
    d.theano_config = theano_config(env, home)
    eff = d.theano_config["effective"]
    including = eff.get("global.optimizer_including", {}).get("value", "")
    if "cudnn" not in including.split(":"):
        d.findings.append(Finding("info", "Theano's optimizer_including lacks cudnn: Theano falls "
                                  "back silently when cuDNN cannot be used",
                                  "run `cudnn-setup theanorc`"))
    if eff.get("global.device", {}).get("value", "cpu").startswith("cpu"):
        d.findings.append(Finding("info", "Theano's device is cpu: cuDNN is never used",
                                  "set [global] device=cuda (needs a GPU and pygpu)"))
    if message:
        d.explanation = explain(message)
        for part in d.explanation:
            cc = part.get("compute_capability")
            if cc and gpus.cc_tuple(cc) < gpus.cc_tuple(gpus.THEANO_MIN_CC):
                d.findings.append(Finding("fail", f"{part['part']} (compute capability {cc}) "
                                          "cannot run cuDNN", "use a GPU of compute capability "
                                          f"{gpus.THEANO_MIN_CC} or newer for cuDNN"))
    return d


def findings_as_checks(d: Diagnosis) -> list[Check]:
    usable = list({r["real"]: r for r in reversed(d.cuda_roots) if r["usable"]}.values())[::-1]
    checks = [Check("cuda-roots", PASS if usable else FAIL,
                    "; ".join(f"{r['path']} (CUDA {r.get('version') or '?'}, via {r['found_via']})"
                              for r in usable) or "none")]
    copies = "; ".join(f"{c['path']} ({c.get('version') or '?'}, {c['via']})" for c in d.cudnn_copies)
    checks.append(Check("cudnn-copies", PASS if d.cudnn_copies else WARN, copies or "none found"))
    for load in d.loads:
        first = load["would_load"]
        checks.append(Check(f"loads-{load['name']}", PASS if first else WARN,
                            f"{first['path']} (via {first['via']})" if first else "not found"))
    eff = d.theano_config.get("effective", {})
    shown = ", ".join(f"{k}={v['value']} ({v['from']})" for k, v in eff.items()) or "defaults"
    checks.append(Check("theano-config", PASS, f"read {', '.join(d.theano_config['read']) or 'no file'}; "
                        f"{shown}"))
    return checks
