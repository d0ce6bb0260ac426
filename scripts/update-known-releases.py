#!/usr/bin/env python3
"""Regenerate cudnn_setup/fetch/known_releases.json from the inputs a sources file names.

    python scripts/update-known-releases.py [--sources FILE] [--fetch [--raw-base URL]] [-o FILE|-]

The sources file (default data/known-releases/sources.json) names, each with its repository,
path and commit: Spack's cudnn package.py, and NVIDIA's own redistrib_<X.Y.Z>.json manifests
as public repositories keep copies of them (NVIDIA's tree replaces nothing, but keeps no
history a commit can pin). Each input is read from the file the sources file gives, relative
to its own directory, or, with --fetch, from the repository at that commit
(raw.githubusercontent.com); either way the table records each input's repository, path,
commit and the sha256 of the bytes read, and every entry names the inputs that vouch for its
sha256.

Merging: one entry per archive name. Spack gives archives older than NVIDIA's manifests (and
the public URL of 8.3.1 to 8.7.x, under local_installers/); manifests give every platform
(linux-aarch64 for Jetson and Windows among them), the `cudnn_jit` flavour, md5 and size.
Where two inputs list the same archive they must agree on its sha256 (and on md5 and size
where both give them), or the script stops naming both: a disagreement is a damaged input, not
something to choose between. One kind is corrected instead (see merge): Spack giving an archive
the checksum NVIDIA's manifests give another archive; the table's `provenance.corrections`
lists each.

Spack's file is read with `ast`, never run. Its `_versions` dict gives, per "<cudnn>-<cuda>"
key, the sha256 for each "<System>-<machine>"; names and URL paths come from
cudnn_setup.fetch.redist's rules. Spack's `url_for_version` is checked to still change layout
at exactly the versions and with exactly the URL templates those rules implement: if Spack
records a new layout, this script stops instead of writing names that do not exist. Manifests
are read by the tool's own parser (cudnn_setup.fetch.redistrib_json), which checks every field.
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import sys
import urllib.parse
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from packaging.version import Version  # noqa: E402

from cudnn_setup.errors import SetupError  # noqa: E402
from cudnn_setup.fetch import known_releases, redist  # noqa: E402
from cudnn_setup.fetch.redistrib_json import MAX_BYTES, parse_redistrib  # noqa: E402

DEFAULT_OUT = REPO / "cudnn_setup" / "fetch" / known_releases.FILE_NAME
DEFAULT_SOURCES = REPO / "data" / "known-releases" / "sources.json"
GENERATOR = "scripts/update-known-releases.py"
SPACK_MAX_BYTES = 1 << 20
FETCH_TIMEOUT = 60
RAW_BASE = "https://raw.githubusercontent.com/"
# Spack's platform keys ("{platform.system()}-{platform.machine()}") for Linux.
SPACK_PLATFORMS = {"Linux-x86_64": "linux-x86_64", "Linux-aarch64": "linux-sbsa",
                   "Linux-ppc64le": "linux-ppc64le"}
NOT_LINUX = re.compile(r"^(Darwin|Windows)-\w+$")
# The URL templates of url_for_version that redist.archive_name/public_path implement.
URL_TEMPLATES = {
    "https://developer.download.nvidia.com/compute/cudnn/redist/cudnn/{0}/cudnn-{0}-{1}_cuda{2}-archive.tar.xz",
    "https://developer.download.nvidia.com/compute/redist/cudnn/v{0}/cudnn-{1}-{2}_cuda{3}-archive.tar.xz",
    "https://developer.download.nvidia.com/compute/redist/cudnn/v{0}/cudnn-{1}-{2}-v{3}.tgz",
}
_SOURCE_FIELDS = ("repository", "path", "commit", "file")


class InputError(Exception):
    pass



# --- the sources file ---------------------------------------------------------------------------

def read_sources(path: Path) -> dict:
    """The sources file, checked: {"spack": {…}, "manifests": [{…}, …]}, each input with
    repository (an https://github.com/ URL), path, commit (40 hex) and file (relative)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: {exc}") from None
    if not isinstance(doc, dict) or set(doc) - {"spack", "manifests", "notes"} or \
            not isinstance(doc.get("manifests", []), list):
        raise InputError(f"{path}: want {{\"spack\": {{…}}, \"manifests\": [{{…}}, …]}}")
    inputs = ([("spack", doc["spack"])] if "spack" in doc else []) + [
        ("manifest", m) for m in doc.get("manifests", [])]
    if not inputs:
        raise InputError(f"{path}: names no input")
    for kind, src in inputs:
        if not isinstance(src, dict) or not set(_SOURCE_FIELDS) <= set(src) or \
                set(src) - set(_SOURCE_FIELDS) - {"commit_date"}:
            raise InputError(f"{path}: each input needs exactly {_SOURCE_FIELDS} "
                             f"(and optionally commit_date): {src!r:.200}")
        if not all(isinstance(src[k], str) for k in _SOURCE_FIELDS):
            raise InputError(f"{path}: input fields must be strings: {src!r:.200}")
        if not re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", src["repository"]):
            raise InputError(f"{path}: repository {src['repository']!r:.80} is not a GitHub URL")
        if not re.fullmatch(r"[0-9a-f]{40}", src["commit"]):
            raise InputError(f"{path}: commit {src['commit']!r:.60} is not 40 hex digits")
        for key in ("path", "file"):
            try:
                redist.safe_relative(src[key])
            except ValueError as exc:
                raise InputError(f"{path}: {key}: {exc}") from None
        date = src.get("commit_date")
        if date is not None and not (isinstance(date, str) and re.fullmatch(
                r"\d{4}-\d\d-\d\d(T[\d:]+([+-]\d\d:\d\d|Z)?)?", date)):
            raise InputError(f"{path}: commit_date {date!r:.40} is not ISO 8601")
    return doc


def raw_url(src: dict, raw_base: str = RAW_BASE) -> str:
    """The file at its commit, as GitHub serves it raw (or a copy of that service)."""
    repo = src["repository"].removeprefix("https://github.com/")
    return f"{raw_base}{repo}/{src['commit']}/{urllib.parse.quote(src['path'])}"


def read_input(src: dict, base: Path, raw_base: str | None, limit: int) -> bytes:
    """An input's bytes: from `base`/file, or, given `raw_base`, fetched from the repository
    at its commit."""
    if raw_base is not None:
        url = raw_url(src, raw_base)
        try:
            with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT) as response:
                data = response.read(limit + 1)
        except OSError as exc:
            raise InputError(f"{url}: {exc}") from None
    else:
        path = base / src["file"]
        try:
            with open(path, "rb") as f:
                data = f.read(limit + 1)
        except OSError as exc:
            raise InputError(f"{path}: {exc}") from None
    if len(data) > limit:
        raise InputError(f"{src['path']}: more than {limit} bytes")
    return data


