"""What verification looks at: the cuDNN found in a CUDA root, from the manifest or the files."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from cudnn_setup import generations as gen
from cudnn_setup.cuda import CudaRoot
from cudnn_setup.package import header_version
from cudnn_setup.state import StateDir

_LIB = re.compile(r"^(?P<stem>libcudnn[a-z_]*)\.so\.(?P<ver>\d+(?:\.\d+)+)$")


@dataclass
class Installation:
    root: CudaRoot
    lib_dir: Path
    manifest: dict | None
    header_version: str | None = None
    header_file: Path | None = None
    libraries: list[Path] = field(default_factory=list)  # regular files libcudnn*.so.X.Y.Z

    @property
    def include_dir(self) -> Path:
        return self.root.path / "include"

    @property
    def version(self) -> str | None:
        if self.manifest:
            return self.manifest.get("cudnn_version")
        return self.header_version

    @property
    def major(self) -> int | None:
        return int(self.version.split(".")[0]) if self.version else None

    @property
    def generation(self) -> str | None:
        if self.manifest:
            return self.manifest.get("generation")
        if self.major is None:
            return None
        minor, patch = (int(x) for x in self.version.split(".")[1:3])
        return gen.generation_for(self.major, "archive", minor, patch)

    def library(self, stem: str) -> Path | None:
        return next((p for p in self.libraries if _LIB.match(p.name)["stem"] == stem), None)

    def soname_path(self) -> Path | None:
        """The name programs load (libcudnn.so.7, libcudnn.so.7.0 for v3…)."""
        main = self.library("libcudnn")
        if main is None:
            return None
        parts = _LIB.match(main.name)["ver"].split(".")
        keep = 2 if self.generation and gen.version_follows_cuda(self.generation) else 1
        candidate = self.lib_dir / f"libcudnn.so.{'.'.join(parts[:keep])}"
        return candidate if os.path.lexists(candidate) else main


def find_installation(root: CudaRoot) -> Installation:
    manifest = StateDir(root.path).manifest()
    lib_dir = root.path / manifest["lib_dir"] if manifest else root.lib_dir()
    inst = Installation(root=root, lib_dir=lib_dir, manifest=manifest)
    for name in ("cudnn_version.h", "cudnn.h"):
        header = inst.include_dir / name
        if header.is_file():
            version = header_version(header.read_text(errors="replace"))
            if version:
                inst.header_version, inst.header_file = "%d.%d.%d" % version, header
                break
            if name == "cudnn.h":
                inst.header_version, inst.header_file = "1.0.0", header  # R1: no macros
    if lib_dir.is_dir():
        inst.libraries = sorted(p for p in lib_dir.iterdir()
                                if _LIB.match(p.name) and p.is_file() and not p.is_symlink())
    return inst


def library_version(path: Path) -> str | None:
    m = _LIB.match(path.name)
    return m["ver"] if m else None


@dataclass
class ProbeResult:
    data: dict | None
    returncode: int | None
    stderr: str
    timed_out: bool = False

    @property
    def crashed(self) -> str | None:
        """The signal's name when the child died of one (SIGABRT from a broken cuDNN…)."""
        if self.returncode is not None and self.returncode < 0:
            try:
                return signal.Signals(-self.returncode).name
            except ValueError:
                return f"signal {-self.returncode}"
        return None

    def last_error_line(self) -> str:
        lines = [line for line in self.stderr.splitlines() if line.strip()]
        return lines[-1].strip() if lines else ""


def run_probe(args: list[str], timeout: float, env: Mapping[str, str] | None = None,
              python: str | None = None) -> ProbeResult:
    """Run a probe module in a child interpreter; native crashes stay in the child."""
    cmd = [python or sys.executable, *args]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env=dict(env) if env is not None else None)
    except subprocess.TimeoutExpired as exc:
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        return ProbeResult(None, None, err, timed_out=True)
    except OSError as exc:
        return ProbeResult(None, None, str(exc))
    data = None
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("{"):
            try:
                data = json.loads(line)
                break
            except ValueError:
                pass
    return ProbeResult(data, done.returncode, done.stderr)


def probe_module(name: str) -> list[str]:
    """Arguments running a probe by file path, so any interpreter can run it."""
    return [str(Path(__file__).resolve().parent.parent / "probes" / f"{name}.py")]


def child_env(lib_dir: Path, base: Mapping[str, str]) -> dict[str, str]:
    env = dict(base)
    old = env.get("LD_LIBRARY_PATH")
    env["LD_LIBRARY_PATH"] = f"{lib_dir}:{old}" if old else str(lib_dir)
    return env
