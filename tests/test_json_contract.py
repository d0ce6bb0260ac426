"""Every command's --json output matches docs/json.md: base keys, declared keys only, types, and
error codes that the document lists (and a document that lists no code the code never uses)."""
import json
import re
from pathlib import Path

import pytest

from conftest import REPO, run_json
from fixtures.generate import GENERATION_SAMPLES

DOC = REPO / "docs" / "json.md"
V7 = GENERATION_SAMPLES["v4-v7"]
TYPES = {"string": str, "int": int, "bool": bool, "object": dict, "list": list, "null": type(None)}


def _tables() -> dict[str, dict[str, dict]]:
    """{section: {key: {"types": (...), "always": bool}}} from the doc's key tables."""
    sections: dict[str, dict[str, dict]] = {}
    current = None
    for line in DOC.read_text().splitlines():
        heading = re.match(r"^#{2,3} (.+)$", line)
        if heading:
            current = heading.group(1).strip()
            continue
        row = re.match(r"^\| `([a-z_]+)` \| ([a-z|\\]+) \| ([^|]+) \|", line)
        if row and current:
            types = tuple(TYPES[t] for t in row.group(2).replace("\\", "").split("|"))
            sections.setdefault(current, {})[row.group(1)] = {
                "types": types, "always": row.group(3).strip() == "always"}
    return sections


def _codes() -> dict[str, set[int]]:
    """{code: the exit codes it may come with} from the doc's error table."""
    out = {}
    for line in DOC.read_text().splitlines():
        row = re.match(r"^\| `([a-z-]+)` \| ([\d, ]+) \|", line)
        if row:
            out[row.group(1)] = {int(x) for x in row.group(2).split(",")}
    return out


TABLES = _tables()
CODES = _codes()


def check_contract(out: dict, exit_code: int) -> None:
    base = TABLES["Base keys (every command)"]
    own = TABLES.get(out["command"], {})
    for key, spec in base.items():
        assert key in out, f"base key {key} missing"
        assert isinstance(out[key], spec["types"]), (key, out[key])
    for key, value in out.items():
        if key in base:
            continue
        assert key in own, f"{out['command']}: key {key!r} is not declared in docs/json.md"
        assert isinstance(value, own[key]["types"]), (out["command"], key, value)
    for key, spec in own.items():
        if spec["always"]:
            assert key in out, (out["command"], key)
    assert out["schema"] == 2
    for check in out["checks"]:
        assert set(check) <= {"name", "status", "detail", "data"}
        assert check["status"] in ("pass", "warn", "fail", "skip") and isinstance(check["detail"], str)
    error = out["error"]
    if error is None:
        assert exit_code == (1 if any(c["status"] == "fail" for c in out["checks"]) else 0)
        assert out["ok"] is (exit_code == 0)
        return
    assert set(error) <= {"exit_code", "code", "message", "hint", "problems"}
    assert error["code"] in CODES, f"error code {error['code']!r} is not in docs/json.md"
    assert error["exit_code"] == exit_code and exit_code in CODES[error["code"]], error
    assert out["ok"] is False


def test_doc_examples_follow_the_tables():
    blocks = re.findall(r"```json\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) >= 8
    for block in blocks:
        out = json.loads(block)
        code = out["error"]["exit_code"] if out["error"] else (
            1 if any(c["status"] == "fail" for c in out["checks"]) else 0)
        check_contract(out, code)


def test_every_error_code_in_the_code_is_documented_and_back():
    """The table lists exactly the codes the code can produce."""
    from cudnn_setup import errors

    source = "\n".join(p.read_text() for p in (REPO / "cudnn_setup").rglob("*.py"))
    used = set(re.findall(r'\bcode\s*=\s*"([a-z][a-z-]*)"', source))
    used |= set(re.findall(r'default_code = "([a-z][a-z-]*)"', source))
    used |= {code for code, _, _ in [*errors._OS_ERRORS.values(), errors._PROCESS_LIMIT]}
    assert used == set(CODES), (sorted(used - set(CODES)), sorted(set(CODES) - used))


@pytest.fixture(scope="module")
def installed_root(tmp_path_factory, archives, compiler):
    from fixtures.generate import make_cuda_root

    base = tmp_path_factory.mktemp("contract")
    root = make_cuda_root(base / "cuda", "10.0", "lib64", "txt", cc=compiler)
    home = base / "home"
    home.mkdir()
    return root, home


def _scenarios(archives, root: Path, home: Path, tmp: Path, compiler):
    from fixtures.mirror import build_mirror

    mirror = build_mirror(tmp / "mirror", cc=compiler)
    rc = home / ".theanorc"
    a = str(archives[V7])
    bad = tmp / "not-an-archive.tgz"
    bad.write_bytes(b"\x1f\x8b" + b"garbage" * 10)
    return [
        ["inspect", a],
        ["inspect", bad],
        ["inspect", tmp / "missing.tgz"],
        ["install", a, "--cuda-root", root, "--theanorc", rc, "--dry-run"],
        ["install", a, "--cuda-root", root, "--theanorc", rc, "--no-verify"],
        ["install", a, "--cuda-root", root, "--theanorc", rc, "--no-verify"],
        ["install", a, "--cuda-root", tmp / "nowhere", "--no-verify"],
        ["install", a, "--cuda-root", root, "--sha256", "0" * 64, "--no-verify"],
        ["install", a, "--sha256", "xyz"],
        ["install", a, "--no-such-option"],
        ["verify", "--cuda-root", root, "--no-theano"],
        ["theanorc", "--cuda-root", root, "--theanorc", rc],
        ["theanorc", "--cuda-root", root, "--theanorc", rc, "--dry-run"],
        ["doctor", "--cuda-root", root],
        ["bench", "--cuda-root", root, "--no-theano"],
        ["repair", "--cuda-root", root, "--dry-run"],
        ["repair", "--cuda-root", root],
        ["uninstall", "--cuda-root", root, "--dry-run"],
        ["uninstall", "--cuda-root", root],
        ["uninstall", "--cuda-root", root],
        ["repair", "--cuda-root", root],
        ["download", "ftp://example.invalid/x.tgz", "--cache-dir", tmp / "cache"],
        ["list", "--cuda", "12", "--mirror", mirror.url],
        ["list", "--cuda", "12", "--mirror", (tmp / "no-mirror").as_uri()],
        ["install", "9.1", "--cuda-root", root, "--mirror", mirror.url, "--no-verify"],
        ["install", "7.77", "--cuda-root", root, "--mirror", mirror.url, "--no-verify"],
        ["mirror", tmp / "built", "9.1", "--cuda", "12", "--from", mirror.url],
        ["mirror", tmp / "built", "7.77", "--cuda", "12", "--from", mirror.url],
        ["list", "--cuda", "12", "--from", "pypi", "--index-url", (tmp / "no-index").as_uri()],
        ["download", "9.1", "--cuda", "12", "--from", mirror.url, "-o", tmp / "dl"],
        ["no-such-command"],
    ]


def test_every_command_follows_the_contract(archives, installed_root, tmp_path, compiler):
    root, home = installed_root
    seen = set()
    for args in _scenarios(archives, root, home, tmp_path, compiler):
        done, out = run_json(args, home)
        check_contract(out, done.returncode)
        seen.add(out["command"])
    documented = {name for name in TABLES if re.fullmatch(r"[a-z]+", name)}
    assert documented <= seen | {""}, documented - seen
