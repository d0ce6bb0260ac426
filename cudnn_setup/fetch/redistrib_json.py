"""NVIDIA's `redistrib_<label>.json`, the manifest published next to each cuDNN release, read
into release candidates once every field has been checked.

Schema: NVIDIA's redistrib v2 (https://developer.download.nvidia.com/compute/redist/redistrib-v2.schema.json),
shown in the CUDA installation guide, "Tarball and Zip Archive Deliverables"
(https://docs.nvidia.com/cuda/cuda-installation-guide-linux/#tarball-and-zip-archive-deliverables),
and read by NVIDIA's sample parser
(https://github.com/NVIDIA/build-system-archive-import-examples/blob/main/parse_redist.py).
For cuDNN (e.g. https://developer.download.nvidia.com/compute/cudnn/redist/redistrib_9.13.0.json):

    {"release_date": "2025-09-04", "release_label": "9.13.0", "release_product": "cudnn",
     "cudnn": {"name": …, "license": …, "license_path": …, "version": "9.13.0.50",
               "cuda_variant": ["12", "13"],
               "linux-x86_64": {"cuda12": {"relative_path": "cudnn/linux-x86_64/cudnn-linux-…",
                                           "sha256": …, "md5": …, "size": "873944756"}, …}, …},
     "cudnn_jit": {…}, "cudnn_samples": {…}}

`relative_path` is relative to the manifest's directory (parse_redist.py joins it to the
manifest URL's dirname); a platform maps to variants, straight to one archive (8.x's
manifests), or both at once (see _platform_entries). The `cudnn` component and, from 9.10, the
graph JIT library's `cudnn_jit` are read (each archive a Release of its flavour);
`cudnn_samples` (source code) is not.
"""
from __future__ import annotations

import json
import re

from cudnn_setup.fetch import redist
from cudnn_setup.fetch.candidates import Release
from cudnn_setup.fetch.redist import ManifestDamaged
from cudnn_setup.urls import redact

MAX_BYTES = 1 << 20  # NVIDIA's are about 6 KB
MAX_ARCHIVE = 16 << 30  # 9.x archives are under 1 GiB
MAX_ENTRIES = 64
_METADATA = ("name", "license", "license_path", "version")
ARTIFACT_KEYS = ("relative_path", "sha256", "md5", "size", "repacked_from")
_LABEL = re.compile(r"^\d{1,4}\.\d{1,4}\.\d{1,6}\Z")
_FULL_VERSION = re.compile(r"^\d{1,4}\.\d{1,4}\.\d{1,6}\.\d{1,8}\Z")
_PLATFORM = re.compile(r"^[a-z][a-z0-9]{0,15}-[a-z0-9_]{1,16}\Z")
_VARIANT_KEY = re.compile(r"^cuda\d{1,2}(\.\d{1,2})?\Z")


def _no_duplicate_keys(pairs: list) -> dict:
    """The object, unless a key repeats (JSON parsers disagree on which one wins). Linear: a
    set of the keys seen, not a count of each (a 468 KB object took minutes that way)."""
    seen: set = set()
    for key, _ in pairs:
        if key in seen:
            raise ValueError(f"duplicate key {key[:60]!r}")
        seen.add(key)
    return dict(pairs)


def _no_constants(name: str):
    raise ValueError(f"{name} is not JSON")


