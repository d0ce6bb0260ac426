"""ldresolve against the real loader: the same gcc-built libraries, ldresolve's answer and
glibc's (a program that dlopens them and lists what was mapped)."""
import os
import shutil

import pytest

from cudnn_setup.facts.ldresolve.closure import closure, missing
from cudnn_setup.facts.ldresolve.environment import Environment
from cudnn_setup.facts.ldresolve.ldconfig import (CacheEntry, parse_ldconfig_p, read_cache,
                                                  registered)
from cudnn_setup.facts.ldresolve.loadable import NotLoadable, read_object
from cudnn_setup.facts.ldresolve.loader_facts import LoaderFacts, probe_loader
from cudnn_setup.facts.ldresolve.process import Process
from cudnn_setup.facts.ldresolve.read_once import Objects
from cudnn_setup.facts.ldresolve.runtime_names import Versions, runtime_names, runtime_requests
from cudnn_setup.facts.ldresolve.search import (STEP_CACHE, STEP_DEFAULT, STEP_LD_LIBRARY_PATH,
                                                STEP_LOADED, STEP_PATH, STEP_RPATH, STEP_RUNPATH)
from fixtures.deplibs import LoadProbe, build


@pytest.fixture(scope="module")
def facts():
    return probe_loader()


@pytest.fixture(scope="module")
def cache():
    return read_cache()


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    return LoadProbe.compile(tmp_path_factory.mktemp("probe"))


def base_env():
    return {k: v for k, v in os.environ.items() if not k.startswith(("LD_", "CUDA"))}


def both(probe, facts, cache, roots, tmp_path, llp=None, calls=()):
    """(ldresolve's closure, what the real loader did) for the same roots and LD_LIBRARY_PATH."""
    env = base_env()
    if llp is not None:
        env["LD_LIBRARY_PATH"] = llp
    seen = probe.run([*map(str, roots), *(f"@{c}" for c in calls)], env, cwd=tmp_path)
    emu = closure(roots, Environment(ld_library_path=llp, cache=cache, facts=facts,
                                     cwd=str(tmp_path), executable=str(probe.exe)))
    return emu, seen


def found_under(deps, root):
    return sorted({d.resolution.path for d in deps if d.resolution.path
                   and d.resolution.path.startswith(str(root) + os.sep)})


def test_missing_needed_library_names_who_needs_it(tmp_path, probe, facts, cache):
    w = tmp_path / "w"
    ghost = build(tmp_path / "gone" / "libghost.so.1", "libghost.so.1", work=w)
    sub = build(tmp_path / "lib" / "libcudnn_cnn.so.9", "libcudnn_cnn.so.9", work=w, needed=[ghost])
    shutil.rmtree(tmp_path / "gone")
    emu, seen = both(probe, facts, cache, [sub], tmp_path)
    [miss] = missing(emu)
    assert (miss.name, miss.requester, miss.kind) == ("libghost.so.1", str(sub), "needed")
    assert seen.errors == [miss.resolution.error]
    assert miss.resolution.error == "libghost.so.1: cannot open shared object file: No such file or directory"


def test_runtime_name_embedded_for_dlopen_is_found_and_reported_missing(tmp_path, probe, facts, cache):
    lib = build(tmp_path / "lib" / "libcudnn_graph.so.9", "libcudnn_graph.so.9", work=tmp_path / "w",
                runtime="libnvrtc.so.12")
    assert "libnvrtc.so.12" in runtime_names(lib)
    emu, seen = both(probe, facts, cache, [lib], tmp_path, calls=["fixture_load"])
    [miss] = missing(emu)
    assert (miss.name, miss.kind, miss.requester) == ("libnvrtc.so.12", "runtime", str(lib))
    assert seen.calls["fixture_load"] == miss.resolution.error


def test_runtime_name_found_through_runpath_like_the_loader(tmp_path, probe, facts, cache):
    w = tmp_path / "w"
    build(tmp_path / "deps" / "libnvrtc.so.12", "libnvrtc.so.12", work=w)
    lib = build(tmp_path / "lib" / "libcudnn_graph.so.9", "libcudnn_graph.so.9", work=w,
                runtime="libnvrtc.so.12", runpath="$ORIGIN/../deps")
    emu, seen = both(probe, facts, cache, [lib], tmp_path, calls=["fixture_load"])
    assert seen.calls["fixture_load"] == "ok"
    dep = next(d for d in emu if d.name == "libnvrtc.so.12")
    assert dep.resolution.path == str(tmp_path / "lib" / "../deps/libnvrtc.so.12")
    assert dep.resolution.via == f"DT_RUNPATH of {lib}"
    assert found_under(emu, tmp_path) == sorted(seen.under(tmp_path))


