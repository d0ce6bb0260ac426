"""A mirror's `redistrib_<X.Y.Z>.json` as typed records: what `mirror` reads from DIR, extends
and writes back in NVIDIA's schema (fetch/redistrib_json.py describes it).

`Document.load` trusts nothing: the bytes pass the tool's own manifest parser first (every
name, hash and size checked), then each record is built field by field with its type checked,
so a value of the wrong shape is `ManifestDamaged`, never a crash further on. What the tool does
not write (the `cudnn_jit` and `cudnn_samples` components, NVIDIA's other keys) is kept as it
was read, so a mirror that started as a copy of NVIDIA's tree stays one.
"""
from __future__ import annotations

import json

from msgspec import Struct, field

from cudnn_setup import __version__
from cudnn_setup.errors import UsageError
from cudnn_setup.fetch import redist
from cudnn_setup.fetch.redist import ManifestDamaged
from cudnn_setup.fetch.redistrib_json import ARTIFACT_KEYS, parse_redistrib
from cudnn_setup.records import replace
from cudnn_setup.text import escape

COMPONENT = {"name": "NVIDIA CUDA Deep Neural Network library", "license": "cudnn",
             "license_path": "cudnn/LICENSE.txt"}
_METADATA = ("name", "license", "license_path", "version", "cuda_variant")
_TOP = ("release_date", "release_label", "release_product", "cudnn", "cudnn_setup")


class _Shape(Exception):
    """A field of the wrong type; said as ManifestDamaged by Document.load."""


