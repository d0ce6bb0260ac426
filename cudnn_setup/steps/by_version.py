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

Where a version comes from (`choose_source`): `--from pypi` (or `--index-url`) the wheels on
the package index pip would use (sources/pypi.py); `--from nvidia` NVIDIA's tree; `--from
MIRROR` or `--mirror MIRROR` that mirror; else $CUDNN_SETUP_MIRROR, else the user's then the
system's config file (see cudnn_setup.settings), else NVIDIA's public tree. Every SOURCE ends
as a `sources.base.Obtained`: the local file, the checksum it must have as it is read, and its
provenance.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from msgspec import Struct

from cudnn_setup.steps.context import Context
from cudnn_setup.errors import UsageError
from cudnn_setup.archive.wheel import requirements as wheel_requirements
from cudnn_setup.facts import dependencies as D
from cudnn_setup.facts.cuda import CudaRoot
from cudnn_setup.facts.cudnn import parse_archive_name
from cudnn_setup.facts.host import host_machine, tegra_evidence, wheel_platform_tags
from cudnn_setup.fetch import redist
from cudnn_setup.fetch.candidates import UnknownVersion, is_version_request, parse_request
from cudnn_setup.fetch.checksums import Expected
from cudnn_setup.report import Result
from cudnn_setup.settings import mirror_setting, user_config_path
from cudnn_setup.text import escape
from cudnn_setup.urls import redact
from cudnn_setup.sources.base import NVIDIA, PYPI, Fetch, Obtained, Offer, Source
from cudnn_setup.sources.local import LocalArchive

# What reads a tree or an index or downloads (requests and what it imports, about 70 ms) is
# imported by the functions that do: an install of a local archive needs none of it.
if TYPE_CHECKING:
    from cudnn_setup.fetch.arriving import Arriving
    from cudnn_setup.fetch.downloader import Fetched
    from cudnn_setup.fetch.resolve import Tree
    from cudnn_setup.sources.tree import RedistTree

PATH, URL, FILE_URL, VERSION, NAME = "path", "url", "file-url", "version", "name"


def classify(source: str, prerelease: bool = False) -> str:
    """What an install SOURCE is (see the module's docstring for the order); with `prerelease`
    (a PyPI index) a full version with a pre-release suffix is a version too."""
    if Path(source).is_file():
        return PATH
    scheme = source.split("://", 1)[0].lower() if "://" in source else ""
    if scheme in ("http", "https"):
        return URL
    if scheme == "file":
        return FILE_URL
    if is_version_request(source, prerelease):
        return VERSION
    if "/" not in source and parse_archive_name(source) is not None:
        return NAME
    return PATH


def tree_for(ctx: Context, mirror: str | None, headers: list[str] | None) -> Tree:
    """The redist tree the settings name (NVIDIA's when none does), with a reader for it."""
    source = _tree_source(ctx, mirror, headers)
    return source.tree


def _tree_source(ctx: Context, mirror: str | None, headers: list[str] | None,
                 option: str = "--mirror") -> RedistTree:
    from cudnn_setup.steps.fetching import client_for
    from cudnn_setup.fetch.remote import Reader
    from cudnn_setup.sources.mirror import Mirror
    from cudnn_setup.sources.nvidia import NvidiaTree

    user_config = ctx.user_config or user_config_path(ctx.env, ctx.home)
    setting = mirror_setting(mirror, ctx.env, user_config, ctx.system_config)
    if setting is None:
        return NvidiaTree(Reader(client=client_for(ctx, headers), mirror=False))
    on_command_line = setting.origin == "--mirror"
    origin = option if on_command_line else setting.origin  # --from MIRROR says --from
    if not on_command_line:  # a mirror the user did not name here: said, and by whom
        ctx.status(f"using the mirror {escape(redact(setting.value))}, set by {escape(origin)}")
    reader = Reader(client=client_for(ctx, headers), set_by=None if on_command_line else origin)
    try:
        # a relative path is taken from the shell's directory on the command line only
        return Mirror(setting.value, reader, ctx.cwd if on_command_line else None)
    except UsageError as exc:
        raise UsageError(f"{exc.message} (set by {origin})", exc.hint) from None


def choose_source(ctx: Context, *, from_: str | None = None, mirror: str | None = None,
                  index_url: str | None = None, headers: list[str] | None = None,
                  cache_dir: Path | None = None, wheel_tags: list[str] | None = None) -> Source:
    """The source of releases that `--from`, `--mirror` and `--index-url` name (a PyPI
    index's wheels must carry one of `wheel_tags`: this machine's by default)."""
    from cudnn_setup.steps.fetching import client_for, downloader_for
    from cudnn_setup.fetch.remote import Reader
    from cudnn_setup.sources.nvidia import NvidiaTree
    from cudnn_setup.sources.pipconf import index_config
    from cudnn_setup.sources.pypi import PypiIndex, default_cert

    if from_ is not None and not from_.strip():
        raise UsageError("--from is empty", "give nvidia, pypi, or a mirror's URL or directory")
    if index_url is not None and from_ not in (None, PYPI):
        raise UsageError(f"--index-url is a PyPI index, but --from says {from_}",
                         "drop one of them")
    if mirror is not None and from_ is not None and from_ != mirror:
        raise UsageError("--mirror and --from name two sources", "give one of them")
    if from_ == PYPI or index_url is not None:
        config = index_config(ctx.env, ctx.home, index_url, ctx.pip_system_dirs)
        env = default_cert(config, dict(ctx.env))
        return PypiIndex(config, downloader_for(ctx, headers, cache_dir, env=env),
                         wheel_tags if wheel_tags is not None else machine_wheel_tags(ctx))
    if from_ == NVIDIA:
        return NvidiaTree(Reader(client=client_for(ctx, headers), mirror=False))
    return _tree_source(ctx, from_ or mirror, headers, "--from" if from_ else "--mirror")


def machine_wheel_tags(ctx: Context) -> list[str]:
    return list(ctx.wheel_tags) if ctx.wheel_tags is not None else wheel_platform_tags()


def host_choice(ctx: Context, given: str | None = None) -> redist.PlatformChoice:
    """The platforms whose builds go on this machine, best first, and why: `given` (--platform)
    alone, else the machine's, a Jetson's linux-aarch64 builds before sbsa ones (the markers
    are read below ctx.host_root)."""
    machine = ctx.machine or host_machine()
    tegra = None if given is not None else tegra_evidence(ctx.host_root)
    return redist.platform_choice(machine, tegra, given)


def target(root: CudaRoot | None, cuda: str | None,
           machine: str | None = None) -> tuple[str, str | None]:
    """NVIDIA's platform key for this machine, and the CUDA version builds must fit: `--cuda`,
    else the root's (None when neither is known)."""
    platform = redist.platform_key(machine or host_machine())
    if cuda is not None:
        redist.parse_cuda(cuda)  # a usage error when it is not a version
        return platform, cuda.strip()
    return platform, root.version if root is not None else None


def fetcher(result: Result, ctx: Context, headers: list[str] | None, cache_dir: Path | None,
            source: Source | None = None, output_dir: Path | None = None,
            record: bool = True, arriving: Arriving | None = None) -> Fetch:
    """The Fetch a source is handed: the Downloader into the cache or `output_dir` (a PyPI
    source's own, which carries pip's CA bundle), its outcome rendered into `result` (unless
    not `record`: a dependency's download is said in its own key). A tree's archive is fetched
    through the client that read its manifests: one waiting budget. `arriving` hears the
    bytes as they are written (steps/overlap.py)."""
    from cudnn_setup.steps.fetching import fetch
    from cudnn_setup.fetch.remote import Reader
    from cudnn_setup.sources.tree import RedistTree

    own = getattr(source, "downloader", None)
    client = None
    if isinstance(source, RedistTree) and isinstance(source.tree.reader, Reader):
        client = source.tree.reader.client

    def run(url: str, expected) -> Fetched:
        return fetch(result, ctx, url, None, headers, cache_dir, expected=expected,
                     downloader=own, output_dir=output_dir, client=client, record=record,
                     arriving=arriving)
    return run


def asking(ctx: Context, source: Source, what: str) -> None:
    """Said before a source is asked which releases it has: a round trip at least, and a
    host that does not answer is waited for."""
    ctx.status(f"asking {source.where} for {what}")


def pick_version(source: Source, text: str, root: CudaRoot | None, cuda: str | None,
                 here: redist.PlatformChoice | None = None) -> Offer:
    """The offer a version request means on this machine and root, from `source`. `here`
    (host_choice) gives the platforms, best first: a redist tree takes a Jetson's
    linux-aarch64 build where the release has one, else its sbsa build; a PyPI index's wheels
    carry this machine's own platform tags whatever the platform's name."""
    from cudnn_setup.sources.tree import RedistTree

    platform, cuda_version = target(root, cuda, here.primary if here is not None else None)
    if cuda_version is None:
        where = f"{root.path}" if root is not None else "this machine (no CUDA root found)"
        raise UsageError(f"cannot tell which CUDA {where} is, so not which build of "
                         f"cuDNN {text} to fetch", "pass --cuda N (e.g. --cuda 12)")
    platforms = here.platforms if here is not None and isinstance(source, RedistTree) \
        else platform
    return source.pick(parse_request(text, prerelease=source.kind == PYPI), platforms,
                       cuda_version)


def _installable_or_refuse(offer: Offer) -> None:
    """A name the table lists for Windows, or for the JIT library alone, is refused before a
    byte is fetched: neither is a cuDNN this tool can place in a Linux CUDA root."""
    flavour = offer.details.get("flavour", "cudnn")
    if offer.platform not in redist.LINUX_PLATFORMS or flavour != "cudnn":
        what = f"the {flavour} archive" if flavour != "cudnn" else "NVIDIA's cuDNN archive"
        raise redist.NoVariant(
            f"{offer.file_name} is {what} for {offer.platform}: install places NVIDIA's Linux "
            "cuDNN archives; nothing was fetched",
            "name the cudnn-linux-<arch>-… archive, or give a version such as 9.1")


def describe_offer(result: Result, offer: Offer, source: Source, why: str) -> None:
    result.add("release", offer.to_dict(redact(offer.url)))
    vouch = offer.checksum_from or "nothing (--sha256 given)"
    repack = (f"; repacked by cudnn-setup from the wheel {offer.repacked_from.get('wheel')} "
              f"(sha256 {offer.repacked_from.get('sha256')})" if offer.repacked_from else "")
    result.lines.append(f"cuDNN {offer.version} ({offer.cuda_variant}, {offer.platform}), {why}: "
                        f"{offer.file_name} from {source.where}; sha256 from {vouch}{repack}")


class Release(Struct, frozen=True):
    """A published release SOURCE stands for, chosen and not fetched: where from, and what its
    archive must hash to, vouched for before a byte is fetched (the source's published sha256,
    else the user's --sha256)."""

    source: Source
    offer: Offer
    vouched: Expected | None
    given: str | None  # --sha256, lowercased

    @property
    def known(self) -> Expected | None:
        """The checksum that names the release for sure, by which the archive installed is
        recognised without fetching it: None when --sha256 disagrees with the published one
        (then it is fetched, and the mismatch reported as always)."""
        if self.vouched is None or self.given not in (None, self.vouched.digest):
            return None
        return self.vouched


def archive_name(source: str, release: Release | None) -> str | None:
    """The name of the archive SOURCE will download (a release's, or a URL's), before it is
    fetched; None when nothing is downloaded (a path)."""
    if release is not None:
        return release.offer.file_name
    if classify(source) == URL:
        from cudnn_setup.fetch.downloader import file_name

        return file_name(source)
    return None


def release_for(result: Result, ctx: Context, source: str, root: CudaRoot, *,
                cuda: str | None, mirror: str | None, sha256: str | None,
                headers: list[str] | None, cache_dir: Path | None,
                from_: str | None = None, index_url: str | None = None) -> Release | None:
    """For `install`: the release SOURCE names (a version, an archive's bare name), chosen and
    said, nothing fetched; None when SOURCE is an archive itself (a path or a URL)."""
    choosing = from_ is not None or index_url is not None
    kind = classify(source, prerelease=from_ == PYPI or index_url is not None)
    if kind in (PATH, URL, FILE_URL):
        if cuda is not None or mirror is not None or choosing:
            raise UsageError(f"--cuda, --mirror, --from and --index-url choose among published "
                             f"releases; {redact(source)} is an archive already",
                             "drop them, or give a version such as 9.1")
        return None
    from cudnn_setup.sources.tree import RedistTree

    chosen = choose_source(ctx, from_=from_, mirror=mirror, index_url=index_url,
                           headers=headers, cache_dir=cache_dir)
    if kind == VERSION:
        here = host_choice(ctx)
        asking(ctx, chosen, f"cuDNN {source.strip()}")
        offer = pick_version(chosen, source, root, cuda, here)
        _, cuda_version = target(root, cuda, here.primary)
        why = f"newest {source.strip()} for CUDA {cuda_version} on {offer.platform}"
        if len(here.platforms) > 1:
            why += f" ({here.why})"
    else:
        asking(ctx, chosen, redact(source))
        offer = chosen.by_name(source) if isinstance(chosen, RedistTree) else None
        if offer is None:
            raise UsageError(f"{redact(source)} is not a file here, and neither the known table "
                             f"nor {chosen.where} lists an archive of that name",
                             "give the archive's path, its URL, or a version such as 9.1",
                             code="unknown-archive")
        _installable_or_refuse(offer)
        why = "by its name"
    describe_offer(result, offer, chosen, why)
    given = sha256.lower() if sha256 else None
    vouched = Expected("sha256", offer.sha256, offer.checksum_from or chosen.where) \
        if offer.sha256 else Expected("sha256", given, "--sha256") if given else None
    return Release(chosen, offer, vouched, given)


def obtain(result: Result, ctx: Context, source: str, release: Release | None, *,
           sha256: str | None, headers: list[str] | None, cache_dir: Path | None,
           arriving: Arriving | None = None) -> Obtained:
    """SOURCE as the local file to install, the checksum it must have, and where both came
    from: `release` (release_for) fetched into the cache, else the archive SOURCE names,
    downloaded first when it is a URL (`arriving` hears its bytes as they are written)."""
    if release is not None:
        return release.source.obtain(release.offer, fetcher(
            result, ctx, headers, cache_dir, release.source, arriving=arriving), sha256)
    if classify(source) == URL:
        from cudnn_setup.sources.url import UrlArchive

        return UrlArchive(source).obtain(None, fetcher(result, ctx, headers, cache_dir,
                                                       arriving=arriving), sha256)
    return LocalArchive(source).take(sha256)


def dependency_wheels(result: Result, ctx: Context, obtained: Obtained, root: CudaRoot, *,
                      headers: list[str] | None, cache_dir: Path | None,
                      from_: str | None = None, index_url: str | None = None) -> list[Obtained]:
    """For `install --with-deps`: the wheels a PyPI cuDNN wheel declares (Requires-Dist) for
    libraries cuDNN loads (facts/dependencies.py: cuBLAS, NVRTC) that the root's lib dir lacks,
    each from the same index and checked against its published sha256."""
    if obtained.provenance.source != PYPI or obtained.provenance.format != "wheel":
        raise UsageError("--with-deps places the libraries a PyPI wheel declares",
                         "install a version with --from pypi, or drop --with-deps")
    source = choose_source(ctx, from_=PYPI, index_url=index_url, headers=headers,
                           cache_dir=cache_dir)
    platform, _ = target(root, None)
    lib_dir = root.lib_dir()
    major = root.major or 0
    from packaging.utils import canonicalize_name  # with packaging.tags and logging: wheels only

    out: list[Obtained] = []
    requirements = wheel_requirements(obtained.path)
    nvrtc = next(n for n in D.NEEDS if n.stem == "libnvrtc.so")
    nvrtc_project = canonicalize_name(str(nvrtc.wheel).format(suffix=D.wheel_suffix(major)))
    added = None
    if major >= 11 and not any(canonicalize_name(r.name) == nvrtc_project for r in requirements):
        # cuDNN's runtime-compiled engines dlopen NVRTC, though NVIDIA's wheel declares only
        # cuBLAS (9.28.0.42's METADATA): placed all the same where the index has it, and said
        from packaging.requirements import Requirement
        added = Requirement(nvrtc_project)
        requirements.append(added)
        result.lines.append(f"note: the wheel does not declare {nvrtc_project}, but cuDNN's "
                            "runtime-compiled engines load NVRTC: it is added")
    for requirement in requirements:
        name = canonicalize_name(requirement.name)
        need = next((n for n in D.NEEDS if n.wheel and canonicalize_name(
            n.wheel.format(suffix=D.wheel_suffix(major))) == name), None)
        if need is None:
            result.lines.append(f"note: the wheel declares {requirement}, which holds no library "
                                "cuDNN loads: not placed")
            continue
        have = sorted(p.name for p in lib_dir.glob(need.stem + ".*"))
        if have:
            result.lines.append(f"note: {requirement}: the root has {need.component} already "
                                f"({', '.join(have[:3])}): not placed")
            continue
        try:
            offer = source.pick_dependency(requirement, platform, root.version)
        except UnknownVersion as exc:
            if requirement is not added:
                raise
            result.lines.append(f"note: {exc.message}: NVRTC not placed; runtime-compiled "
                                "engines stay unavailable")
            continue
        got = source.obtain(offer, fetcher(result, ctx, headers, cache_dir, source, record=False))
        result.lines.append(f"with {offer.file_name} ({need.component}) from {source.where}; "
                            f"sha256 from {got.provenance.checksum_from}"
                            + (f"; {offer.details['fit']}" if offer.details.get("fit") else ""))
        out.append(got)
    return out
