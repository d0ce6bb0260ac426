"""The names of libraries, in the one place they are taken apart (facts/cudnn.py)."""
from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudnn_setup.facts import cudnn as gen


@pytest.mark.parametrize("name, stem, dev_stem, version", [
    ("libcudnn.so.9", "libcudnn", "libcudnn", "9"),
    ("libcudnn.so.9.14.0", "libcudnn", "libcudnn", "9.14.0"),
    ("libcudnn_ops.so.9", "libcudnn_ops", "libcudnn_ops", "9"),
    ("libcudnn_engines_precompiled.so.9.1.0", "libcudnn_engines_precompiled",
     "libcudnn_engines_precompiled", "9.1.0"),
    ("libcudnn_ops_infer.so.8.9.7", "libcudnn_ops_infer", "libcudnn_ops_infer", "8.9.7"),
    ("libcudnn.so", None, "libcudnn", None),  # the development link: only when asked for
    ("libcudnn_adv.so", None, "libcudnn_adv", None),
    ("libcudnn.so.9.bak", None, None, None),
    ("libcudnn.so.", None, None, None),
    ("libcudnn_static.a", None, None, None),
    ("libcublasLt.so.12", None, None, None),  # not cuDNN's
    ("libCUDNN.so.9", None, None, None),
    ("/usr/lib/libcudnn.so.9", None, None, None),  # a base name, never a path
    ("libcudnn.so.9\n", None, None, None),
])
def test_library_stem_and_version(name, stem, dev_stem, version):
    assert gen.library_stem(name) == stem
    assert gen.library_stem(name, unversioned=True) == dev_stem
    assert gen.library_file_version(name) == version


@pytest.mark.parametrize("name, base", [
    ("libcublasLt.so.12", "libcublasLt.so"),
    ("libcudnn_ops.so.9.1.0", "libcudnn_ops.so"),
    ("libcudnn_ops.so", "libcudnn_ops.so"),
    ("libnvrtc.so.%d", "libnvrtc.so"),
    ("libz.so.1", "libz.so"),
    ("libcuda.so.1", "libcuda.so"),
    ("ld-linux-x86-64.so.2", "ld-linux-x86-64.so"),
    ("libfoo", "libfoo"),  # no ".so": as it is
    ("", ""),
])
def test_so_base(name, base):
    assert gen.so_base(name) == base


@pytest.mark.parametrize("name, parsed", [
    ("cudnn-linux-x86_64-9.14.0.64_cuda13-archive.tar.xz", True),
    ("cudnn-10.2-linux-x64-v7.6.5.32.tgz", True),
    ("cudnn-linux-x86_64-9.14.0.64_cuda13-archive.tar.xz\n", False),  # "$" took these
    ("cudnn-10.2-linux-x64-v7.6.5.32.tgz\n", False),
    ("cudnn-linux-x86_64-9.14.0.64_cuda13-archive.tar.xz.part", False),
])
def test_archive_names_end_where_they_end(name, parsed):
    assert (gen.parse_archive_name(name) is not None) is parsed


NAMES = st.from_regex(r"\A(/[a-z]{1,3}){0,2}/?lib(cudnn|cudnn_|CUDNN|cublas)[A-Za-z0-9_]{0,8}"
                      r"(\.so(\.[0-9]{1,2}){0,3}|\.a|\.so\.|\.so\.9\.bak)?\n?\Z")


def _one_stem_rule(name):
    """library_stem is the rule the composition of a release used (any name up to .so that
    starts with libcudnn, versioned or not, the base name of a path) and, for the names a
    library file has, the rule installed files were read by."""
    m = gen.SHARED_NAME.match(name.rsplit("/", 1)[-1])
    composition = m["stem"] if m and m["stem"].startswith("libcudnn") else None
    assert gen.library_stem(name, unversioned=True, path=True) == composition
    if "/" not in name:  # a versioned file name whose stem is lowercase: as files were read
        stem, file = gen.library_stem(name), gen.LIBRARY_NAME.match(name)
        if stem is None or re.fullmatch(r"libcudnn[a-z_]*", stem):
            assert stem == (file["stem"] if file else None)


# A plain run takes 100 names; CI (`slow`) 400.
test_one_stem_rule_for_files_and_the_names_libraries_name = \
    settings(max_examples=100, deadline=None)(given(NAMES)(_one_stem_rule))
test_one_stem_rule_for_many_names = \
    pytest.mark.slow(settings(max_examples=400, deadline=None)(given(NAMES)(_one_stem_rule)))
