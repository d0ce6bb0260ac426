"""The names of libraries, in the one place they are taken apart (facts/cudnn.py)."""
from __future__ import annotations

import pytest

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
