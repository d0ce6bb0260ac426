"""The command line: parse, call the library, render. The only place errors become exit codes."""
from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Callable, Optional

import typer

from cudnn_setup import __version__
from cudnn_setup.cuda import CudaRoot, find_cuda_root
from cudnn_setup.errors import InstallFailed, SetupError, UsageError
from cudnn_setup.report import FAIL, PASS, SKIP, WARN, Check, Result, check_lines

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Install NVIDIA cuDNN from an archive into a CUDA toolkit, configure "
                       "Theano for it, and prove that it works.")

CudaRootOpt = typer.Option(None, "--cuda-root", help="CUDA root (default: discovered)")
JsonOpt = typer.Option(False, "--json", help="one JSON object on stdout; human output on stderr")
TheanorcOpt = typer.Option(None, "--theanorc", help="Theano config to write "
                           "(default: last entry of $THEANORC, else ~/.theanorc)")
LD_CONF_DIR = Path("/etc/ld.so.conf.d")
PythonOpt = typer.Option(None, "--python", help="interpreter whose Theano runs the checks")


class Terminated(BaseException):
    """SIGTERM, raised where the program is, so transactions roll back as on Ctrl-C."""


def _on_sigterm(signum, frame):
    raise Terminated()


def _emit(result: Result, as_json: bool) -> None:
    human = sys.stderr if as_json else sys.stdout
    for line in result.lines:
        print(line, file=human)
    if result.checks:
        for line in check_lines(result.checks):
            print(line, file=human)
    if result.error:
        print(f"error: {result.error.message}", file=sys.stderr)
        for problem in result.error.problems[1:]:
            print(f"error: {problem.message}", file=sys.stderr)
        if result.error.hint:
            print(f"hint: {result.error.hint}", file=sys.stderr)
    if as_json:
        print(json.dumps(result.to_dict(), indent=None, sort_keys=False))
    if result.error:
        code = result.error.exit_code
    elif any(c.status == FAIL for c in result.checks):
        code = 1
    else:
        code = 0
    raise typer.Exit(code)


def _run(command: str, as_json: bool, body: Callable[[Result], None]) -> None:
    result = Result(command)
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        body(result)
    except SetupError as exc:
        result.error = exc
    except (KeyboardInterrupt, Terminated):
        result.error = InstallFailed("interrupted; any change in progress was rolled back",
                                     "run the command again")
    finally:
        signal.signal(signal.SIGTERM, previous)
    _emit(result, as_json)


def _root(explicit: Optional[Path]) -> CudaRoot:
    return find_cuda_root(os.environ, explicit)


def _progress(enabled: bool, total: int, label: str):
    """A rich progress bar on a terminal; a no-op callback otherwise."""
    if not enabled:
        return None, None
    from rich.console import Console
    from rich.progress import (BarColumn, DownloadColumn, Progress, TimeRemainingColumn,
                               TransferSpeedColumn)

    progress = Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                        TransferSpeedColumn(), TimeRemainingColumn(),
                        console=Console(stderr=True), transient=True)
    task = progress.add_task(label, total=total)
    return progress, (lambda done: progress.update(task, completed=done))


def _recover(result: Result, root: CudaRoot) -> None:
    from cudnn_setup.install import recover_pending

    said = recover_pending(root)
    if said:
        result.lines.append(said)
        result.extra["recovered"] = said


def _theanorc_path(explicit: Optional[Path]) -> Path:
    from cudnn_setup.theanorc import default_path

    return explicit or default_path(os.environ, Path.home())


@app.command()
def inspect(archive: Path = typer.Argument(..., help="cuDNN archive (.tgz, .tar.xz)"),
            json_: bool = JsonOpt) -> None:
    """Validate and describe an archive; install nothing."""
    from cudnn_setup.inspection import inspect_archive

    def body(result: Result) -> None:
        pkg = inspect_archive(archive)
        result.cudnn_version = pkg.cudnn_version
        result.extra["package"] = pkg.to_dict()
        result.lines += describe_package(pkg)
        if not pkg.installable:
            errors = [p for p in pkg.problems if p.severity == "error"]
            from cudnn_setup.errors import ArchiveRejected

            raise ArchiveRejected(f"{archive.name} cannot be installed here: "
                                  f"{len(errors)} problem(s)", errors[0].hint, problems=errors)

    _run("inspect", json_, body)


