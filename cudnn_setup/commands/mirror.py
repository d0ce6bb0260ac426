"""`mirror DIR VERSION…`: build (or bring up to date) a directory in NVIDIA's redist layout, which
`install --mirror` and any static web server serve to a fleet:

    DIR/redistrib_<X.Y.Z>.json        NVIDIA's schema: sha256, md5 and size (as strings)
    DIR/cudnn/<platform>/<archive>    the archives
    DIR/index.html                    links to both (what `--mirror` reads to find manifests)

Each VERSION × `--cuda` × `--platform` is picked from the source (`--from nvidia|pypi|MIRROR`,
NVIDIA's tree by default) as `install` would pick it. Incremental: an archive already there
whose sha256 is the one vouched for is kept (hashed again, not trusted). Downloads go to the
tool's download cache (reused there when their checksum is known, resumed there when cut
short); each is copied or repacked into a work file in DIR/.incoming/, checked, and renamed into
its final name only then, and the manifests and the index are written atomically last: an
interrupted run leaves no half-written file under a final name. A release the manifest could
not list (a pre-release or local version) is refused before anything is fetched. DIR is written
only through descriptors of its own directories (fetch/mirror_tree.py): a link planted there is
refused, and modes are 0755/0644 whatever the umask. A second run into DIR waits for the first
as an install waits for a root's lock. The engine is cudnn_setup/mirror/.

A wheel from a PyPI index is repacked into NVIDIA's layout (archive/repack.py) under a name that
says so (`…-repack.tar.gz`); the manifest marks it (`repacked_from`: the wheel's name and
sha256) and gives the repack's own checksum, which install then shows as the mirror's, never
NVIDIA's.
"""
from __future__ import annotations

from pathlib import Path

from cudnn_setup.errors import DownloadFailed, UsageError
from cudnn_setup.facts.host import wheel_tags_for
from cudnn_setup.fetch import redist
from cudnn_setup.fetch.candidates import parse_request
from cudnn_setup.mirror.build import Built, MirrorRequest, PlatformSource, build
from cudnn_setup.report import Result
from cudnn_setup.sources.base import NVIDIA, PYPI
from cudnn_setup.steps.by_version import choose_source, fetcher, host_choice, machine_wheel_tags
from cudnn_setup.steps.command_wrapper import command
from cudnn_setup.steps.context import Context, root_if_any, which
from cudnn_setup.steps.fetching import parse_headers


@command("mirror", fails_as=DownloadFailed)
def mirror(result: Result, ctx: Context, directory: Path, versions: list[str], *,
           cudas: list[str] | None = None, platforms: list[str] | None = None,
           from_: str | None = None, index_url: str | None = None,
           headers: list[str] | None = None, cuda_root: Path | None = None) -> None:
    if not versions:
        raise UsageError("give one version or more", "e.g. cudnn-setup mirror DIR 9.28 --cuda 12")
    parse_headers(headers)
    requests = tuple(parse_request(v, prerelease=from_ == PYPI or index_url is not None)
                     for v in versions)
    if not cudas:
        root = root_if_any(ctx, cuda_root)
        if root is None or root.major is None:
            raise UsageError("no CUDA version to build the mirror for",
                             "pass --cuda N (repeatable), e.g. --cuda 12 --cuda 13")
        cudas = [str(root.major)]
    for cuda in cudas:
        redist.parse_cuda(cuda)
    # this machine's builds by default: a Jetson's are linux-aarch64 where NVIDIA made one, else
    # linux-sbsa, so its mirror holds both
    platforms = platforms or list(host_choice(ctx).platforms)
    for platform in platforms:
        if platform not in redist.PLATFORMS:
            raise UsageError(f"--platform {platform!r} is not one of NVIDIA's",
                             f"give one of {', '.join(redist.PLATFORMS)}")
    machine_tags = machine_wheel_tags(ctx)
    sources = []
    for platform in platforms:  # every one through the command's one HTTP client
        source = choose_source(ctx, from_=from_ or (None if index_url else NVIDIA),
                               index_url=index_url, headers=headers, cache_dir=None,
                               wheel_tags=wheel_tags_for(platform, machine_tags))
        sources.append(PlatformSource(platform, source,
                                      fetcher(result, ctx, headers, None, source)))
    built = Built(directory)
    try:
        build(MirrorRequest(directory, requests, tuple(cudas), tuple(sources), which(ctx, "xz"),
                            ctx.env, ctx.lock_timeout), built, ctx.status)
    finally:
        result.lines += built.lines
        if built.started:  # what was done, even when a later step failed
            result.add("mirror", built.to_dict())
        result.changed = built.changed
