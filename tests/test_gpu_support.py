"""The cuDNN/GPU/driver tables and the fit between a cuDNN build, the GPUs and the driver."""
import pytest
from packaging.version import Version

from cudnn_setup.facts import gpu_support as G


def test_every_row_is_sourced_and_ordered():
    for row in G.CUDNN_SUPPORT:
        assert row.source and ("http" in row.source)
        assert row.last is None or Version(row.first) <= Version(row.last)
        assert row.max_cc is None or Version(row.min_cc) < Version(row.max_cc)
    for toolkit, driver in G.TOOLKIT_DRIVER.items():
        Version(toolkit), Version(driver)


def test_verified_rows_do_not_overlap_per_cuda_major():
    for major in {m for r in G.CUDNN_SUPPORT for m in r.cuda}:
        rows = sorted((r for r in G.CUDNN_SUPPORT if r.verified and major in r.cuda),
                      key=lambda r: Version(r.first))
        for a, b in zip(rows, rows[1:]):
            assert a.last is not None and Version(a.last) < Version(b.first), (a, b)


@pytest.mark.parametrize("version,cuda,expected", [
    ("7.6.5", 10, "3.0"), ("8.2.1", 11, "3.5"), ("8.2.1", 10, "3.0"), ("8.9.6", 11, "5.0"),
    ("8.9.7", 12, "5.0"), ("9.1.0", 12, "5.0"), ("9.10.2", 11, "5.0"), ("9.17.0", 12, "7.5"),
    ("9.17.0", 13, "7.5"), ("9.27.0", 12, "7.5"),
])
def test_oldest_supported_compute_capability(version, cuda, expected):
    assert G.lowest_supported_cc(version, cuda) == expected


@pytest.mark.parametrize("version,cc,floor", [
    ("7.6.5", "2.0", "3.0"), ("7.6.5", "3.5", None), ("8.2.1", "3.0", None),
    ("9.3.0", "3.7", "5.0"), ("9.3.0", "9.0", None), ("9.17.0", "6.1", "7.5"),
    ("9.12.0", "6.1", None),  # the CUDA 12 row for 9.11-9.16 is inferred: no refusal from it
    ("not a version", "2.0", None),
])
def test_compute_capability_below_every_build_of_a_release(version, cc, floor):
    assert G.below_every_build(version, cc) == floor


@pytest.mark.parametrize("value,cuda", [(13000, "13.0"), (12040, "12.4"), (11080, "11.8"),
                                        (10020, "10.2"), (9000, "9.0")])
def test_driver_integer_to_cuda(value, cuda):
    assert G.cuda_of_driver(value) == cuda


def test_kepler_with_cudnn_9_is_refused_and_told_what_fits():
    [m] = G.fits("9.1.0", "12", [("Tesla K80", "3.7")], driver_cuda=12040)
    assert (m.kind, m.severity) == ("gpu", "fail")
    assert "needs compute capability 5.0" in m.reason
    assert m.hint == "cuDNN 8.5.0 for CUDA 11 supports compute capability 3.7"


def test_maxwell_with_current_cudnn_gets_the_last_release_that_had_it():
    [m] = G.fits("9.17.0", "12", ["5.2"], driver_cuda=12080)
    assert m.severity == "fail" and m.hint == "cuDNN 9.10.2 for CUDA 12 supports compute capability 5.2"


def test_fermi_has_no_release_at_all():
    [m] = G.fits("7.6.5", "10.2", [("Tesla C2075", "2.0")], driver_cuda=None)
    assert "no cuDNN release supports compute capability 2.0" in m.hint


def test_unverified_row_only_warns():
    [m] = G.fits("9.12.0", "12", ["6.1"], driver_cuda=12080)
    assert m.severity == "warn"


def test_gpu_newer_than_the_release_lists_is_a_warning_naming_a_newer_release():
    [m] = G.fits("8.9.7", "12", [("NVIDIA B200", "10.0")], driver_cuda=12080)
    assert (m.severity, m.hint) == ("warn", "cuDNN 9.0.0 for CUDA 12 or newer lists it")


def test_a_fitting_machine_has_no_misfits():
    assert G.fits("9.1.0", "12", [("NVIDIA H200", "9.0")] * 8, driver_cuda=13000,
                  driver_version="580.65.06") == []
    assert G.fits("9.1.0", "12", [], driver_cuda=None) == []  # no GPU, no driver: nothing to say


def test_driver_too_old_for_the_cuda_major():
    [m] = G.fits("9.17.0", "13", ["9.0"], driver_cuda=12040)
    assert (m.kind, m.severity) == ("driver", "fail")
    assert "supports CUDA 12.4 at most" in m.reason
    assert m.hint == "install NVIDIA driver 580.65.06 or newer, or use the current cuDNN 9 for CUDA 12"