def describe_package(pkg) -> list[str]:
    from cudnn_setup.problems import escape

    lines = [f"archive      {escape(pkg.archive_name)} ({pkg.compression}, {pkg.size} bytes)",
             f"sha256       {pkg.sha256 or '-'}",
             f"generation   {pkg.generation or 'unknown'} (layout: {pkg.layout or '-'}, "
             f"top dir: {escape(pkg.top_dir or '-')})",
             f"cuDNN        {pkg.cudnn_version or 'unknown'}"
             + (f"  [{pkg.version_source}]" if pkg.version_source else ""),
             f"built for    CUDA {pkg.cuda_version or 'unknown (not in the file name)'}"]
    facts = pkg.name_facts
    platform = f"{facts.os}-{facts.arch} (name)" if facts else "unknown (name)"
    lines.append(f"platform     {platform}; ELF: {', '.join(pkg.elf_machines) or '-'}")
    lines.append(f"headers      {', '.join(m.name for m in pkg.headers) or '-'}")
    for lib in pkg.libraries:
        soname = lib.elf.soname if lib.elf else "?"
        chain = " <- ".join([lib.name] + [link.name for link in pkg.links
                                          if link.chain and link.chain[-1] == lib.name])
        lines.append(f"library      {chain}  (SONAME {soname})")
    for m in pkg.static_libraries:
        lines.append(f"static       {m.name}")
    lines.append(f"complete     {'yes' if not pkg.missing else 'no, missing ' + ', '.join(pkg.missing)}")
    for p in pkg.problems:
        lines.append(f"{p.severity:<12} {p.message}" + (f" — {p.hint}" if p.hint else ""))
    lines.append("verdict      " + ("installable on this machine" if pkg.installable
                                    else "NOT installable on this machine"))
    return lines


HeaderOpt = typer.Option(None, "--header", help="extra HTTP header, e.g. 'Authorization: Bearer …' "
                         "(repeatable; never printed)")
CacheOpt = typer.Option(None, "--cache-dir", help="download cache (default: $XDG_CACHE_HOME/cudnn-setup)")


def _fetch(url: str, sha256: Optional[str], headers: Optional[list[str]], cache_dir: Optional[Path],
           quiet: bool, result: Result):
    from cudnn_setup.checksums import expected_for
    from cudnn_setup.download import Downloader, default_cache_dir, file_name

    parsed = {}
    for h in headers or []:
        if ":" not in h:
            raise UsageError("--header must look like 'Name: value'", "e.g. --header 'Authorization: Bearer TOKEN'")
        key, value = h.split(":", 1)
        parsed[key.strip()] = value.strip()
    cache = cache_dir or default_cache_dir(os.environ, Path.home())
    progress, on_read = _progress(not quiet and sys.stderr.isatty(), 0, "downloading")
    on_progress = None
    if progress:
        task = progress.task_ids[0]
        on_progress = lambda done, total: progress.update(task, completed=done, total=total)  # noqa: E731
        progress.start()
    try:
        fetched = Downloader(cache, headers=parsed, on_progress=on_progress).fetch(
            url, expected_for(file_name(url), sha256))
    finally:
        if progress:
            progress.stop()
    result.extra["download"] = fetched.to_dict()
    how = "reused from the cache" if fetched.from_cache else (
        f"resumed at byte {fetched.resumed_from}" if fetched.resumed_from else "downloaded")
    check = (f"{fetched.expected.algorithm} matches ({fetched.expected.source})" if fetched.expected
             else "no checksum known: pass --sha256 to check it")
    result.lines.append(f"{fetched.path.name}: {how}, {fetched.size} bytes; {check}")
    return fetched


@app.command()
def download(url: str = typer.Argument(..., help="http(s) URL of a cuDNN archive"),
             output: Optional[Path] = typer.Option(None, "-o", "--output", help="directory to "
                                                   "place the archive in (default: the cache)"),
             sha256: Optional[str] = typer.Option(None, "--sha256", help="expected checksum"),
             header: Optional[list[str]] = HeaderOpt, cache_dir: Optional[Path] = CacheOpt,
             json_: bool = JsonOpt) -> None:
    """Download an archive into the cache (resumable, checksummed)."""
    import shutil

    def body(result: Result) -> None:
        _check_sha256(sha256)
        fetched = _fetch(url, sha256, header, output or cache_dir, json_, result)
        result.extra["path"] = str(fetched.path)
        if output and fetched.path.parent != output:
            shutil.copy2(fetched.path, output)

    _run("download", json_, body)


