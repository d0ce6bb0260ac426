"""NVIDIA's public cuDNN tree: platforms, CUDA variants, archive names, public and mirror URLs.
Pure functions: no network, no output.

Every naming rule here is the one Spack's cudnn package applies in `url_for_version` to rebuild
the public URL of each archive NVIDIA published (the file the known-releases table is made from):
https://github.com/spack/spack-packages/blob/f3ec6a4a4e83fc766e55a801987792ae390130fd/repos/spack_repo/builtin/packages/cudnn/package.py
From 8.8.0 on the same names sit in NVIDIA's redist tree, next to one `redistrib_<label>.json`
per release: https://developer.download.nvidia.com/compute/cudnn/redist/
"""
from __future__ import annotations

import re
import urllib.parse
from pathlib import Path
from typing import Iterable

from msgspec import Struct
from packaging.version import Version

from cudnn_setup.errors import ArchiveRejected, DownloadFailed, UsageError
from cudnn_setup.urls import BadUrl, check, redact

NVIDIA_COMPUTE = "https://developer.download.nvidia.com/compute/"
NVIDIA_REDIST = NVIDIA_COMPUTE + "cudnn/redist/"  # the level a mirror copies

# Where url_for_version changes layout (Spack's thresholds; the update script checks that
# Spack's file still uses exactly these, so a new layout cannot slip in unnoticed).
_V7_0, _V7_1, _V7_2 = Version("7.0"), Version("7.1"), Version("7.2")
XZ_ARCHIVES = Version("8.3.1")  # .tar.xz, platform before version, `local_installers/<cuda>/`
MAJOR_ONLY_CUDA = Version("8.5.0")  # `_cuda11` instead of `_cuda11.7` in the name
NEW_TREE = Version("8.8.0")  # compute/cudnn/redist/cudnn/<platform>/ instead of compute/redist/
LAYOUT_CHANGES = (_V7_0, _V7_1, _V7_2, XZ_ARCHIVES, MAJOR_ONLY_CUDA, NEW_TREE)

# NVIDIA's platform keys (the directories of its redist tree and the keys of redistrib JSON).
# linux-aarch64 holds Jetson (Tegra) builds; server Arm (Grace, Graviton) is linux-sbsa.
# Windows builds are listed (`list --platform windows-x86_64`, a mirror for Windows machines);
# only Linux ones are installed.
LINUX_PLATFORMS = ("linux-x86_64", "linux-sbsa", "linux-ppc64le", "linux-aarch64")
PLATFORMS = LINUX_PLATFORMS + ("windows-x86_64", "windows-arm64")
# The components of a release that are archives of cuDNN itself: the library, and from 9.10 the
# graph JIT library (`cudnn_jit`), a separate archive with its own name, checksum and directory.
# `cudnn_samples` is source code, not a build: never read.
FLAVOURS = ("cudnn", "cudnn_jit")
_MACHINES = {"x86_64": "linux-x86_64", "amd64": "linux-x86_64", "x64": "linux-x86_64",
             "aarch64": "linux-sbsa", "arm64": "linux-sbsa", "sbsa": "linux-sbsa",
             "aarch64sbsa": "linux-sbsa", "ppc64le": "linux-ppc64le"}
# Before 8.3.1 names spell the platform `x64` / `aarch64sbsa` / `ppc64le` (Spack's sys_key).
_OLD_ARCH = {"linux-x86_64": "x64", "linux-sbsa": "aarch64sbsa", "linux-ppc64le": "ppc64le"}

_VARIANT = re.compile(r"^(?:cuda)?(\d{1,2})(?:\.(\d{1,2}))?\Z")
_CUDA = re.compile(r"^\d{1,2}(\.\d{1,2}){0,2}\Z")
HEX64 = re.compile(r"^[0-9a-f]{64}\Z")
HEX32 = re.compile(r"^[0-9a-f]{32}\Z")


class NoVariant(ArchiveRejected):
    """The version exists, but not for this platform or CUDA major (exit 3)."""

    default_code = "no-cuda-variant"