def test_older_copy_first_on_ld_library_path_wins_over_runpath(tmp_path, probe, facts, cache):
    w = tmp_path / "w"
    new_ops = build(tmp_path / "new" / "libcudnn_ops.so.9", "libcudnn_ops.so.9", work=w, version=90100)
    build(tmp_path / "old" / "libcudnn_ops.so.9", "libcudnn_ops.so.9", work=w, version=90000)
    main = build(tmp_path / "new" / "libcudnn.so.9", "libcudnn.so.9", work=w, needed=[new_ops],
                 runpath="$ORIGIN")
    emu, seen = both(probe, facts, cache, [main], tmp_path, llp=str(tmp_path / "old"))
    ops = next(d for d in emu if d.name == "libcudnn_ops.so.9")
    assert ops.resolution.path == str(tmp_path / "old" / "libcudnn_ops.so.9")
    assert ops.resolution.via == "LD_LIBRARY_PATH"
    assert found_under(emu, tmp_path) == sorted(seen.under(tmp_path))
    emu2, seen2 = both(probe, facts, cache, [main], tmp_path)  # without it, RUNPATH finds the new one
    assert found_under(emu2, tmp_path) == sorted(seen2.under(tmp_path))
    assert str(tmp_path / "new" / "libcudnn_ops.so.9") in seen2.under(tmp_path)


@pytest.mark.parametrize("tag", ["rpath", "runpath"])
def test_rpath_beats_ld_library_path_runpath_does_not(tmp_path, probe, facts, cache, tag):
    w = tmp_path / "w"
    dep_r = build(tmp_path / "r" / "libdep.so.1", "libdep.so.1", work=w, value=1)
    build(tmp_path / "l" / "libdep.so.1", "libdep.so.1", work=w, value=2)
    root = build(tmp_path / "root" / "libroot.so.1", "libroot.so.1", work=w, needed=[dep_r],
                 **{tag: str(tmp_path / "r")})
    emu, seen = both(probe, facts, cache, [root], tmp_path, llp=str(tmp_path / "l"))
    winner = "r" if tag == "rpath" else "l"
    assert str(tmp_path / winner / "libdep.so.1") in seen.under(tmp_path)
    assert found_under(emu, tmp_path) == sorted(seen.under(tmp_path))


@pytest.mark.parametrize("mid_runpath", [False, True])
def test_rpath_is_inherited_unless_the_asker_has_runpath(tmp_path, probe, facts, cache, mid_runpath):
    w = tmp_path / "w"
    deep = build(tmp_path / "r" / "libdeep.so.1", "libdeep.so.1", work=w)
    mid = build(tmp_path / "m" / "libmid.so.1", "libmid.so.1", work=w, needed=[deep],
                runpath=str(tmp_path / "nowhere") if mid_runpath else None)
    root = build(tmp_path / "root" / "libroot.so.1", "libroot.so.1", work=w, needed=[mid],
                 rpath=f"{tmp_path / 'r'}:{tmp_path / 'm'}")
    emu, seen = both(probe, facts, cache, [root], tmp_path)
    if mid_runpath:  # the failed dlopen unmaps what it had loaded
        assert seen.errors == [missing(emu)[0].resolution.error] and not seen.under(tmp_path)
        assert missing(emu)[0].name == "libdeep.so.1"
    else:
        assert found_under(emu, tmp_path) == sorted(seen.under(tmp_path))
        assert not missing(emu) and not seen.errors
        deep_dep = next(d for d in emu if d.name == "libdeep.so.1")
        assert deep_dep.resolution.via == f"DT_RPATH of {root}"


def test_32_bit_candidate_is_passed_over_as_ld_so_does(tmp_path, probe, facts, cache):
    w = tmp_path / "w"
    dep64 = build(tmp_path / "b" / "libdep.so.1", "libdep.so.1", work=w)
    build(tmp_path / "a" / "libdep.so.1", "libdep.so.1", work=w, bits=32)
    root = build(tmp_path / "root" / "libroot.so.1", "libroot.so.1", work=w, needed=[dep64])
    llp = f"{tmp_path / 'a'}:{tmp_path / 'b'}"
    emu, seen = both(probe, facts, cache, [root], tmp_path, llp=llp)
    dep = next(d for d in emu if d.name == "libdep.so.1")
    assert dep.resolution.path == str(tmp_path / "b" / "libdep.so.1")
    assert dep.resolution.skipped == [(str(tmp_path / "a" / "libdep.so.1"), "wrong ELF class: ELFCLASS32")]
    assert found_under(emu, tmp_path) == sorted(seen.under(tmp_path))
    # only the 32-bit one: both refuse with the same words
    emu2, seen2 = both(probe, facts, cache, [root], tmp_path, llp=str(tmp_path / "a"))
    os.rename(tmp_path / "b", tmp_path / "b-away")
    emu2, seen2 = both(probe, facts, cache, [root], tmp_path, llp=str(tmp_path / "a"))
    assert seen2.errors == [missing(emu2)[0].resolution.error]
    assert "wrong ELF class: ELFCLASS32" in seen2.errors[0]


