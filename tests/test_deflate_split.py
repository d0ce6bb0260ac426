"""A wheel member inflated on several threads (rapidgzip) is checked exactly as one inflated on
one core: its size and CRC-32 against the central directory, nothing more accepted."""
import os
import threading
import zipfile

import pytest

from cudnn_setup.archive import deflate_split, wheel

pytest.importorskip("rapidgzip")

# Incompressible and compressible stretches, so the stream has both stored and Huffman blocks
# and rapidgzip's threads each start mid-stream.
DATA = b"".join(os.urandom(1 << 16) + bytes(range(256)) * 512 for _ in range(160))


def _wheel(tmp_path, data=DATA, name="nvidia/cudnn/lib/libcudnn_ops.so.9"):
    path = tmp_path / "w.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(name, data)
    return path


def _decode(path, threads, patch=None):
    info = zipfile.ZipFile(path).infolist()[0]
    if patch:
        patch(info)
    fd = os.open(path, os.O_RDONLY)
    try:
        return b"".join(wheel.decoded(fd, info, os.fstat(fd).st_size, threading.Event(), threads))
    finally:
        os.close(fd)


@pytest.fixture
def split_calls(monkeypatch):
    calls = []
    real = deflate_split.inflated

    def counted(*args, **kwargs):
        calls.append(args[3])
        return real(*args, **kwargs)

    monkeypatch.setattr(deflate_split, "inflated", counted)
    return calls


def test_a_member_on_several_threads_is_the_member(tmp_path, split_calls):
    path = _wheel(tmp_path)
    assert _decode(path, 4) == DATA
    assert split_calls == [4]  # the several-thread path ran
    assert _decode(path, 1) == DATA and split_calls == [4]


def test_a_wrong_crc_is_refused_on_several_threads(tmp_path, split_calls):
    path = _wheel(tmp_path)

    def lie(info):
        info.CRC ^= 1
    with pytest.raises(zipfile.BadZipFile, match="bad CRC-32"):
        _decode(path, 4, lie)
    assert split_calls == [4]


@pytest.mark.parametrize("delta, error", [(-1, "holds more than it declares"),
                                          (+1, "unexpected end of data")])
def test_a_member_of_another_size_than_declared_is_refused(tmp_path, split_calls, delta, error):
    path = _wheel(tmp_path)

    def lie(info):
        info.file_size += delta
    with pytest.raises((zipfile.BadZipFile, EOFError), match=error):
        _decode(path, 4, lie)


@pytest.mark.parametrize("where", [0.0, 0.5])
def test_damaged_deflate_is_an_error_the_reader_words(tmp_path, where):
    """Damage at the start or in a later thread's stretch is an error of a kind wheel.read
    reports as a corrupt wheel (never bytes that pass, never an unexpected exception)."""
    path = _wheel(tmp_path)
    info = zipfile.ZipFile(path).infolist()[0]
    fd = os.open(path, os.O_RDONLY)
    start, end = wheel.data_range(fd, info, path.stat().st_size)
    os.close(fd)
    at = start + int((end - start) * where)
    raw = bytearray(path.read_bytes())
    raw[at:at + 4096] = b"\xff" * 4096
    path.write_bytes(bytes(raw))
    with pytest.raises(Exception) as caught:
        _decode(path, 4)
    assert isinstance(caught.value, (zipfile.BadZipFile, EOFError, ValueError, RuntimeError)), \
        repr(caught.value)


def test_a_wheel_read_on_many_cores_splits_its_longest_member(tmp_path, compiler, monkeypatch,
                                                            split_calls):
    """wheel.read on a 16-core machine: the member longer than a core's share is decoded on
    several threads, the rest on one each, and every staged file is the member's bytes."""
    import hashlib

    from cudnn_setup.archive.package import wanted
    from fixtures.wheels import build_wheel, wheel_files

    files = dict(wheel_files("9.1.7.99", "12", compiler))
    ops = next(n for n in files if n.endswith("/libcudnn_ops.so.9"))
    files[ops] += DATA
    good = build_wheel(tmp_path / "w", "9.1.7.99", "12", compiler, files)
    monkeypatch.setattr(wheel, "usable_cores", lambda: 16)
    monkeypatch.setattr(deflate_split, "MIN_BYTES", 1 << 20)
    (tmp_path / "staging").mkdir()
    listing, _ = wheel.read(good, tmp_path / "staging", wanted)
    assert listing.problems == []
    assert len(split_calls) == 1 and split_calls[0] > 1
    with zipfile.ZipFile(good) as z:
        for info in z.infolist():
            if not info.filename.startswith("nvidia/cudnn/lib/"):
                continue
            soname = info.filename.rsplit("/", 1)[1]
            member = next(m for m in listing.members
                          if m.kind == "file" and m.name.startswith(soname + "."))
            assert member.staged.read_bytes() == z.read(info)
            assert member.sha256 == hashlib.sha256(z.read(info)).hexdigest()


def test_only_a_many_core_machine_splits_a_long_member():
    share = 30 << 20
    assert deflate_split.threads_for(234 << 20, share, 2) == 1  # every core has its own member
    assert deflate_split.threads_for(1 << 20, share, 16) == 1  # over before threads would start
    assert deflate_split.threads_for(234 << 20, share, 16) == 8
    assert deflate_split.threads_for(1 << 30, share, 16) == 16  # never more than the cores