class ManifestDamaged(DownloadFailed):
    """A redistrib JSON that is not what NVIDIA publishes (exit 6, like any bad download:
    nothing was installed, and another try or another mirror is the remedy)."""

    default_code = "manifest-damaged"


# --- platforms ----------------------------------------------------------------------------------

def platform_key(machine: str) -> str:
    """NVIDIA's platform key for `platform.machine()` (or a spelling from an archive name).

    aarch64 means server Arm (`linux-sbsa`, `aarch64sbsa` in names before 8.3.1); a Jetson's
    builds are platform_choice's to pick.
    """
    key = machine.strip().lower()
    if key in PLATFORMS:  # already NVIDIA's key
        return key
    key = key[len("linux-"):] if key.startswith("linux-") else key
    platform = _MACHINES.get(key)
    if platform is None:
        raise NoVariant(f"NVIDIA publishes no Linux cuDNN archive for machine {machine[:40]!r}",
                        "archives exist for x86_64, aarch64 (sbsa) and ppc64le")
    return platform


class PlatformChoice(Struct, frozen=True):
    """The platforms whose builds may go on this machine, best first, and why.

    A Jetson takes NVIDIA's linux-aarch64 (Jetson) build of a release where one exists and the
    linux-sbsa build otherwise: NVIDIA stopped publishing linux-aarch64 builds for CUDA 12 after
    9.20.0 and for CUDA 13 after 9.14.0, and Jetson Orin runs the sbsa build from CUDA 13.2 on
    (nixpkgs' cuDNN manifests README records both:
    https://github.com/NixOS/nixpkgs/blob/28ae377aa9addfe866d91279d4f78d34a2dd974e/pkgs/development/cuda-modules/_cuda/manifests/cudnn/README.md).
    """

    platforms: tuple[str, ...]
    why: str

    @property
    def primary(self) -> str:
        return self.platforms[0]

    def rank(self, platform: str) -> int | None:
        """Preference of `platform` (0 best), None when its builds do not go here."""
        return self.platforms.index(platform) if platform in self.platforms else None


def platform_choice(machine: str, tegra: str | None = None,
                    given: str | None = None) -> PlatformChoice:
    """The builds for this machine: `given` (a platform named on the command line) alone, else
    the machine's platform; on an aarch64 Jetson (`tegra` says what showed it) linux-aarch64
    before linux-sbsa."""
    if given is not None:
        key = given.strip().lower()
        if key not in PLATFORMS:
            raise UsageError(f"unknown platform {given[:40]!r}",
                             f"NVIDIA's platforms: {', '.join(PLATFORMS)}")
        return PlatformChoice((key,), "--platform")
    platform = platform_key(machine)
    if tegra and platform == "linux-sbsa":
        return PlatformChoice(("linux-aarch64", "linux-sbsa"),
                              f"Jetson ({tegra}): the linux-aarch64 build where NVIDIA published "
                              "one, else linux-sbsa")
    return PlatformChoice((platform,), f"machine {machine[:40]}")


# --- CUDA variants ------------------------------------------------------------------------------

def parse_variant(variant: str) -> tuple[int, int | None]:
    """(major, minor) of `cuda12`, `cuda11.5`, `cuda10.2`, or of a manifest's `12`."""
    m = _VARIANT.match(variant)
    if not m:
        raise ValueError(f"not a CUDA variant: {variant!r}")
    return int(m[1]), None if m[2] is None else int(m[2])


def parse_cuda(cuda_version: str) -> tuple[int, int | None]:
    """(major, minor) of a CUDA root's version (`12.4`, `12.4.1`) or of `--cuda 12`."""
    if not _CUDA.match(cuda_version.strip()):
        raise UsageError(f"not a CUDA version: {cuda_version[:40]!r}", "give e.g. 12 or 12.4")
    parts = Version(cuda_version).release
    return parts[0], parts[1] if len(parts) > 1 else None


