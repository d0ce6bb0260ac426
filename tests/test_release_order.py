"""The order in which releases are chosen is made by one function, candidates.ranked: select
answers its first entry (or refuses when it has none) and resolve walks it on a mirror.
"""
import pytest

from cudnn_setup.errors import SetupError
from cudnn_setup.fetch import known_releases, resolve
from cudnn_setup.fetch.candidates import Release, parse_request, ranked, select


def _release(version, variant, platform, name=None, flavour="cudnn"):
    name = name or f"cudnn-{platform}-{version}_{variant}-archive.tar.xz"
    return Release(version, variant, platform, name, f"cudnn/{platform}/{name}", "0" * 64,
                   flavour=flavour)


def test_resolve_walks_the_same_order_select_takes_the_first_of():
    assert resolve.ranked is ranked


def test_ranked_orders_by_version_then_the_platforms_given_then_the_variant_for_this_cuda():
    table = [
        _release("9.1.0.70", "cuda11", "linux-sbsa"),
        _release("9.1.0.70", "cuda12", "linux-aarch64"),
        _release("9.1.0.70", "cuda12", "linux-sbsa"),
        _release("9.2.0.82", "cuda12", "linux-sbsa"),
        _release("9.2.0.82", "cuda12", "linux-x86_64"),  # another platform: never chosen here
        _release("9.3.0.75", "cuda12", "linux-aarch64", flavour="cudnn_jit"),  # not installable
        _release("9.0.0.312", "cuda12", "linux-aarch64"),
        _release("10.0.0.1", "cuda12", "linux-aarch64"),  # another major than asked
    ]
    order = ranked(parse_request("9"), table, ("linux-aarch64", "linux-sbsa"), "12.4")
    assert [(r.version, r.platform) for r in order] == [
        ("9.2.0.82", "linux-sbsa"), ("9.1.0.70", "linux-aarch64"), ("9.1.0.70", "linux-sbsa"),
        ("9.0.0.312", "linux-aarch64")]
    assert select(parse_request("9"), table, ("linux-aarch64", "linux-sbsa"), "12.4") == order[0]


def test_within_one_version_and_platform_the_variant_that_fits_this_cuda_best_comes_first():
    # before CUDA 11 a build serves one minor; from 11 on the root's exact minor, else a
    # major-only build, else the newest lower minor, else the oldest higher one
    table = [_release("8.1.1.33", v, "linux-x86_64")
             for v in ("cuda11.0", "cuda11.2", "cuda11", "cuda11.5", "cuda11.3")]
    got = [r.cuda_variant for r in ranked(parse_request("8.1"), table, "linux-x86_64", "11.3")]
    assert got == ["cuda11.3", "cuda11", "cuda11.2", "cuda11.0", "cuda11.5"]
    got = [r.cuda_variant for r in ranked(parse_request("8.1"), table, "linux-x86_64", "11.4")]
    assert got == ["cuda11", "cuda11.3", "cuda11.2", "cuda11.0", "cuda11.5"]


def test_equal_versions_written_differently_keep_the_order_they_came_in():
    first = _release("9.1", "cuda12", "linux-x86_64", name="a.tar.xz")
    second = _release("9.1.0", "cuda12", "linux-x86_64", name="b.tar.xz")
    newer = _release("9.1.1", "cuda12", "linux-x86_64")
    assert ranked(parse_request("9.1"), [first, second, newer], "linux-x86_64", "12.0") == \
        [newer, first, second]
    assert ranked(parse_request("9.1.0"), [second, first], "linux-x86_64", "12.0") == \
        [second, first]
    assert select(parse_request("9.1.0"), [second, first], "linux-x86_64", "12.0") == second


def _requests(table):
    """Every request a user could make of the table: each major, major.minor and version."""
    out = set()
    for r in table:
        parts = r.version.split(".")
        out |= {".".join(parts[:n]) for n in (1, 2, 4)}
    return sorted(out)


# sbsa and ppc64le take the path x86_64 takes, with their own rows: the exhaustive sweep (`slow`)
PLATFORMS = ["linux-x86_64", ("linux-aarch64", "linux-sbsa"),
             pytest.param("linux-sbsa", marks=pytest.mark.slow),
             pytest.param("linux-ppc64le", marks=pytest.mark.slow)]
CUDAS = ["9.0", "10.1", "10.2", "11.0", "11.4", "11.8", "12.2", "12.9", "13.0"]


@pytest.mark.parametrize("platform", PLATFORMS, ids=str)
def test_select_is_rankeds_first_for_every_request_of_the_known_table(platform):
    table = known_releases.releases()
    chosen = 0
    for text in _requests(table):
        request = parse_request(text)
        for cuda in CUDAS:
            order = ranked(request, table, platform, cuda)
            try:
                got = select(request, table, platform, cuda)
            except SetupError:  # UnknownVersion, NoVariant
                assert order == [], (text, cuda)
                continue
            assert got == order[0], (text, cuda)
            chosen += 1
    assert chosen > 50  # the comparison was made, not skipped by refusals