@app.command()
def install(source: str = typer.Argument(..., help="archive path or http(s) URL"),
            cuda_root: Optional[Path] = CudaRootOpt,
            sha256: Optional[str] = typer.Option(None, "--sha256", help="expected checksum"),
            theanorc: Optional[Path] = TheanorcOpt,
            no_theanorc: bool = typer.Option(False, "--no-theanorc", help="leave Theano's config alone"),
            python: Optional[str] = PythonOpt,
            no_verify: bool = typer.Option(False, "--no-verify", help="skip verification"),
            dry_run: bool = typer.Option(False, "--dry-run", help="print the plan, change nothing"),
            force: bool = typer.Option(False, "--force", help="reinstall; replace changed files"),
            ldconfig: bool = typer.Option(False, "--ldconfig", help="register the library dir "
                                          "in /etc/ld.so.conf.d and run ldconfig"),
            header: Optional[list[str]] = HeaderOpt, cache_dir: Optional[Path] = CacheOpt,
            json_: bool = JsonOpt) -> None:
    """Install cuDNN from an archive into a CUDA root, configure Theano, verify."""
    from cudnn_setup import install as inst
    from cudnn_setup import loader
    from cudnn_setup.checksums import expected_for

    def body(result: Result) -> None:
        _check_sha256(sha256)
        root = _root(cuda_root)
        result.cuda_root = str(root.path)
        if source.startswith(("http://", "https://")):
            archive = _fetch(source, sha256, header, cache_dir, json_, result).path
            expected = None  # checked as it was fetched
        else:
            archive = Path(source)
            expected = expected_for(archive.name, sha256)
        size = archive.stat().st_size if archive.is_file() else 0
        progress, on_read = _progress(not json_ and sys.stderr.isatty(), size, "installing")
        try:
            if progress:
                progress.start()
            outcome = inst.install(archive, root, force=force, dry_run=dry_run,
                                   expected=expected, on_read=on_read)
        finally:
            if progress:
                progress.stop()
        pkg = outcome.package
        result.cudnn_version = pkg.cudnn_version if pkg else None
        result.changed = outcome.changed and not dry_run
        result.extra["install"] = outcome.to_dict()
        result.extra["would_change"] = outcome.changed if dry_run else None
        _render_outcome(result, outcome, root, dry_run)
        lib_dir = outcome.lib_dir or root.lib_dir()
        if not dry_run:
            result.checks.append(_loader_step(lib_dir, ldconfig, loader))
        if not no_theanorc:
            result.checks.append(_theanorc_step(result, _theanorc_path(theanorc), root.path,
                                                lib_dir, dry_run))
        if not no_verify and not dry_run:
            from cudnn_setup.verify import verify as run_verify

            result.checks += run_verify(root, python=python,
                                        theanorc=None if no_theanorc else _theanorc_path(theanorc))

    _run("install", json_, body)


def _check_sha256(value: Optional[str]) -> None:
    if value is not None and not _is_sha256(value):
        raise UsageError(f"--sha256 {value!r} is not 64 hex digits", "copy the checksum whole")


def _is_sha256(value: str) -> bool:
    return len(value) == 64 and all(c in "0123456789abcdefABCDEF" for c in value)


def _render_outcome(result: Result, outcome, root: CudaRoot, dry_run: bool) -> None:
    pkg = outcome.package
    if outcome.recovered:
        result.lines.append(outcome.recovered)
    what = f"cuDNN {pkg.cudnn_version} ({pkg.generation})" if pkg else "cuDNN"
    where = f"{root.path} (found via {root.found_via})"
    if dry_run:
        result.lines.append(f"plan for {what} into {where}:" if outcome.changed
                            else f"{what} is already installed in {where}; nothing to do")
        result.lines += [f"  {a['action']:<16} {a['path']}" for a in outcome.plan.actions()]
        result.lines += [f"note: {n}" for n in outcome.notes]
        return
    if outcome.changed:
        ops = outcome.plan.actions()
        result.lines.append(f"installed {what} into {where}: {len(ops)} change(s), "
                            f"{len(outcome.plan.unchanged)} file(s) already in place")
    else:
        result.lines.append(f"{what} is already installed in {where}; nothing changed")
    for path in outcome.plan.manual:
        result.lines.append(f"backed up {path}: it was not installed by cudnn-setup "
                            "(uninstall puts it back)")


def _loader_step(lib_dir: Path, register: bool, loader) -> Check:
    if register:
        conf = loader.write_conf(LD_CONF_DIR, lib_dir)
        ok, out = loader.run_ldconfig()
        return Check("ldconfig", PASS if ok else FAIL,
                     f"wrote {conf} and ran ldconfig" if ok else f"ldconfig failed: {out}")
    if loader.on_loader_path(lib_dir):
        if os.geteuid() == 0:
            ok, out = loader.run_ldconfig()
            return Check("ldconfig", PASS if ok else WARN,
                         "ran ldconfig: programs find the new libraries" if ok
                         else f"ldconfig failed: {out}")
        return Check("ldconfig", WARN, f"{lib_dir} is on the loader path but only root can "
                     "refresh its cache: run `sudo ldconfig`")
    return Check("ldconfig", SKIP, f"{lib_dir} is not on the system loader path; to load cuDNN "
                 f"from it, run: {loader.ld_library_path_line(lib_dir)}  (or install with "
                 "--ldconfig, as root, to register it)")


