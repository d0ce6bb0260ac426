"""Properties over generated tar streams: nothing escapes the root, rejection changes nothing,
installs are idempotent and uninstall restores the original tree."""
import os
import shutil
import tarfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from conftest import tree_state
from cudnn_setup.placement import engine as inst
from cudnn_setup.facts.cuda import find_cuda_root
from cudnn_setup.errors import ArchiveRejected
from fixtures.generate import SPECS, Entry, compress, spec_entries, tar_bytes

BASE = "cudnn-10.0-linux-x64-v7.4.2.24.tgz"
PARTS = ["cuda", "include", "lib64", "..", ".", "", "cudnn.h", "libcudnn.so.7", "libcudnn.so",
         "libcudnn.so.7.4.2", "evil", "/etc", "/tmp", "cudnn_x.h", "libcudnn_extra.so.7.4.2"]
TYPES = [tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.FIFOTYPE,
         tarfile.CHRTYPE]

names = st.lists(st.sampled_from(PARTS), min_size=1, max_size=5).map("/".join)
extra_entries = st.lists(st.builds(
    Entry, name=names, data=st.binary(max_size=64), target=st.one_of(st.none(), names),
    mode=st.sampled_from([0o644, 0o755, 0o4755, 0o777, 0o600]), type=st.sampled_from(TYPES)),
    max_size=4)


@pytest.fixture(scope="module")
def base_entries(compiler):
    return spec_entries(SPECS[BASE], compiler)


@pytest.fixture(scope="module")
def template(tmp_path_factory, compiler):
    from fixtures.generate import make_cuda_root

    root = make_cuda_root(tmp_path_factory.mktemp("tpl") / "cuda", cc=compiler)
    (root / "include" / "cudnn.h").write_text("/* a manual cudnn.h the tool must keep */\n")
    return root


def _stream(entries, tmp: Path, compressed: bool) -> Path:
    path = tmp / ("a.tgz" if compressed else "a.tar")
    path.write_bytes(compress(tar_bytes(entries), path.name))
    return path


@example(extra=[], drop=set(), compressed=True, insert_at=0)  # accepted: the checks below run
def tar_stream(base_entries, template, tmp_path_factory, extra, drop, compressed, insert_at):
    tmp = tmp_path_factory.mktemp("p")
    entries = [e for i, e in enumerate(base_entries) if i not in drop]
    entries[insert_at:insert_at] = extra
    archive = _stream(entries, tmp, compressed)
    base = tmp / "base"
    shutil.copytree(template, base / "cuda", symlinks=True)
    (base / "outside").mkdir()
    (base / "outside" / "sentinel").write_text("keep")
    root_path = base / "cuda"
    root = find_cuda_root({}, root_path)
    original = tree_state(root_path)
    outside = tree_state(base / "outside")
    try:
        first = inst.install(inst.Request(archive, root))
    except ArchiveRejected:
        event("rejected")
        assert tree_state(root_path) == original
        assert tree_state(base / "outside") == outside
        return
    event("accepted")
    real_root = root_path.resolve()
    for entry in first.manifest["files"]:
        p = root_path / entry["path"]
        # a link is followed whether or not its target exists: a dangling one may not point out
        assert p.resolve().is_relative_to(real_root), (entry, p.is_symlink() and os.readlink(p))
        assert Path(entry["path"]).parts[0] in ("include", "lib64")
    assert tree_state(base / "outside") == outside
    installed = tree_state(root_path)
    second = inst.install(inst.Request(archive, root))
    assert not second.changed and tree_state(root_path) == installed
    inst.uninstall(root)
    assert tree_state(root_path) == original


def _streams(examples: int):
    """tar_stream over `examples` generated streams (a fresh hypothesis test each time)."""
    return settings(max_examples=examples, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])(
        given(extra=extra_entries, drop=st.sets(st.integers(0, 12), max_size=3),
              compressed=st.booleans(), insert_at=st.integers(0, 20))(tar_stream))


# A plain run takes 40 streams; CI (`slow`) 150.
test_tar_streams = _streams(40)
test_tar_streams_exhaustively = pytest.mark.slow(_streams(150))
