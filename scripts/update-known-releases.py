#!/usr/bin/env python3
"""Regenerate cudnn_setup/fetch/known_releases.json from a copy of Spack's cudnn package.py.

    python scripts/update-known-releases.py PACKAGE_PY --commit SHA --date ISO-DATE [-o FILE|-]

Get the file from https://github.com/spack/spack-packages (repos/spack_repo/builtin/packages/
cudnn/package.py; older Spack: var/spack/repos/builtin/packages/cudnn/package.py) and pass the
commit it comes from. The file is read with `ast`, never run. Its `_versions` dict gives, per
"<cudnn>-<cuda>" key, the sha256 for each "<System>-<machine>"; names and URL paths come from
cudnn_setup.fetch.redist's rules. Spack's `url_for_version` is checked to still change layout at
exactly the versions and with exactly the URL templates those rules implement: if Spack records a
new layout, this script stops instead of writing names that do not exist.
Do not commit Spack's file; commit only the JSON this script writes.
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from packaging.version import Version  # noqa: E402

from cudnn_setup.fetch import known_releases, redist  # noqa: E402

DEFAULT_OUT = REPO / "cudnn_setup" / "fetch" / known_releases.FILE_NAME
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


class SpackFileError(Exception):
    pass


def _versions_dict(tree: ast.Module) -> dict:
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, ast.AnnAssign) else [])
        if any(isinstance(t, ast.Name) and t.id == "_versions" for t in targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError as exc:
                raise SpackFileError(f"_versions is not a literal: {exc}") from None
            if not isinstance(value, dict):
                raise SpackFileError("_versions is not a dict")
            return value
    raise SpackFileError("no module-level _versions = {...}")


def _url_for_version(tree: ast.Module) -> ast.FunctionDef:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "url_for_version":
            return node
    raise SpackFileError("no url_for_version")


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
        raise SpackFileError(
            "url_for_version changes layout at "
            f"{sorted(map(str, thresholds), key=Version)}, the rules know "
            f"{[str(v) for v in redist.LAYOUT_CHANGES]}: update cudnn_setup/fetch/redist.py first")
    if templates != URL_TEMPLATES:
        raise SpackFileError(f"url_for_version's URL templates changed: {sorted(templates ^ URL_TEMPLATES)}"
                             "; update cudnn_setup/fetch/redist.py first")


def table_rows(versions: dict) -> tuple[list[dict], dict[str, int]]:
    rows, skipped = [], {}
    for key, packages in versions.items():
        if not isinstance(key, str) or not isinstance(packages, dict):
            raise SpackFileError(f"_versions entry {key!r} is not 'str: dict'")
        cudnn, sep, cuda = key.partition("-")
        if not sep or not re.fullmatch(r"\d+(\.\d+){1,3}", cudnn) or not re.fullmatch(
                r"\d+(\.\d+)?", cuda):
            raise SpackFileError(f"unexpected version key {key!r} (want '<cudnn>-<cuda>')")
        for spack_platform, sha256 in packages.items():
            if NOT_LINUX.match(str(spack_platform)):
                skipped[spack_platform] = skipped.get(spack_platform, 0) + 1
                continue
            platform = SPACK_PLATFORMS.get(spack_platform)
            if platform is None:
                raise SpackFileError(f"{key}: unknown platform {spack_platform!r}")
            if not isinstance(sha256, str) or not redist.HEX64.match(sha256):
                raise SpackFileError(f"{key} {spack_platform}: not a sha256: {sha256!r}")
            rows.append(known_releases.entry(cudnn, platform, cuda, sha256))
    rows = known_releases.ordered(rows)
    names = [r["name"] for r in rows]
    if len(set(names)) != len(names):
        raise SpackFileError("two entries give the same archive name")
    return rows, dict(sorted(skipped.items()))


def generate(source: bytes, repository: str, path: str, commit: str, date: str) -> str:
    tree = ast.parse(source)
    check_layout(tree)
    rows, skipped = table_rows(_versions_dict(tree))
    provenance = {
        "source": "Spack cudnn package",
        "repository": repository,
        "path": path,
        "commit": commit,
        "commit_date": date,
        "url": f"{repository}/blob/{commit}/{path}",
        "file_sha256": hashlib.sha256(source).hexdigest(),
        "generator": "scripts/update-known-releases.py",
        "url_base": redist.NVIDIA_COMPUTE,
        "skipped_platforms": skipped,
    }
    text = known_releases.render(provenance, rows)
    known_releases.parse(text)  # what the tool will read back
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("package_py", type=Path)
    parser.add_argument("--commit", required=True, help="commit of the Spack file (40 hex)")
    parser.add_argument("--date", required=True, help="that commit's date, ISO 8601")
    parser.add_argument("--repository", default="https://github.com/spack/spack-packages")
    parser.add_argument("--path", default="repos/spack_repo/builtin/packages/cudnn/package.py",
                        help="the file's path in that repository")
    parser.add_argument("-o", "--output", default=str(DEFAULT_OUT), help="file to write, or -")
    args = parser.parse_args(argv)
    if not re.fullmatch(r"[0-9a-f]{40}", args.commit):
        parser.error("--commit must be a full 40-hex commit id")
    if not re.fullmatch(r"\d{4}-\d\d-\d\d(T[\d:]+([+-]\d\d:\d\d|Z)?)?", args.date):
        parser.error("--date must be an ISO 8601 date")
    try:
        text = generate(args.package_py.read_bytes(), args.repository, args.path, args.commit,
                        args.date)
    except (OSError, SyntaxError, SpackFileError, ValueError) as exc:
        print(f"update-known-releases: {exc}", file=sys.stderr)
        return 1
    if args.output == "-":
        sys.stdout.write(text)
    else:
        out = Path(args.output)
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(out)
        count = len(known_releases.parse(text)[1])
        print(f"wrote {out}: {count} archives", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