def variant_name(version: str, cuda: str) -> str:
    """The variant NVIDIA gives the build of cuDNN `version` for CUDA `cuda` (Spack's key, or
    a manifest's variant without its `cuda` prefix).

    From 8.5.0 names carry the CUDA major only (`cuda11`: one build for every 11.x); before, the
    CUDA version the build was made with (`cuda11.5`; `cudnn-10.2-…` before 8.3.1). In the
    tree of 8.8.0 on, a CUDA minor given is the manifest's own (9.27.0 lists a windows-arm64
    build `cuda13.4` next to its `cuda13`): kept as given; Spack gives only majors there.
    """
    if not _CUDA.match(cuda):
        raise ValueError(f"not a CUDA version: {cuda!r}")
    parts = Version(cuda).release
    if Version(version) >= NEW_TREE:
        return f"cuda{_join(parts[:2])}"
    if Version(version) >= MAJOR_ONLY_CUDA:
        return f"cuda{parts[0]}"
    if len(parts) < 2:
        raise ValueError(f"cuDNN {version} builds name a CUDA minor, got {cuda!r}")
    return f"cuda{parts[0]}.{parts[1]}"


def variant_key(variant: str) -> tuple[int, int]:
    """Sort key: by CUDA major, a major-only build before the builds for one minor."""
    major, minor = parse_variant(variant)
    return major, -1 if minor is None else minor


def variant_fits(variant: str, cuda_version: str) -> bool:
    """Whether a build for `variant` runs on a CUDA root of `cuda_version`.

    The major must match. From CUDA 11 on one build serves every minor of its major ("cuDNN
    builds for CUDA 11.x are compatible with all CUDA 11.x", the support matrix Spack's cudnn
    package cites: https://docs.nvidia.com/deeplearning/cudnn/support-matrix/index.html);
    before 11 NVIDIA shipped one build per CUDA minor (cudnn-10.1-…, cudnn-10.2-…, as Spack pins
    them), so the minor must match too, when it is known.
    """
    v_major, v_minor = parse_variant(variant)
    c_major, c_minor = parse_cuda(cuda_version)
    if v_major != c_major:
        return False
    return v_minor is None or c_minor is None or v_major >= 11 or v_minor == c_minor


def variant_rank(variant: str, cuda_version: str) -> tuple[int, int]:
    """Sort key of the variants that fit a root of `cuda_version`, best first: the root's
    exact minor, else a major-only build, else the newest build for a lower minor, else the
    oldest for a higher one."""
    _, c_minor = parse_cuda(cuda_version)
    _, v_minor = parse_variant(variant)
    if v_minor is None:
        return (1, 0)
    if c_minor is None:
        return (2, -v_minor)
    if v_minor == c_minor:
        return (0, 0)
    return (2, -v_minor) if v_minor < c_minor else (3, v_minor)


def pick_variant(variants: Iterable[str], cuda_version: str) -> str | None:
    """The best fitting variant (variant_rank's first), or None when none fits."""
    fitting = sorted((v for v in set(variants) if variant_fits(v, cuda_version)),
                     key=lambda v: variant_rank(v, cuda_version))
    return fitting[0] if fitting else None


# --- names, paths, URLs -------------------------------------------------------------------------

def _join(parts: tuple[int, ...]) -> str:
    return ".".join(map(str, parts))


def _parts(version: str, need: int) -> tuple[int, ...]:
    parts = Version(version).release
    if len(parts) < need:
        raise ValueError(f"cuDNN {version}: its archive name needs {need} version parts")
    return parts