def source_record(kind: str, src: dict, data: bytes) -> dict:
    return {"kind": kind, "repository": src["repository"], "path": src["path"],
            "commit": src["commit"], "commit_date": src.get("commit_date"),
            "url": f"{src['repository']}/blob/{src['commit']}/{src['path']}",
            "file_sha256": hashlib.sha256(data).hexdigest()}


# --- Spack's package.py --------------------------------------------------------------------------

def _versions_dict(tree: ast.Module) -> dict:
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, ast.AnnAssign) else [])
        if any(isinstance(t, ast.Name) and t.id == "_versions" for t in targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError as exc:
                raise InputError(f"_versions is not a literal: {exc}") from None
            if not isinstance(value, dict):
                raise InputError("_versions is not a dict")
            return value
    raise InputError("no module-level _versions = {...}")


def _url_for_version(tree: ast.Module) -> ast.FunctionDef:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "url_for_version":
            return node
    raise InputError("no url_for_version")


def check_layout(tree: ast.Module) -> None:
    """Spack's url_for_version must still use the thresholds and templates redist implements."""
    func = _url_for_version(tree)
    thresholds, templates = set(), set()
    for node in ast.walk(func):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "Version" and len(node.args) == 1
                and isinstance(node.args[0], ast.Constant)):
            thresholds.add(Version(node.args[0].value))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and node.value.startswith("https://"):
            templates.add(node.value)
    if thresholds != set(redist.LAYOUT_CHANGES):
        raise InputError(
            "url_for_version changes layout at "
            f"{sorted(map(str, thresholds), key=Version)}, the rules know "
            f"{[str(v) for v in redist.LAYOUT_CHANGES]}: update cudnn_setup/fetch/redist.py first")
    if templates != URL_TEMPLATES:
        raise InputError(f"url_for_version's URL templates changed: {sorted(templates ^ URL_TEMPLATES)}"
                         "; update cudnn_setup/fetch/redist.py first")