def parse_redistrib(data: bytes, url: str, label: str | None = None) -> list[Release]:
    """Every cuDNN archive a manifest lists (all platforms, both flavours), or ManifestDamaged.

    `url` is where the manifest was read (it names the source of each release); `label`, when
    given, is the X.Y.Z the file name promised, and the manifest must say the same.
    """
    where = redact(url)
    name = where.split("?", 1)[0].split("#", 1)[0].rsplit("/", 1)[-1] or where

    def damaged(why: str) -> ManifestDamaged:
        return ManifestDamaged(f"{name} from {where}: {why}",
                               "the manifest is damaged or not NVIDIA's; nothing was installed")

    if len(data) > MAX_BYTES:
        raise damaged(f"{len(data)} bytes, more than a manifest holds ({MAX_BYTES})")
    try:
        doc = json.loads(data.decode("utf-8"), object_pairs_hook=_no_duplicate_keys,
                         parse_constant=_no_constants)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise damaged(f"not valid JSON ({str(exc)[:120]})") from None
    if not isinstance(doc, dict):
        raise damaged("not a JSON object")
    if doc.get("release_product", "cudnn") != "cudnn":
        raise damaged(f"release_product is {doc['release_product']!r:.40}, not cudnn")
    component = doc.get("cudnn")
    if not isinstance(component, dict):
        raise damaged("no `cudnn` component")
    version = component.get("version")
    if not isinstance(version, str) or not _FULL_VERSION.match(version):
        raise damaged(f"cudnn version {version!r:.40} is not X.Y.Z.B")
    # NVIDIA's manifests before 9.x's tree (redistrib_8.5.0.96.json) carry no release_label:
    # the release is then the one the version names.
    release_label = doc.get("release_label", redist.manifest_label(version))
    if not isinstance(release_label, str) or not _LABEL.match(release_label):
        raise damaged(f"release_label {release_label!r:.40} is not X.Y.Z")
    if label is not None and release_label != label:
        raise damaged(f"release_label {release_label} where {label} was asked for")
    if redist.manifest_label(version) != release_label:
        raise damaged(f"cudnn {version} in the manifest of release {release_label}")

    source = f"{name} at {where}"
    out: list[Release] = []
    for flavour in redist.FLAVOURS:
        part = doc.get(flavour)
        if part is None and flavour != "cudnn":
            continue
        if not isinstance(part, dict):
            raise damaged(f"`{flavour}` is not an object")
        if part.get("version") != version:
            raise damaged(f"{flavour} version {part.get('version')!r:.40} is not the release's "
                          f"{version}")
        out += _component(part, flavour, version, source, damaged)
        if len(out) > MAX_ENTRIES:
            raise damaged(f"more than {MAX_ENTRIES} archives")
    names = [r.file_name for r in out]
    if len(set(names)) != len(names):
        raise damaged(f"{next(n for n in names if names.count(n) > 1)!r:.120} is listed twice")
    if not any(r.flavour == "cudnn" for r in out):
        raise damaged("lists no cudnn archive")
    return out


def _component(component: dict, flavour: str, version: str, source: str,
               damaged) -> list[Release]:
    """The archives of one component (`cudnn`, `cudnn_jit`)."""
    _check_variant_list(component.get("cuda_variant", []), damaged)
    out: list[Release] = []
    for key, value in component.items():
        if key == "cuda_variant":
            continue
        if key in _METADATA:
            if not isinstance(value, str):
                raise damaged(f"{flavour}.{key} is not a string")
            continue
        if not isinstance(key, str) or not _PLATFORM.match(key):
            raise damaged(f"unexpected key {flavour}.{key!r:.40}")
        if not isinstance(value, dict) or not value:
            raise damaged(f"{flavour}.{key} is not an object of archives")
        for variant, artifact in _platform_entries(value, f"{flavour}.{key}", damaged):
            out.append(_artifact(version, flavour, key, variant, artifact, source, damaged))
            if len(out) > MAX_ENTRIES:
                raise damaged(f"more than {MAX_ENTRIES} archives")
    return out


def _platform_entries(value: dict, where: str, damaged) -> list[tuple[str | None, dict]]:
    """A platform object's archives as (variant key or None, artifact).

    NVIDIA writes a platform either as one archive (`{"relative_path": …, "sha256": …}`, as in
    8.x's manifests) or as one archive per CUDA variant (`{"cuda12": {…}, "cuda13": {…}}`),
    and newer manifests mix the two in one object (9.27.0's windows-arm64: a `cuda13` variant
    and, beside it, a direct archive built for CUDA 13.4). Every archive is kept: the direct
    one's variant comes from its file name."""
    direct = {k: v for k, v in value.items() if k in ARTIFACT_KEYS}
    entries: list[tuple[str | None, dict]] = [(None, direct)] if direct else []
    for key, artifact in value.items():
        if key in ARTIFACT_KEYS:
            continue
        if not isinstance(key, str) or not _VARIANT_KEY.match(key):
            raise damaged(f"{where}: {key!r:.40} is not a CUDA variant")
        entries.append((key, artifact))
    return entries