def archive_name(version: str, platform: str, cuda: str, flavour: str = "cudnn") -> str:
    """NVIDIA's file name for the build of cuDNN `version` for `platform` and CUDA `cuda`.

    8.3.1 on: <flavour>-<platform>-<X.Y.Z.B>_<variant>-archive.tar.xz (.zip for Windows).
    Before: cudnn-<cuda>-linux-<x64|aarch64sbsa|ppc64le>-v<ver>.tgz, where <ver> is X.Y.Z.B
    from 7.2, X.Y for 7.1 and below 7.0, X for 7.0 (Spack's url_for_version).
    """
    v = Version(version)
    if platform not in PLATFORMS:
        raise ValueError(f"unknown platform {platform!r}")
    if flavour not in FLAVOURS:
        raise ValueError(f"unknown flavour {flavour!r}")
    if v >= XZ_ARCHIVES:
        ext = "zip" if platform.startswith("windows-") else "tar.xz"
        return (f"{flavour}-{platform}-{_join(_parts(version, 4)[:4])}_"
                f"{variant_name(version, cuda)}-archive.{ext}")
    if flavour != "cudnn":
        raise ValueError(f"cuDNN {version} has no {flavour} archive")
    if platform not in _OLD_ARCH:
        raise ValueError(f"cuDNN {version} was not published for {platform}")
    if not re.fullmatch(r"\d{1,2}\.\d{1,2}", cuda):
        raise ValueError(f"cuDNN {version} archive names carry CUDA X.Y, got {cuda!r}")
    if v >= _V7_2:
        ver = _parts(version, 4)[:4]
    elif v >= _V7_1:
        ver = _parts(version, 2)[:2]
    elif v >= _V7_0:
        ver = _parts(version, 1)[:1]
    else:
        ver = _parts(version, 2)[:2]
    return f"cudnn-{cuda}-linux-{_OLD_ARCH[platform]}-v{_join(ver)}.tgz"


def public_path(version: str, platform: str, cuda: str, flavour: str = "cudnn") -> str:
    """Where NVIDIA publishes that archive, relative to https://developer.download.nvidia.com/compute/.

    8.8.0 on: cudnn/redist/<flavour>/<platform>/<name>. 8.3.1 to 8.7.x:
    redist/cudnn/v<X.Y.Z>/local_installers/<cuda>/<name> (the directory keeps the CUDA minor
    even after the name dropped it at 8.5.0; NVIDIA's redist tree holds 8.5 to 8.7 too, at
    tree_path). Before: redist/cudnn/v<X.Y.Z>/<name> from 7.0, redist/cudnn/v<X.Y>/<name>
    earlier.
    """
    v = Version(version)
    name = archive_name(version, platform, cuda, flavour)
    if v >= NEW_TREE:
        return tree_path(platform, name, flavour)
    if v >= XZ_ARCHIVES:
        return f"redist/cudnn/v{_join(_parts(version, 3)[:3])}/local_installers/{cuda}/{name}"
    directory = _parts(version, 3)[:3] if v >= _V7_0 else _parts(version, 2)[:2]
    return f"redist/cudnn/v{_join(directory)}/{name}"


def mirror_path(platform: str, file_name: str, flavour: str = "cudnn") -> str:
    """Where an archive sits below a mirror's `redist/` level, as in NVIDIA's tree from 8.8.0
    (a mirror keeps older archives the same way, whatever their public directory); a
    manifest's `relative_path`."""
    return f"{flavour}/{platform}/{file_name}"


def tree_path(platform: str, file_name: str, flavour: str = "cudnn") -> str:
    """The archive's place in NVIDIA's redist tree, relative to NVIDIA_COMPUTE."""
    return "cudnn/redist/" + mirror_path(platform, file_name, flavour)


def manifest_label(version: str) -> str:
    """The label of the redistrib JSON that lists `version`: X.Y.Z (redistrib_9.13.0.json
    lists 9.13.0.50)."""
    return _join((_parts(version, 1) + (0, 0))[:3])