def test_a_file_that_is_not_elf_ends_the_search(tmp_path, probe, facts, cache):
    w = tmp_path / "w"
    dep = build(tmp_path / "b" / "libdep.so.1", "libdep.so.1", work=w)
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "libdep.so.1").write_text("INPUT(libdep.so.1)\n" * 10)
    root = build(tmp_path / "root" / "libroot.so.1", "libroot.so.1", work=w, needed=[dep])
    emu, seen = both(probe, facts, cache, [root], tmp_path, llp=f"{tmp_path / 'a'}:{tmp_path / 'b'}")
    [miss] = missing(emu)
    assert seen.errors == [miss.resolution.error]
    assert miss.resolution.error.endswith("invalid ELF header")


def test_origin_is_the_directory_it_was_opened_from_not_the_symlink_target(tmp_path, probe, facts, cache):
    w = tmp_path / "w"
    build(tmp_path / "view" / "deps" / "libdep.so.1", "libdep.so.1", work=w)
    real = build(tmp_path / "store" / "libroot.so.1", "libroot.so.1", work=w, runpath="$ORIGIN/deps",
                 needed=[tmp_path / "view" / "deps" / "libdep.so.1"])
    (tmp_path / "view" / "libroot.so.1").symlink_to(real)
    emu, seen = both(probe, facts, cache, [tmp_path / "view" / "libroot.so.1"], tmp_path)
    assert not seen.errors and not missing(emu)
    assert str(tmp_path / "view" / "deps" / "libdep.so.1") in seen.under(tmp_path)


def test_hwcaps_subdirectory_is_tried_first(tmp_path, probe, facts, cache):
    sub = next((s for s in facts.subdirs if s.startswith("glibc-hwcaps/")), None)
    if sub is None:
        pytest.skip("this loader searches no glibc-hwcaps subdirectory")
    w = tmp_path / "w"
    dep = build(tmp_path / "d" / "libdep.so.1", "libdep.so.1", work=w)
    build(tmp_path / "d" / sub / "libdep.so.1", "libdep.so.1", work=w)
    root = build(tmp_path / "root" / "libroot.so.1", "libroot.so.1", work=w, needed=[dep])
    emu, seen = both(probe, facts, cache, [root], tmp_path, llp=str(tmp_path / "d"))
    assert str(tmp_path / "d" / sub / "libdep.so.1") in seen.under(tmp_path)
    assert found_under(emu, tmp_path) == sorted(seen.under(tmp_path))


def test_lib_and_platform_expand_like_the_loader(tmp_path, probe, facts, cache):
    w = tmp_path / "w"
    dep = build(tmp_path / "x" / facts.lib / facts.platform / "libdep.so.1", "libdep.so.1", work=w)
    root = build(tmp_path / "root" / "libroot.so.1", "libroot.so.1", work=w, needed=[dep],
                 runpath=f"{tmp_path}/x/$LIB/${{PLATFORM}}")
    emu, seen = both(probe, facts, cache, [root], tmp_path)
    assert not seen.errors and not missing(emu)
    assert found_under(emu, tmp_path) == sorted(seen.under(tmp_path))


def test_loader_facts_come_from_the_real_loader(facts):
    assert facts.subdirs[-1] == ""
    assert facts.default_dirs and all(d.startswith("/") for d in facts.default_dirs)
    assert "--help" in facts.found_via