def _theanorc_step(result: Result, path: Path, root: Path, lib_dir: Path, dry_run: bool) -> Check:
    from cudnn_setup.theanorc import TheanorcRefused, configure

    try:
        change = configure(path, root, lib_dir, dry_run=dry_run)
    except TheanorcRefused as exc:
        return Check("theanorc", FAIL, f"{exc.message} — {exc.hint}")
    result.extra["theanorc"] = change.to_dict()
    if dry_run and change.changed:
        result.lines.append(change.diff.rstrip("\n"))
    if change.changed and not dry_run:
        result.changed = True
    verb = ("would update" if dry_run else "updated") if change.changed else "already up to date:"
    detail = f"{verb} {change.path}" + (f" (backup {change.backup})" if change.backup else "")
    detail += "".join(f"; {w}" for w in change.warnings)
    return Check("theanorc", WARN if change.warnings else PASS, detail)


@app.command()
def uninstall(cuda_root: Optional[Path] = CudaRootOpt,
              dry_run: bool = typer.Option(False, "--dry-run", help="print the plan, change nothing"),
              force: bool = typer.Option(False, "--force", help="also remove files changed since install"),
              json_: bool = JsonOpt) -> None:
    """Remove the cuDNN the tool installed and put back what it replaced."""
    from cudnn_setup import install as inst
    from cudnn_setup import loader

    def body(result: Result) -> None:
        root = _root(cuda_root)
        result.cuda_root = str(root.path)
        outcome = inst.uninstall(root, force=force, dry_run=dry_run)
        version = (outcome.manifest or {}).get("cudnn_version")
        result.cudnn_version = version
        result.changed = outcome.changed and not dry_run
        result.extra["uninstall"] = outcome.to_dict()
        if outcome.recovered:
            result.lines.append(outcome.recovered)
        if outcome.manifest is None:
            result.lines.append(f"cudnn-setup has installed nothing in {root.path}; nothing to do")
            return
        actions = outcome.plan.actions()
        head = "plan:" if dry_run else f"removed cuDNN {version} from {root.path}:"
        rc = _theanorc_path(None)
        if not dry_run and rc.is_file() and str(root.path) in rc.read_text(errors="replace"):
            backup = rc.with_name(rc.name + ".cudnn-setup.bak")
            before = (f"its version before cudnn-setup is {backup}" if backup.exists()
                      else "cudnn-setup created it")
            result.lines.append(f"note: {rc} still points Theano at {root.path} with "
                                f"optimizer_including=cudnn ({before})")
        lib_dir = root.path / outcome.manifest.get("lib_dir", "lib64")
        if not dry_run and outcome.changed and loader.remove_conf(LD_CONF_DIR, lib_dir):
            ok, out = loader.run_ldconfig()
            result.lines.append(f"removed {LD_CONF_DIR / loader.CONF_NAME}; ldconfig "
                                + ("ran" if ok else f"failed: {out}"))
        result.lines.append(head)
        result.lines += [f"  {a['action']:<16} {a['path']}" for a in actions]

    _run("uninstall", json_, body)


@app.command()
def theanorc(cuda_root: Optional[Path] = CudaRootOpt, theanorc: Optional[Path] = TheanorcOpt,
             dry_run: bool = typer.Option(False, "--dry-run", help="show the diff, change nothing"),
             json_: bool = JsonOpt) -> None:
    """Write the cuDNN settings into Theano's config."""
    from cudnn_setup.state import StateDir
    from cudnn_setup.theanorc import TheanorcRefused

    def body(result: Result) -> None:
        root = _root(cuda_root)
        result.cuda_root = str(root.path)
        _recover(result, root)
        manifest = StateDir(root.path).manifest()
        result.cudnn_version = manifest.get("cudnn_version") if manifest else None
        lib_dir = root.path / manifest["lib_dir"] if manifest else root.lib_dir()
        check = _theanorc_step(result, _theanorc_path(theanorc), root.path, lib_dir, dry_run)
        if check.status == FAIL:
            raise TheanorcRefused(check.detail, "")
        result.checks.append(check)

    _run("theanorc", json_, body)