def normalize_mirror(text: str, cwd: Path | None = None) -> str:
    """A mirror given as an http(s)/file URL or a local directory, as a URL ending in `/`.

    The URL names the level that holds `redistrib_<label>.json` and `cudnn/<platform>/`, like
    https://developer.download.nvidia.com/compute/cudnn/redist/. Anything else is a usage
    error that shows the URL without its credentials.
    """
    text = text.strip()
    if "://" not in text and not re.match(r"^[A-Za-z][A-Za-z0-9+.-]{0,31}:[^\\/]", text):
        path = Path(text)
        if not path.is_absolute():
            if cwd is None:
                raise UsageError(f"mirror {redact(text)} is a relative path",
                                 "give an absolute path or a URL")
            path = cwd / path
        text = path.as_uri()
    try:
        parts = check(text, ("http", "https", "file"))
    except BadUrl as exc:
        raise UsageError(f"mirror {redact(text)} cannot be used: {exc}", MIRROR_HINT) from None
    if parts.query or parts.fragment:
        raise UsageError(f"mirror {redact(text)} has a query or fragment",
                         "give the URL of the directory that holds redistrib_*.json (a token "
                         "goes in ~/.netrc or --header, never in the URL)")
    if parts.scheme == "file" and parts.netloc not in ("", "localhost"):
        raise UsageError(f"file URL {redact(text)} names a remote host", "use file:///path")
    return text if text.endswith("/") else text + "/"


MIRROR_HINT = ("give an http(s):// or file:// URL, or a directory, of the level that holds "
               "redistrib_*.json, e.g. https://mirror.lan/cudnn/redist/")


def safe_relative(path: str) -> str:
    """`path` if it is plain `a/b/c`: no absolute path, `..`, empty or `.` part, backslash,
    percent escape or control character that could lead a URL or a file name elsewhere."""
    segments = path.split("/")
    if (not path or path.startswith("/") or "\\" in path or "%" in path
            or any(ord(c) < 32 or c == "\x7f" for c in path)
            or any(s in ("", ".", "..") for s in segments)):
        raise ValueError(f"not a plain relative path: '{redact(path[:120])}'")
    return path


def mirror_url(mirror: str, relative_path: str) -> str:
    """URL of a file below a mirror (see normalize_mirror); the path may not climb out of it."""
    return normalize_mirror(mirror) + urllib.parse.quote(safe_relative(relative_path))


def manifest_url(label: str, mirror: str = NVIDIA_REDIST) -> str:
    """`<mirror>/redistrib_<label>.json`, NVIDIA's tree by default."""
    if not re.fullmatch(r"\d{1,4}\.\d{1,4}\.\d{1,6}", label):
        raise ValueError(f"not a redistrib label: {label!r}")
    return mirror_url(mirror, f"redistrib_{label}.json")


def local_path(url: str) -> Path | None:
    """The file a `file://` URL names (None for other schemes); `file://host/…` is refused."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "file":
        return None
    if parts.netloc not in ("", "localhost"):
        raise UsageError(f"file URL {redact(url)} names a remote host", "use file:///path")
    from urllib.request import url2pathname  # loads http.client and ssl: for file:// only

    return Path(url2pathname(parts.path))


# Linear: the literal name is found first, then its href is looked for in the few characters
# before it (a pattern that starts at every `href=` and scans ahead backtracks on a page of
# repeated `href=`: 1 MB took minutes).
_MANIFEST_IN_PAGE = re.compile(r"redistrib_(\d{1,4}\.\d{1,4}\.\d{1,6})\.json(?=[\"'>\s])")
_LOOK_BACK = 320  # a href value longer than this is not a directory listing's


def listed_labels(index_html: str) -> list[str]:
    """Labels of the redistrib JSON files a directory index page links to, newest first
    (NVIDIA's tree and common web servers list the redist/ directory)."""
    page = index_html[:4 << 20]
    labels = set()
    for m in _MANIFEST_IN_PAGE.finditer(page):
        before = page[max(0, m.start() - _LOOK_BACK):m.start()]
        at = before.rfind("href=")
        if at < 0:
            continue
        value = before[at + 5:]
        if value[:1] in ("'", '"'):
            value = value[1:]
        # the name is the whole value or its last path part, as in href="…/redistrib_X.json"
        if any(c in value for c in "\"'> \t\r\n") or (value and not value.endswith("/")):
            continue
        labels.add(m.group(1))
    return sorted(labels, key=Version, reverse=True)