def test_cache_lookup_takes_this_abi_and_verifies_the_file(tmp_path):
    w = tmp_path / "w"
    lib32 = build(tmp_path / "c32" / "libcached.so.1", "libcached.so.1", work=w, bits=32)
    lib64 = build(tmp_path / "c64" / "libcached.so.1", "libcached.so.1", work=w)
    text = (f"3 libs found in cache `/etc/ld.so.cache'\n"
            f"\tlibcached.so.1 (libc6) => {lib32}\n"
            f"\tlibcached.so.1 (libc6,x86-64, hwcap: 0x0000000000000004) => /nowhere/libcached.so.1\n"
            f"\tlibcached.so.1 (libc6,x86-64) => {lib64}\n")
    entries = parse_ldconfig_p(text)
    assert [(e.abi, e.path) for e in entries] == [("", str(lib32)), ("x86-64", str(lib64))]
    root = build(tmp_path / "root" / "libroot.so.1", "libroot.so.1", work=w, needed=[lib64])
    deps = closure([root], Environment(cache=entries))
    dep = next(d for d in deps if d.name == "libcached.so.1")
    assert (dep.resolution.path, dep.resolution.via) == (str(lib64), "ld.so.cache")
    gone = closure([root], Environment(cache=entries, inhibit_cache=True))
    assert [d.name for d in missing(gone)] == ["libcached.so.1"]


def test_runtime_names_only_whole_strings_and_across_chunks(tmp_path, monkeypatch):
    src = tmp_path / "names.c"
    src.write_text(r'''
const char *keep[] = {"libcublasLt.so.12", "libnvrtc.so.%d", "libcudnn_ops.so",
                      "Could not load libz.so.1 for you", "xlibfake.so.2", "libz.so.1"};
''')
    out = tmp_path / "libnames.so"
    import subprocess
    subprocess.run(["gcc", "-shared", "-fPIC", "-O0", str(src), "-o", str(out)], check=True)
    expected = ["libcublasLt.so.12", "libnvrtc.so.%d", "libcudnn_ops.so", "libz.so.1"]
    assert sorted(runtime_names(out)) == sorted(expected)
    monkeypatch.setattr("cudnn_setup.facts.ldresolve.runtime_names._SCAN_CHUNK", 7)  # every name straddles a chunk boundary
    assert sorted(runtime_names(out)) == sorted(expected)
    assert len(runtime_names(out, limit=2)) == 2


def test_runtime_requests_fill_in_versions_like_cudnn():
    names = ["libnvrtc.so.%d", "libnvrtc.so", "libcuda.so", "libcuda.so.1", "libcudnn_heuristic.so",
             "libcudnn_graph.so.9"]
    got = dict(runtime_requests(names, "libcudnn_graph.so.9", Versions(cudnn="9.1.0", cuda="12.4")))
    assert got == {
        "libnvrtc.so.12": ("libnvrtc.so.12", "libnvrtc.so"),
        "libcuda.so.1": ("libcuda.so.1", "libcuda.so"),
        "libcudnn_heuristic.so.9.1.0": ("libcudnn_heuristic.so.9.1.0", "libcudnn_heuristic.so.9.1",
                                        "libcudnn_heuristic.so.9", "libcudnn_heuristic.so"),
    }
    unknown = dict(runtime_requests(names, "libcudnn_graph.so.9"))
    assert unknown["libnvrtc.so"] == ("libnvrtc.so",)  # no CUDA version: only the bare name
    assert unknown["libcudnn_heuristic.so.9"] == ("libcudnn_heuristic.so.9", "libcudnn_heuristic.so")


def test_damaged_and_foreign_files_are_refused_with_ld_so_words(tmp_path):
    (tmp_path / "short.so").write_bytes(b"\x7fELF\x02")
    (tmp_path / "text.so").write_text("not a library at all, just text" * 4)
    with pytest.raises(NotLoadable, match="file too short"):
        read_object(tmp_path / "short.so")
    with pytest.raises(NotLoadable, match="invalid ELF header"):
        read_object(tmp_path / "text.so")
    with pytest.raises(NotLoadable, match="Is a directory"):
        read_object(tmp_path)