def _check_variant_list(value, damaged) -> None:
    if not isinstance(value, list) or not all(
            isinstance(v, str) and re.fullmatch(r"\d{1,2}(\.\d{1,2})?", v) for v in value):
        raise damaged(f"cuda_variant {value!r:.60} is not a list of CUDA versions")


def _artifact(version: str, flavour: str, platform: str, variant: str | None, artifact,
              source: str, damaged) -> Release:
    where = f"{flavour}.{platform}" + (f".{variant}" if variant else "")
    if not isinstance(artifact, dict):
        raise damaged(f"{where} is not an object")
    unknown = set(artifact) - set(ARTIFACT_KEYS)
    if unknown:
        raise damaged(f"{where}: unexpected key {sorted(unknown)[0]!r:.40}")
    rel = artifact.get("relative_path")
    if not isinstance(rel, str) or len(rel) > 300:
        raise damaged(f"{where}.relative_path is missing or too long")
    try:
        redist.safe_relative(rel)
    except ValueError as exc:
        raise damaged(f"{where}.relative_path: {exc}") from None
    file_name = rel.rsplit("/", 1)[-1]
    repacked = _repacked_from(artifact.get("repacked_from"), where, damaged)
    # NVIDIA's name; an archive repacked from a wheel (cudnn-setup mirror) says so in its own
    ext = r"\.zip" if platform.startswith("windows-") else r"\.tar\.xz"
    suffix = r"-repack\.tar\.gz" if repacked else rf"-archive{ext}"
    m = re.fullmatch(rf"{flavour}-{re.escape(platform)}-{re.escape(version)}_"
                     r"(cuda\d{1,2}(?:\.\d{1,2})?)" + suffix, file_name)
    if not m or (variant is not None and m[1] != variant):
        raise damaged(f"{where}: {file_name!r:.120} is not NVIDIA's name for {flavour} {version} "
                      f"{platform} {variant or ''}".rstrip())
    if rel != redist.mirror_path(platform, file_name, flavour):
        raise damaged(f"{where}: {rel!r:.120} is not in {flavour}/{platform}/")
    sha256 = artifact.get("sha256")
    if not isinstance(sha256, str) or not redist.HEX64.match(sha256.lower()):
        raise damaged(f"{where}.sha256 is not 64 hex digits")
    md5 = artifact.get("md5")
    if md5 is not None and (not isinstance(md5, str) or not redist.HEX32.match(md5.lower())):
        raise damaged(f"{where}.md5 is not 32 hex digits")
    size = artifact.get("size")
    if isinstance(size, str) and re.fullmatch(r"\d{1,12}", size):
        size = int(size)  # NVIDIA writes sizes as strings
    if not isinstance(size, int) or isinstance(size, bool) or not 0 < size <= MAX_ARCHIVE:
        raise damaged(f"{where}.size {artifact.get('size')!r:.40} is not a byte count up to "
                      f"{MAX_ARCHIVE}")
    return Release(version=version, cuda_variant=m[1], platform=platform, file_name=file_name,
                   relative_path=rel, sha256=sha256.lower(), md5=md5.lower() if md5 else None,
                   size=size, source=source, repacked_from=repacked, flavour=flavour)


_WHEEL = re.compile(r"^nvidia_cudnn_cu\d{1,2}-[0-9A-Za-z.+!_]{1,60}-[A-Za-z0-9._-]{1,200}\.whl\Z")


def _repacked_from(value, where: str, damaged) -> tuple[str, str] | None:
    """`repacked_from` ({"wheel": name, "sha256": hex}) of an archive cudnn-setup repacked."""
    if value is None:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("wheel"), str) \
            or not _WHEEL.match(value["wheel"]) or not isinstance(value.get("sha256"), str) \
            or not redist.HEX64.match(value["sha256"].lower()):
        raise damaged(f"{where}.repacked_from is not {{wheel: an nvidia_cudnn wheel name, "
                      "sha256: 64 hex digits}")
    return value["wheel"], value["sha256"].lower()

