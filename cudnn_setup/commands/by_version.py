"""Install by version: what an install SOURCE is, which redist tree to read, and the archive a
version (or a bare NVIDIA archive name) stands for, fetched and with the checksum it must have.

A SOURCE is, in this order:
1. an existing file: a path, whatever it looks like (a file named `9.1` is that file; a
   directory named `9` is not an archive, so `9` stays a version);
2. an http(s) URL: downloaded as before; a `file://` URL: that local file;
3. a version, 1 to 4 numbers (`9`, `9.17`, `9.17.0`, `9.17.0.29`): the newest release that
   matches, in the build for this machine's platform and the root's CUDA major (`--cuda N`
   overrides), from the tree below;
4. a bare NVIDIA archive name (no directory) that is not a file here: that archive, when the
   known table or the tree's manifest for its version lists it;
5. anything else: a path, refused as today when it does not exist.

The tree: `--mirror`, else $CUDNN_SETUP_MIRROR, else the user's then the system's config file
(see cudnn_setup.settings), else NVIDIA's public tree.
"""
from __future__ import annotations

from pathlib import Path

from cudnn_setup.commands.base import Context
from cudnn_setup.commands.download import client_for, fetch
from cudnn_setup.bounded import NotRegular, kind, regular_size
from cudnn_setup.errors import ArchiveRejected, UsageError
from cudnn_setup.facts.cuda import CudaRoot
from cudnn_setup.facts.cudnn import parse_archive_name
from cudnn_setup.facts.host import host_machine
from cudnn_setup.fetch import known_releases, redist
from cudnn_setup.fetch.candidates import is_version_request, parse_request
from cudnn_setup.fetch.checksums import Expected, expected_for, mismatch
from cudnn_setup.fetch.download import size_mismatch
from cudnn_setup.fetch.remote import Reader
from cudnn_setup.fetch.resolve import TABLE, Choice, Tree, resolve, resolve_name
from cudnn_setup.report import Result
from cudnn_setup.settings import mirror_setting, user_config_path
from cudnn_setup.text import show_path
from cudnn_setup.urls import redact

PATH, URL, FILE_URL, VERSION, NAME = "path", "url", "file-url", "version", "name"


def classify(source: str) -> str:
    """What an install SOURCE is (see the module's docstring for the order)."""
    if Path(source).is_file():
        return PATH
    scheme = source.split("://", 1)[0].lower() if "://" in source else ""
    if scheme in ("http", "https"):
        return URL
    if scheme == "file":
        return FILE_URL
    if is_version_request(source):
        return VERSION
    if "/" not in source and parse_archive_name(source) is not None:
        return NAME
    return PATH


def tree_for(ctx: Context, mirror: str | None, headers: list[str] | None) -> Tree:
    """The redist tree the settings name (NVIDIA's when none does), with a reader for it."""
    user_config = ctx.user_config or user_config_path(ctx.env, ctx.home)
    setting = mirror_setting(mirror, ctx.env, user_config, ctx.system_config)
    if setting is None:
        url = redist.NVIDIA_REDIST
    else:
        try:
            # a relative path is taken from the shell's directory on the command line only
            url = redist.normalize_mirror(setting.value,
                                          ctx.cwd if setting.origin == "--mirror" else None)
        except UsageError as exc:
            raise UsageError(f"{exc.message} (set by {setting.origin})", exc.hint) from None
    return Tree(url, Reader(client=client_for(ctx, headers)))


def target(root: CudaRoot | None, cuda: str | None,
           machine: str | None = None) -> tuple[str, str | None]:
    """NVIDIA's platform key for this machine, and the CUDA version builds must fit: `--cuda`,
    else the root's (None when neither is known)."""
    platform = redist.platform_key(machine or host_machine())
    if cuda is not None:
        redist.parse_cuda(cuda)  # a usage error when it is not a version
        return platform, cuda.strip()
    return platform, root.version if root is not None else None


def resolve_source(result: Result, ctx: Context, source: str, root: CudaRoot, *,
                   cuda: str | None, mirror: str | None, sha256: str | None,
                   headers: list[str] | None, cache_dir: Path | None
                   ) -> tuple[Path, Expected | None] | None:
    """For `install`: the local archive and the checksum it must have, when SOURCE is a version,
    a bare NVIDIA name or a file:// URL (fetched into the cache first unless it is local); None
    when it is a path or an http(s) URL, which install handles as it always has."""
    kind = classify(source)
    if kind in (PATH, URL):
        if cuda is not None or mirror is not None:
            raise UsageError(f"--cuda and --mirror choose among published releases; {source!r} "
                             "is an archive already", "drop them, or give a version such as 9.1")
        return None
    if kind == FILE_URL:
        path = redist.local_path(source)
        return path, expected_for(path.name, sha256)
    tree = tree_for(ctx, mirror, headers)
    if kind == VERSION:
        platform, cuda_version = target(root, cuda)
        if cuda_version is None:
            raise UsageError(f"cannot tell which CUDA {root.path} is, so not which build of "
                             f"cuDNN {source} to fetch", "pass --cuda N (e.g. --cuda 12)")
        choice = resolve(parse_request(source), tree, platform, cuda_version)
        why = f"newest {source.strip()} for CUDA {cuda_version} on {platform}"
    else:
        choice = resolve_name(source, tree)
        if choice is None:
            raise UsageError(f"{source} is not a file here, and neither the known table nor "
                             f"{redact(tree.url)} lists an archive of that name",
                             "give the archive's path, its URL, or a version such as 9.1",
                             code="unknown-archive")
        why = "by its name"
    return _fetch_choice(result, ctx, choice, why, tree, sha256, headers, cache_dir)


def _fetch_choice(result: Result, ctx: Context, choice: Choice, why: str, tree: Tree,
                  sha256: str | None, headers: list[str] | None,
                  cache_dir: Path | None) -> tuple[Path, Expected | None]:
    release = choice.release
    result.add("release", {**choice.to_dict(), "url": redact(choice.url)})
    result.lines.append(f"cuDNN {release.version} ({release.cuda_variant}, {release.platform}), "
                        f"{why}: {release.file_name} from {redact(tree.url)}; sha256 from "
                        f"{release.source}")
    expected = Expected("sha256", release.sha256, release.source if release.source != TABLE
                        else f"known releases table: {known_releases.provenance_line()}",
                        size=release.size)
    if sha256 is not None and sha256.lower() != release.sha256:
        raise mismatch(release.file_name, Expected("sha256", sha256.lower(), "--sha256"),
                       f"{release.sha256} as published ({expected.source})")
    local = redist.local_path(choice.url)
    if local is not None:
        _check_local(local, expected)
        return local, expected  # checked as it is read
    fetched = fetch(result, ctx, choice.url, None, headers, cache_dir, expected=expected,
                    client=tree.reader.client if isinstance(tree.reader, Reader) else None)
    return fetched.path, None  # checked as it was fetched


def _check_local(path: Path, expected: Expected) -> None:
    """An archive in a file:// mirror: a regular file (a FIFO there would hold the reader
    forever), of the size its manifest gives, judged from its stat before a byte is read."""
    try:
        size = regular_size(path)
    except NotRegular as exc:
        raise ArchiveRejected(f"{show_path(path)} in the mirror is {kind(exc.mode)}, not an "
                              "archive; not opened", "a mirror holds plain files",
                              code="archive-unreadable") from None
    except FileNotFoundError:
        return  # the reader says so, as for any archive path
    if expected.size and size != expected.size:
        raise size_mismatch(path.name, expected, size, "in the mirror")