def test_each_resolution_says_which_step_found_it_and_what_matched(tmp_path, facts):
    """step, entry and owner: what a caller needs to say why a copy was chosen."""
    w = tmp_path / "w"
    for d in ("r", "l", "u", "c", "dflt"):
        build(tmp_path / d / "libdep.so.1", "libdep.so.1", work=w)
    by_rpath = build(tmp_path / "a" / "liba.so.1", "liba.so.1", work=w, rpath="$ORIGIN/../r")
    by_runpath = build(tmp_path / "b" / "libb.so.1", "libb.so.1", work=w, runpath="$ORIGIN/../u")
    plain = build(tmp_path / "p" / "libp.so.1", "libp.so.1", work=w)
    cache = [CacheEntry("libdep.so.1", str(tmp_path / "c" / "libdep.so.1"), "x86-64")]
    nowhere = LoaderFacts(default_dirs=(str(tmp_path / "dflt"),))

    def found(requester, **env):
        proc = Process(Environment(**{"facts": nowhere, **env}))
        asker = proc.find(str(requester), None)[1]
        return proc.find("libdep.so.1", asker)[0]

    res = found(by_rpath, ld_library_path=str(tmp_path / "l"))
    assert (res.step, res.entry, res.owner) == (STEP_RPATH, "$ORIGIN/../r", str(by_rpath))
    res = found(by_runpath, ld_library_path=f"{tmp_path / 'nothing'}:{tmp_path / 'l'}")
    assert (res.step, res.entry, res.owner) == (STEP_LD_LIBRARY_PATH, str(tmp_path / "l"), None)
    res = found(by_runpath)
    assert (res.step, res.entry, res.owner) == (STEP_RUNPATH, "$ORIGIN/../u", str(by_runpath))
    res = found(plain, cache=cache)
    assert (res.step, res.entry) == (STEP_CACHE, str(tmp_path / "c" / "libdep.so.1"))
    res = found(plain)
    assert (res.step, res.entry) == (STEP_DEFAULT, str(tmp_path / "dflt"))
    assert res.via == "default directories"  # the words deps and coherence show are unchanged
    proc = Process(Environment(facts=nowhere))
    res = proc.find(str(plain), None)[0]
    assert res.step == STEP_PATH and proc.find("libp.so.1", None)[0].step == STEP_LOADED
    missing = Process(Environment(facts=LoaderFacts(default_dirs=()))).find("libdep.so.1", None)[0]
    assert not missing.found and missing.step is None and missing.entry is None


def test_registered_lists_what_ldconfig_would_add_for_a_directory(tmp_path):
    w = tmp_path / "w"
    d = tmp_path / "d"
    build(d / "libcudnn.so.9.14.0", "libcudnn.so.9", work=w)
    (d / "libcudnn.so.9").symlink_to("libcudnn.so.9.14.0")
    build(d / "libcudnn_ops.so.9.14.0", "libcudnn_ops.so.9", work=w)  # no soname link yet
    build(d / "libold32.so.1", "libold32.so.1", work=w, bits=32)
    (d / "libnot.so.1").write_text("INPUT(libc.so.6)\n")
    got = {e.name: e for e in registered(d)}
    assert got["libcudnn.so.9"] == CacheEntry("libcudnn.so.9", str(d / "libcudnn.so.9"), "x86-64")
    assert got["libcudnn_ops.so.9"].path == str(d / "libcudnn_ops.so.9.14.0")
    assert got["libold32.so.1"].abi == "" and "libnot.so.1" not in got
    assert registered(tmp_path / "missing") == []


def test_objects_read_each_file_once_and_again_once_it_changed(tmp_path, monkeypatch):
    """The run's memo: a link and its target are one file, read once; a file rewritten since
    (or replaced by something the loader refuses) is read again, and every answer names the
    path it was asked for."""
    lib = build(tmp_path / "libone.so.1.2", "libone.so.1", work=tmp_path / "w",
                runtime="libz.so.1")
    link = tmp_path / "libone.so.1"
    link.symlink_to(lib.name)
    reads = []
    real = read_object
    monkeypatch.setattr("cudnn_setup.facts.ldresolve.read_once.read_object",
                        lambda p: reads.append(p) or real(p))
    objects = Objects()
    first, again = objects.read(str(lib)), objects.read(str(link))
    assert reads == [str(lib)] and (first.path, again.path) == (str(lib), str(link))
    assert again.soname == "libone.so.1" and again.needed == first.needed
    assert objects.runtime_names(str(link)) == objects.runtime_names(str(lib)) == ["libz.so.1"]
    lib.write_bytes(b"not an ELF file at all, but long enough to be read as one" * 2)
    with pytest.raises(NotLoadable) as raised:
        objects.read(str(link))
    assert str(raised.value).startswith(f"{link}: invalid ELF header") and raised.value.fatal
    assert reads == [str(lib), str(link)]
    with pytest.raises(NotLoadable) as raised:  # the refusal is remembered too, per path
        objects.read(str(lib))
    assert str(raised.value).startswith(f"{lib}: invalid ELF header")
    assert len(reads) == 2
    # an environment with a memo reads through it in every emulated process
    env = Environment(objects=objects)
    assert Process(env).read == objects.read


def test_elf_files_are_parsed_in_one_module():
    """facts/elf.py is the package's one ELF reader: the judge of an archive, the checks and
    this emulation read through it, so a hostile file meets one parser and its guards."""
    import ast

    from conftest import REPO

    parsers = set()
    for path in (REPO / "cudnn_setup").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if any(n == "elftools" or n.startswith("elftools.") for n in names):
                parsers.add(str(path.relative_to(REPO)))
    assert parsers == {"cudnn_setup/facts/elf.py"}, sorted(parsers)
