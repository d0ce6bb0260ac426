"""Every pattern run over untrusted text finishes in time linear in it: a pasted Theano line, a
header, a child's stderr, the loader cache listing, an nvcc wrapper. Each input below took
seconds to hours with the patterns these replaced."""
import time

import pytest

from cudnn_setup import startup_line
from cudnn_setup.checks import load_check
from cudnn_setup.facts import cuda, cudnn
from cudnn_setup.facts.ldresolve import ldconfig

LIMIT_S = 2.0  # each case runs in milliseconds; this only catches super-linear patterns


def timed(fn, *args):
    start = time.perf_counter()
    out = fn(*args)
    took = time.perf_counter() - start
    assert took < LIMIT_S, f"{fn.__name__} took {took:.1f} s"
    return out


@pytest.mark.parametrize("line", [
    "Using gpu device 0:" + " " * 6000,
    "Using gpu device 0: " + " " * 6000 + "x",
    "Using gpu device 0: Tesla" + " " * 6000 + "(" + " " * 6000,
    "Mapped name dev0 to device cuda0:" + " " * 6000 + "x",
    "CNMeM is enabled with initial size: " + "9" * 6000,
    ("Using gpu device 0: " * 3000),
])
def test_startup_lines_of_thousands_of_blanks(line):
    parts = timed(startup_line.explain, line)
    assert parts and all("meaning" in p for p in parts)


def test_a_real_startup_line_still_parses():
    parts = {p["part"]: p for p in startup_line.explain(
        "Using gpu device 0: Tesla C2075 (CNMeM is enabled with initial size: 95.0% of memory, "
        "cuDNN not available)")}
    assert "Tesla C2075" in parts and parts["Tesla C2075"]["compute_capability"] == "2.0"
    assert "CNMeM is enabled with initial size: 95.0% of memory" in parts


def test_a_header_of_blank_lines():
    text = "\n" * 200_000 + "#define CUDNN_MAJOR 9\n#define CUDNN_MINOR 1\n#define CUDNN_PATCHLEVEL 0\n"
    assert timed(cudnn.header_version, text) == (9, 1, 0)
    assert timed(cudnn.header_version, " \n" * 200_000) is None


def test_child_stderr_that_repeats_the_loaders_phrase():
    noise = "Could not load library " * 40_000 + "lib" + "a." * 50_000
    assert timed(load_check.missing_library, noise) is None
    assert load_check.missing_library("Could not load library libcudnn_ops_infer.so.8. Error: x") == \
        "libcudnn_ops_infer.so.8"
    assert load_check.missing_library("x: libfoo.so.1: cannot open shared object file: No such file") is None
    assert load_check.missing_library("cannot open shared object file: libz.so.1") == "libz.so.1"


def test_a_cache_listing_with_long_blank_runs():
    line = "\tlibz.so.1 (libc6,x86-64) => /x" + " " * 20_000 + "y" + " " * 20_000 + "\n"
    entries = timed(ldconfig.parse_ldconfig_p, line * 5)
    assert entries and entries[0].path == "/x" + " " * 20_000 + "y"


def test_an_nvcc_wrapper_of_blank_lines(tmp_path):
    wrapper = tmp_path / "bin" / "nvcc"
    wrapper.parent.mkdir()
    wrapper.write_text("#!/bin/sh\n" + "\n" * 4000 + "\t" * 40)
    timed(cuda.nvcc_toolkit, wrapper)
