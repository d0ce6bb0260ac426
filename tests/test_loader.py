"""The system loader: ld.so.conf parsing and registering a CUDA root with a private ldconfig cache."""
from conftest import run_json
from cudnn_setup.facts import loader


def test_conf_includes_are_followed(tmp_path):
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "ld.so.conf").write_text("include conf.d/*.conf\n/opt/a # comment\n")
    (tmp_path / "conf.d" / "b.conf").write_text("/opt/b\n\n# only a comment\n")
    assert loader.conf_dirs(tmp_path / "ld.so.conf") == ["/opt/b", "/opt/a"]
    dirs = loader.search_dirs(tmp_path / "ld.so.conf")
    assert dirs[:2] == ["/opt/b", "/opt/a"]  # then glibc's own trusted dirs
    assert any(d.endswith("lib") or d.endswith("lib64") for d in dirs[2:])


def test_registered_root_is_found_by_ldconfig(archives, cuda_root, home, tmp_path):
    root = cuda_root()
    run_json(["install", archives["cudnn-10.0-linux-x64-v7.4.2.24.tgz"], "--cuda-root", root,
              "--no-theanorc", "--no-verify"], home)
    lib = root / "lib64"
    conf_d = tmp_path / "ld.so.conf.d"
    conf_d.mkdir()
    main_conf = tmp_path / "ld.so.conf"
    main_conf.write_text(f"include {conf_d}/*.conf\n")
    written = loader.write_conf(conf_d, lib)
    assert written.read_text().splitlines()[-1] == str(lib)
    assert loader.on_loader_path(lib, main_conf)
    cache = tmp_path / "ld.so.cache"
    ok, out = loader.run_ldconfig(("-f", str(main_conf), "-C", str(cache)))
    assert ok, out
    entries = loader.cache_entries("libcudnn", str(cache))
    assert ("libcudnn.so.7", str(lib / "libcudnn.so.7")) in entries
    assert loader.remove_conf(conf_d, lib) and not written.exists()
    assert not loader.remove_conf(conf_d, lib)


def test_not_on_loader_path_gives_the_export_line(archives, cuda_root, home):
    root = cuda_root()
    done, out = run_json(["install", archives["cudnn-10.0-linux-x64-v7.4.2.24.tgz"], "--cuda-root",
                          root, "--no-theanorc", "--no-verify"], home)
    step = next(c for c in out["checks"] if c["name"] == "ldconfig")
    assert step["status"] == "skip"
    assert f"export LD_LIBRARY_PATH={root / 'lib64'}" in step["detail"]


def test_an_include_chain_however_deep_is_read_to_its_end(tmp_path):
    """ldconfig follows `include` as deep as it goes; a chain of 1,200 files (a generated
    conf.d) gave back 993 of its directories without a word when each include was a call of
    its own. Real files: each includes the next, the order kept, a loop back read once."""
    depth = 1200
    for i in range(depth):
        nxt = f"include c{i + 1}.conf\n" if i + 1 < depth else "include c0.conf\n"
        (tmp_path / f"c{i}.conf").write_text(f"/opt/d{i}\n{nxt}/opt/after{i}\n")
    got = loader.conf_dirs(tmp_path / "c0.conf")
    want = [f"/opt/d{i}" for i in range(depth)] + [f"/opt/after{i}" for i in reversed(range(depth))]
    assert got == want