def test_minor_version_compatibility_from_cuda_11_but_not_before():
    assert G.driver_fits("12", 12000)[0]  # a 12.0 driver runs any 12.x build
    assert not G.driver_fits("12", 12000, "520.61.05")[0]  # but not older than 525.60.13
    assert not G.driver_fits("10.2", 10010)[0]  # 10.x builds need that exact minor
    assert G.driver_fits("10.2", 10020, "440.33")[0]


def test_gpus_from_probe_output_skips_garbage():
    got = G.gpus_from([{"name": "NVIDIA H200", "compute_capability": "9.0"},
                       {"name": "x", "compute_capability": "nine"}, {"name": 3}])
    assert got == [("NVIDIA H200", "9.0")]


# --- what each run-time dependency is for, and its fix ------------------------------------------

from cudnn_setup.facts import dependencies as D  # noqa: E402


@pytest.mark.parametrize("name,stem,rating", [
    ("libz.so.1", "libz.so", "fail"), ("libcublasLt.so.12", "libcublasLt.so", "fail"),
    ("libnvrtc.so.12", "libnvrtc.so", "warn"), ("libnvrtc-builtins.so.12.4", "libnvrtc-builtins.so", "warn"),
    ("libcask_profile_interface.so", "libcask_profile_interface.so", "skip"),
    ("libcudnn_ops.so.9", "libcudnn", "fail"),
])
def test_known_dependencies_are_classified(name, stem, rating):
    assert D.classify(name).stem == stem
    assert D.severity(name, driver_present=True) == rating


def test_libcuda_missing_is_a_skip_without_a_driver_and_unknown_is_a_warning():
    assert D.severity("libcuda.so.1", driver_present=False) == "skip"
    assert D.severity("libcuda.so.1", driver_present=True) == "fail"
    assert D.classify("libsomething-new.so.3") is None
    assert D.severity("libsomething-new.so.3", driver_present=True) == "warn"


@pytest.mark.parametrize("distro_id,like,manager", [
    ("ubuntu", "debian", "apt"), ("debian", "", "apt"), ("rocky", "rhel centos fedora", "dnf"),
    ("fedora", "", "dnf"), ("opensuse-leap", "suse opensuse", "zypper"), ("sles", "", "zypper"),
    ("arch", "", None),
])
def test_package_manager_by_distro(distro_id, like, manager):
    assert D.package_manager(distro_id, like) == manager


def test_fixes_come_in_the_order_a_user_tries_them(tmp_path):
    """A copy on the machine, the wheel, the distribution's package where the repositories have
    it (the answer injected here; tests/test_deps_check.py asks a package manager for real),
    else NVIDIA's repository, said as such."""
    (tmp_path / "libcublasLt.so.12").write_bytes(b"")
    asked = []

    def nothing(manager, names):
        asked.append((manager, list(names)))
        return {n: False for n in names}

    fixes = D.fixes("libcublasLt.so.12", "12.4", "apt", available=nothing,
                    found_in=D.find_elsewhere(["libcublasLt.so.12"], [tmp_path, tmp_path / "none"]))
    assert [f.how for f in fixes] == ["directory", "wheel", "repository"]
    assert str(tmp_path) in fixes[0].text
    assert fixes[1].text == "pip install nvidia-cublas-cu12"
    assert fixes[2].text.endswith("then apt-get install libcublas-12-4")
    assert "NVIDIA's CUDA repository" in fixes[2].detail
    assert asked == [("apt", ["libcublaslt12", "libcublas-12-4"])]
    debian = D.fixes("libcublasLt.so.12", "12.4", "apt",
                     available=lambda m, names: {n: n == "libcublaslt12" for n in names})
    assert [f.text for f in debian] == ["pip install nvidia-cublas-cu12",
                                        "apt-get install libcublaslt12"]
    there = D.fixes("libnvrtc.so.13", "13.0", "dnf", available=lambda m, n: {x: True for x in n})
    assert there[-1].text == "dnf install cuda-nvrtc-13-0"
    assert D.fixes("libnvrtc.so.13", "13.0", None)[-1].text == "pip install nvidia-cuda-nvrtc"
    # a CUDA minor that is not known cannot be asked about: NVIDIA's name with a placeholder
    assert D.fixes("libcublasLt.so.11", "11", "zypper",
                   available=nothing)[-1].text.endswith("zypper install libcublas-11-<minor>")
    assert [f.text for f in D.fixes("libz.so.1", None, "apt",
                                    available=lambda m, n: {x: True for x in n})] == \
        ["apt-get install zlib1g"]
    # a repository without zlib: nothing this machine could install is offered
    assert D.fixes("libz.so.1", None, "apt", available=nothing) == []
    assert D.fixes("libunknown.so.1", "12", "apt") == []