def _text(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise _Shape(f"{where} is not a string")
    return value


def _optional(value: object, where: str) -> str | None:
    return None if value is None else _text(value, where)


def _object(value: object, where: str) -> dict:
    if not isinstance(value, dict):
        raise _Shape(f"{where} is not an object")
    return value


class RepackedFrom(Struct, frozen=True):
    """The wheel an archive was repacked from (cudnn-setup's own key in the schema)."""

    wheel: str
    sha256: str

    @classmethod
    def from_dict(cls, value: object, where: str) -> RepackedFrom:
        value = _object(value, where)
        return cls(_text(value.get("wheel"), f"{where}.wheel"),
                   _text(value.get("sha256"), f"{where}.sha256"))

    def to_dict(self) -> dict:
        return {"wheel": self.wheel, "sha256": self.sha256}


class Artifact(Struct, frozen=True):
    """One archive: where it sits below DIR, its checksums and size."""

    relative_path: str
    sha256: str
    md5: str | None
    size: int
    repacked_from: RepackedFrom | None = None

    @classmethod
    def from_dict(cls, value: object, where: str) -> Artifact:
        value = _object(value, where)
        size = value.get("size")
        if isinstance(size, str) and size.isdigit():
            size = int(size)  # NVIDIA writes sizes as strings
        if not isinstance(size, int) or isinstance(size, bool):
            raise _Shape(f"{where}.size is not a byte count")
        md5 = value.get("md5")
        repacked = value.get("repacked_from")
        return cls(_text(value.get("relative_path"), f"{where}.relative_path"),
                   _text(value.get("sha256"), f"{where}.sha256"),
                   None if md5 is None else _text(md5, f"{where}.md5"), size,
                   None if repacked is None else
                   RepackedFrom.from_dict(repacked, f"{where}.repacked_from"))

    def to_dict(self) -> dict:
        out: dict = {"relative_path": self.relative_path, "sha256": self.sha256}
        if self.md5 is not None:
            out["md5"] = self.md5
        out["size"] = str(self.size)
        if self.repacked_from is not None:
            out["repacked_from"] = self.repacked_from.to_dict()
        return out


class PlatformEntry(Struct, frozen=True):
    """A platform's archives per CUDA variant, and the one NVIDIA gives it directly where it
    does (8.x's manifests; 9.27.0's windows-arm64 has both)."""

    variants: dict[str, Artifact]
    direct: Artifact | None = None

    @classmethod
    def from_dict(cls, value: object, where: str) -> PlatformEntry:
        value = _object(value, where)
        direct = {k: v for k, v in value.items() if k in ARTIFACT_KEYS}
        return cls({k: Artifact.from_dict(v, f"{where}.{k}") for k, v in value.items()
                    if k not in ARTIFACT_KEYS},
                   Artifact.from_dict(direct, where) if direct else None)

    def to_dict(self) -> dict:
        return {**(self.direct.to_dict() if self.direct else {}),
                **{k: a.to_dict() for k, a in self.variants.items()}}


class Component(Struct, frozen=True):
    """The `cudnn` component: its metadata, the CUDA majors it lists, and its platforms. A
    field NVIDIA's older manifests leave out (8.5.0.96's license_path, cuda_variant) is None
    and stays out when written back."""

    version: str
    cuda_variant: tuple[str, ...] | None = ()
    platforms: dict[str, PlatformEntry] = field(default_factory=dict)
    name: str | None = COMPONENT["name"]
    license: str | None = COMPONENT["license"]
    license_path: str | None = COMPONENT["license_path"]

    @classmethod
    def from_dict(cls, value: object) -> Component:
        value = _object(value, "cudnn")
        variants = value.get("cuda_variant")
        if variants is not None and not isinstance(variants, list):
            raise _Shape("cudnn.cuda_variant is not a list")
        return cls(version=_text(value.get("version"), "cudnn.version"),
                   cuda_variant=None if variants is None else
                   tuple(_text(v, "cudnn.cuda_variant[]") for v in variants),
                   platforms={k: PlatformEntry.from_dict(v, f"cudnn.{k}")
                              for k, v in value.items() if k not in _METADATA},
                   **{k: _optional(value.get(k), f"cudnn.{k}") for k in COMPONENT})

    def to_dict(self) -> dict:
        meta = {"name": self.name, "license": self.license, "license_path": self.license_path,
                "version": self.version,
                "cuda_variant": None if self.cuda_variant is None else list(self.cuda_variant)}
        return {**{k: v for k, v in meta.items() if v is not None},
                **{k: p.to_dict() for k, p in self.platforms.items()}}

    def artifact(self, platform: str, variant: str) -> Artifact | None:
        entry = self.platforms.get(platform)
        return entry.variants.get(variant) if entry else None


class Document(Struct, frozen=True):
    """One release's manifest. `kept`: what the tool does not write (other components,
    NVIDIA's other keys), as read and checked by the manifest parser, written back unchanged."""

    release_label: str | None
    cudnn: Component
    release_date: str | None = None
    release_product: str | None = "cudnn"
    built_by: str | None = None
    kept: dict[str, object] = field(default_factory=dict)

    @classmethod
    def load(cls, data: bytes, uri: str, label: str) -> Document:
        parse_redistrib(data, uri, label)  # every value checked; a damaged one is refused
        doc = json.loads(data)
        try:
            built = doc.get("cudnn_setup")
            return cls(release_label=_optional(doc.get("release_label"), "release_label"),
                       cudnn=Component.from_dict(doc.get("cudnn")),
                       release_date=_optional(doc.get("release_date"), "release_date"),
                       release_product=_optional(doc.get("release_product"), "release_product"),
                       built_by=None if built is None else _text(
                           _object(built, "cudnn_setup").get("built_by"), "cudnn_setup.built_by"),
                       kept={k: v for k, v in doc.items() if k not in _TOP})
        except _Shape as exc:
            name = uri.rsplit("/", 1)[-1]
            raise ManifestDamaged(f"{name} from {uri}: {exc}", "the manifest is damaged or not "
                                  "NVIDIA's; move it aside, or build the mirror elsewhere") from None

    def to_bytes(self) -> bytes:
        top = {"release_date": self.release_date, "release_label": self.release_label,
               "release_product": self.release_product}
        doc = {**{k: v for k, v in top.items() if v is not None}, "cudnn": self.cudnn.to_dict(),
               **self.kept}
        if self.built_by is not None:
            doc["cudnn_setup"] = {"built_by": self.built_by}
        return (json.dumps(doc, indent=4) + "\n").encode()


def listing(doc: Document | None, version: str, platform: str, variant: str,
            artifact: Artifact, today: str) -> tuple[Document, bool]:
    """`doc` (a new one, dated `today`, when None) with `artifact` listed for `platform` and
    `variant`, and whether that changed it. One release label holds one version."""
    label = redist.manifest_label(version)
    if doc is None:
        doc = Document(label, Component(version), release_date=today)
    if doc.cudnn.version != version:
        raise UsageError(f"the mirror holds cuDNN {escape(doc.cudnn.version[:40])} under "
                         f"release {label}, not {escape(version)}",
                         "one release label holds one version: build another mirror")
    if doc.cudnn.artifact(platform, variant) == artifact:
        return doc, False  # already listed as it is
    entry = doc.cudnn.platforms.get(platform, PlatformEntry({}))
    platforms = {**doc.cudnn.platforms,
                 platform: replace(entry, variants={**entry.variants, variant: artifact})}
    majors = sorted({redist.parse_variant(v)[0] for p in platforms.values() for v in p.variants})
    cudnn = replace(doc.cudnn, platforms=platforms, cuda_variant=tuple(map(str, majors)))
    return replace(doc, cudnn=cudnn, built_by=f"cudnn-setup {__version__} mirror"), True