@app.command()
def verify(cuda_root: Optional[Path] = CudaRootOpt, theanorc: Optional[Path] = TheanorcOpt,
           python: Optional[str] = PythonOpt,
           no_theano: bool = typer.Option(False, "--no-theano", help="skip the Theano check"),
           deep: bool = typer.Option(False, "--deep", help="hash every installed file, even those "
                                     "whose inode, size, mtime and ctime are unchanged"),
           json_: bool = JsonOpt) -> None:
    """Check, layer by layer, that cuDNN is installed right and works."""
    from cudnn_setup.state import StateDir
    from cudnn_setup.verify import verify as run_verify

    def body(result: Result) -> None:
        root = _root(cuda_root)
        result.cuda_root = str(root.path)
        _recover(result, root)
        result.checks += run_verify(root, python=python, theanorc=_theanorc_path(theanorc),
                                    theano=not no_theano, deep=deep)
        manifest = StateDir(root.path).manifest()
        result.cudnn_version = manifest.get("cudnn_version") if manifest else None
        failed = [c.name for c in result.checks if c.status == FAIL]
        result.lines.append(f"cuDNN in {root.path}: " + (f"FAILED ({', '.join(failed)})" if failed
                                                         else "ok"))

    _run("verify", json_, body)


@app.command()
def doctor(message: Optional[str] = typer.Argument(None, help="a Theano startup line to explain"),
           cuda_root: Optional[Path] = CudaRootOpt, json_: bool = JsonOpt) -> None:
    """Diagnose cuDNN on this machine; explain a Theano startup line."""
    from cudnn_setup.doctor import diagnose, findings_as_checks

    def body(result: Result) -> None:
        from cudnn_setup.cuda import why_not_toolkit

        if cuda_root is not None and why_not_toolkit(cuda_root) is None:
            _recover(result, _root(cuda_root))
        d = diagnose(os.environ, Path.home(), cuda_root, message)
        first = next((r for r in d.cuda_roots if r["usable"]), None)
        result.cuda_root = first["path"] if first else None
        result.extra.update(d.to_dict())
        result.checks += findings_as_checks(d)
        if d.explanation:
            result.lines.append("explanation:")
            result.lines += [f"  {p['part']}: {p['meaning']}" for p in d.explanation]
        problems = d.ordered()
        result.lines.append("problems, most important first:" if problems else "no problems found")
        for f in problems:
            result.lines.append(f"  [{f.severity}] {f.message}" + (f"\n      fix: {f.fix}" if f.fix else ""))

    _run("doctor", json_, body)


@app.command()
def bench(cuda_root: Optional[Path] = CudaRootOpt, theanorc: Optional[Path] = TheanorcOpt,
          python: Optional[str] = PythonOpt,
          no_theano: bool = typer.Option(False, "--no-theano", help="only cuDNN's own timings"),
          json_: bool = JsonOpt) -> None:
    """Theano conv net with cuDNN vs without; cuDNN's algorithm timings on the GPU."""
    from cudnn_setup.bench import bench as run_bench
    from cudnn_setup.checks.context import find_installation
    from cudnn_setup.errors import NoCudaRoot

    def body(result: Result) -> None:
        try:
            root = _root(cuda_root)
        except NoCudaRoot:
            if cuda_root is not None:
                raise
            root = None
        if root:
            _recover(result, root)
        inst = find_installation(root) if root else None
        result.cuda_root = str(root.path) if root else None
        result.cudnn_version = inst.version if inst else None
        result.checks += run_bench(inst, python=python, theanorc=_theanorc_path(theanorc),
                                   theano=not no_theano)

    _run("bench", json_, body)


def version_callback(value: bool) -> None:
    if value:
        print(f"cudnn-setup {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: bool = typer.Option(False, "--version", callback=version_callback,
                                       is_eager=True, help="print the version")) -> None:
    pass


def main() -> None:
    try:
        code = app(prog_name="cudnn-setup", standalone_mode=False)
    except typer.Abort:
        print("aborted", file=sys.stderr)
        sys.exit(130)
    except Exception as exc:
        # click's UsageError (typer may carry its own copy of click, so matched by its shape)
        if getattr(exc, "exit_code", None) != 2 or not hasattr(exc, "format_message"):
            raise
        if "--json" in sys.argv:
            # Provisioning scripts parse stdout: a usage error is still one JSON object there.
            command = next((a for a in sys.argv[1:] if not a.startswith("-")), "")
            error = UsageError(exc.format_message(), f"see `cudnn-setup {command} --help`")
            print(json.dumps(Result(command, error=error).to_dict()))
        exc.show()
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)