def spack_rows(source: bytes) -> tuple[list[dict], dict[str, int]]:
    """The table rows Spack's file gives, and what it lists that the table leaves out."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise InputError(f"Spack's file does not parse: {exc}") from None
    check_layout(tree)
    rows, skipped = [], {}
    for key, packages in _versions_dict(tree).items():
        if not isinstance(key, str) or not isinstance(packages, dict):
            raise InputError(f"_versions entry {key!r} is not 'str: dict'")
        cudnn, sep, cuda = key.partition("-")
        if not sep or not re.fullmatch(r"\d+(\.\d+){1,3}", cudnn) or not re.fullmatch(
                r"\d+(\.\d+)?", cuda):
            raise InputError(f"unexpected version key {key!r} (want '<cudnn>-<cuda>')")
        if Version(cudnn) >= redist.NEW_TREE and "." in cuda:
            # names there carry the CUDA major only; a minor here would make up a name
            raise InputError(f"{key}: cuDNN {cudnn} builds are named for a CUDA major, not {cuda}")
        for spack_platform, sha256 in packages.items():
            if NOT_LINUX.match(str(spack_platform)):
                what = f"spack {spack_platform}"
                skipped[what] = skipped.get(what, 0) + 1
                continue
            platform = SPACK_PLATFORMS.get(spack_platform)
            if platform is None:
                raise InputError(f"{key}: unknown platform {spack_platform!r}")
            if not isinstance(sha256, str) or not redist.HEX64.match(sha256):
                raise InputError(f"{key} {spack_platform}: not a sha256: {sha256!r}")
            try:
                rows.append(known_releases.entry(cudnn, platform, cuda, sha256,
                                                 provenance=("spack",)))
            except ValueError as exc:
                raise InputError(f"{key} {spack_platform}: {exc}") from None
    names = [r["name"] for r in rows]
    if len(set(names)) != len(names):
        raise InputError("two Spack entries give the same archive name")
    return rows, skipped



# --- NVIDIA's manifests --------------------------------------------------------------------------

def manifest_rows(data: bytes, sid: str, url: str) -> list[dict]:
    """The table rows one manifest gives (every platform, both flavours)."""
    try:
        listed = parse_redistrib(data, url)
    except SetupError as exc:
        raise InputError(f"{sid}: {exc.message}") from None
    rows = []
    for r in listed:
        cuda = r.cuda_variant.removeprefix("cuda")
        # Below 8.8 Spack's public path needs the CUDA minor a manifest does not give; NVIDIA's
        # tree, which the manifest describes, holds the archive at its relative_path.
        url_path = redist.tree_path(r.platform, r.file_name, r.flavour) \
            if Version(r.version) < redist.NEW_TREE else None
        try:
            row = known_releases.entry(r.version, r.platform, cuda, r.sha256, flavour=r.flavour,
                                       md5=r.md5, size=r.size, provenance=(sid,),
                                       url_path=url_path)
        except ValueError as exc:
            raise InputError(f"{sid}: {r.file_name}: {exc}") from None
        if row["name"] != r.file_name:
            raise InputError(f"{sid}: {r.file_name} is not the name the rules give "
                             f"({row['name']})")
        rows.append(row)
    return rows


def merge(groups: list[list[dict]]) -> tuple[list[dict], list[dict]]:
    """One row per archive name, and the corrections made on the way.

    The first input to list a name gives its CUDA and URL path (Spack's come first: its public
    URLs are the ones in use); later ones add md5, size and their own names to its provenance.
    Any disagreement stops the merge, but one: where Spack gives an archive the sha256 that
    NVIDIA's manifests give another archive (Spack's 8.9.5.30 "Linux-aarch64" for CUDA 12 holds
    the Jetson build's checksum under the sbsa archive's URL), Spack copied the wrong line, and
    NVIDIA's own value is kept; each such correction is recorded in the table's provenance."""
    spack_sid = "spack"
    owner = {r["sha256"]: r["name"] for rows in groups for r in rows
             if spack_sid not in r["provenance"]}
    by_name: dict[str, dict] = {}
    corrections: list[dict] = []
    for rows in groups:
        for row in rows:
            old = by_name.get(row["name"])
            if old is None:
                by_name[row["name"]] = dict(row)
                continue
            if old["sha256"] != row["sha256"] and old["provenance"] == [spack_sid] \
                    and owner.get(old["sha256"], row["name"]) != row["name"]:
                corrections.append({"name": row["name"], "source": spack_sid,
                                    "sha256": old["sha256"],
                                    "is_the_sha256_of": owner[old["sha256"]],
                                    "kept": row["sha256"], "from": row["provenance"][0]})
                old["sha256"] = row["sha256"]
                old["provenance"] = []  # Spack does not vouch for the value kept
            for key in ("sha256", "md5", "size"):
                if old[key] is not None and row[key] is not None and old[key] != row[key]:
                    raise InputError(
                        f"{row['name']}: {', '.join(old['provenance'])} give {key} {old[key]}, "
                        f"{', '.join(row['provenance'])} give {row[key]}")
                if old[key] is None:
                    old[key] = row[key]
            old["provenance"] = sorted(set(old["provenance"]) | set(row["provenance"]))
    return known_releases.ordered(list(by_name.values())), corrections


def generate(sources_path: Path, raw_base: str | None = None) -> str:
    """The table's text from the inputs `sources_path` names: files beside it, or fetched
    below `raw_base` (RAW_BASE: GitHub's raw files) when one is given."""
    doc = read_sources(sources_path)
    base = sources_path.parent
    records: dict[str, dict] = {}
    groups: list[list[dict]] = []
    skipped: dict[str, int] = {}
    if "spack" in doc:
        data = read_input(doc["spack"], base, raw_base, SPACK_MAX_BYTES)
        rows, skipped = spack_rows(data)
        records["spack"] = source_record("spack-package", doc["spack"], data)
        groups.append(rows)
    for src in doc.get("manifests", []):
        sid = src["path"].rsplit("/", 1)[-1]
        if sid in records:
            raise InputError(f"two inputs are named {sid}")
        data = read_input(src, base, raw_base, MAX_BYTES)
        records[sid] = source_record("nvidia-redistrib", src, data)
        groups.append(manifest_rows(data, sid, raw_url(src, raw_base or RAW_BASE)))
    rows, corrections = merge(groups)
    inputs = sources_path.resolve()
    shown = inputs.relative_to(REPO).as_posix() if inputs.is_relative_to(REPO) else inputs.name
    provenance = {"generator": GENERATOR, "inputs": shown, "url_base": redist.NVIDIA_COMPUTE,
                  "sources": dict(sorted(records.items(), key=_source_order)),
                  "skipped": dict(sorted(skipped.items())), "corrections": corrections}
    text = known_releases.render(provenance, rows)
    known_releases.parse(text)  # what the tool will read back
    return text


def _source_order(item: tuple[str, dict]) -> tuple:
    sid = item[0]
    if sid == "spack":
        return (0, Version("0"))
    return (1, Version(sid.removeprefix("redistrib_").removesuffix(".json")))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sources", type=Path, default=DEFAULT_SOURCES,
                        help="the file naming the inputs (default: %(default)s)")
    parser.add_argument("--fetch", action="store_true",
                        help="read each input from its repository at its commit, not from disk")
    parser.add_argument("--raw-base", default=RAW_BASE,
                        help="with --fetch: where repositories' files are served, as "
                             "<base><owner>/<name>/<commit>/<path> (default: %(default)s)")
    parser.add_argument("-o", "--output", default=str(DEFAULT_OUT), help="file to write, or -")
    args = parser.parse_args(argv)
    try:
        if not re.fullmatch(r"(https?|file)://\S+/", args.raw_base):
            parser.error("--raw-base must be an http(s) or file URL ending in /")
        text = generate(args.sources, args.raw_base if args.fetch else None)
    except (InputError, ValueError) as exc:
        print(f"update-known-releases: {exc}", file=sys.stderr)
        return 1
    if args.output == "-":
        sys.stdout.write(text)
    else:
        out = Path(args.output)
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(out)
        prov, rows = known_releases.parse(text)
        print(f"wrote {out}: {len(rows)} archives from {len(prov['sources'])} inputs",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
