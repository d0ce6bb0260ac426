"""The theano layer: build the classic graphs in the user's interpreter and see what Theano chose."""
from __future__ import annotations

import contextlib
import os
import shlex
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Mapping

from msgspec import Struct

from cudnn_setup.probing.answer_values import BadAnswer, Fields
from cudnn_setup.installation.model import Installation
from cudnn_setup.checks.gpu import GpuCheck
from cudnn_setup.child import Runner, Unanswered, run_command
from cudnn_setup.probing.probe import probe_module, run_probe
from cudnn_setup.probing.theano_answer import WHAT, TheanoAnswer
from cudnn_setup.facts import gpus
from cudnn_setup.facts import theano as theano_facts
from cudnn_setup.facts.cudnn import split_version
from cudnn_setup.private_dirs import root_in_another_users
from cudnn_setup.report import FAIL, PASS, SKIP, WARN, Check
from cudnn_setup.text import escape
from cudnn_setup.theanorc_merge import config_files, default_path, unreadable_for_theano

if TYPE_CHECKING:
    from cudnn_setup.checks.check_facts import CheckFacts

THEANO_TIMEOUT = 600.0
INSTALL_HINT = "pip install 'cudnn-setup[theano]' (Theano 1.0.5 with numpy<1.24, scipy<1.11)"


def with_fixed_hash_seed(base: Mapping[str, str]) -> dict[str, str]:
    """`base` with PYTHONHASHSEED=0 unless the user set a seed.

    Theano 1.0.5 versions the C code of its COp ops (DimShuffle among them) by hash() of
    their source, which Python 3 salts per process: under a random seed no run finds the
    module an earlier run compiled, and each one compiles it again (1.2 s of g++ here, every
    verify). The seed only salts str hashes: it cannot change whether Theano imports, which
    config files it reads or what they say, so the check still runs what the user runs."""
    env = dict(base)
    if not env.get("PYTHONHASHSEED"):  # an empty one is no seed to Python
        env["PYTHONHASHSEED"] = "0"
    return env


class TheanoRun(Struct, frozen=True):
    """How the check starts Theano: the user's environment, the config files Theano reads in
    it (in order, later ones win) and, in words, which they are and which flags it ran with."""

    env: dict
    files: tuple[Path, ...]
    named_by_option: bool  # THEANORC set to the file --theanorc names, outside the user's list
    scratch_compiledir: bool = False  # root with another user's HOME: see scratch_compiledir

    @property
    def existing(self) -> list[Path]:
        return [f for f in self.files if f.exists()]

    def config_words(self) -> str:
        """"config F, THEANO_FLAGS ..." or "no Theano config (F does not exist), ...": what
        follows "with" in a detail."""
        how = (" (THEANORC set to the file --theanorc names: Theano reads it only so)"
               if self.named_by_option else "")
        flags = self.env.get("THEANO_FLAGS")
        flags_words = ", THEANO_FLAGS " + (repr(flags) if flags else "unset")
        if self.scratch_compiledir:
            flags_words += (" (run as root with another user's HOME: Theano compiled in a "
                            "scratch base_compiledir, so that root leaves nothing of its own "
                            "in their ~/.theano)")
        if not self.files and "THEANORC" in self.env:
            return ("no Theano config ($THEANORC is set but names no file, so Theano reads "
                    f"none){how}{flags_words}")
        if not self.existing:
            named = " or ".join(map(str, self.files)) or "~/.theanorc (HOME unset)"
            return f"no Theano config ({named} does not exist){how}{flags_words}"
        shown = ", ".join(str(f) + ("" if f.exists() else " (absent)") for f in self.files)
        return f"config {shown}{how}{flags_words}"


def user_run(base: Mapping[str, str], theanorc: Path | None) -> TheanoRun:
    """The user's environment as it is: Theano finds its config through THEANORC or HOME
    (~/.theanorc) there, and THEANO_FLAGS is left alone. Only a `theanorc` that is not among
    the files Theano would read is put in THEANORC, so that the file asked about is the one
    checked; the detail says so."""
    env = with_fixed_hash_seed(base)
    home = env.get("HOME") or home_without_home_set()
    files = config_files(env, Path(home)) if home else []
    own = needs_scratch_compiledir(env)
    # the file written by default where Theano reads none ($THEANORC set empty) is not one
    # --theanorc named: Theano runs as the user's does, reading none, and the detail says so
    default = default_path(env, Path(home)) if home else None
    if theanorc is not None and os.path.realpath(theanorc) not in {
            os.path.realpath(f) for f in files} and not (
            not files and default is not None
            and os.path.realpath(theanorc) == os.path.realpath(default)):
        env["THEANORC"] = str(theanorc)
        return TheanoRun(env, (theanorc,), True, own)
    return TheanoRun(env, tuple(files), False, own)


def home_without_home_set() -> str | None:
    """The home Theano reads `~/.theanorc` from when HOME is unset (a systemd unit, `env -i`,
    some cron and fleet runners): os.path.expanduser's, this user's home in the password
    database. None where it has none."""
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_dir or None
    except KeyError:
        return None


def needs_scratch_compiledir(env: Mapping[str, str]) -> bool:
    """Whether this is root running Theano with another user's HOME (`sudo` keeps it on many
    systems) and no base_compiledir in THEANO_FLAGS: Theano would make ~/.theano and its
    compiledir there as root's (0750), and that user's own Theano then stops ("Unable to
    create the compiledir directory")."""
    home = env.get("HOME")
    if not home or "base_compiledir" in env.get("THEANO_FLAGS", ""):
        return False
    return os.path.lexists(home) and root_in_another_users(Path(home))


@contextlib.contextmanager
def scratch_compiledir(env: Mapping[str, str]) -> Iterator[dict[str, str]]:
    """`env`, where needs_scratch_compiledir, with THEANO_FLAGS' base_compiledir a scratch
    directory of root's, removed afterwards (Theano compiles again each time, which only
    such a run pays). Nothing else of how Theano runs changes."""
    run_env = dict(env)
    if not needs_scratch_compiledir(env):
        yield run_env
        return
    with tempfile.TemporaryDirectory(prefix="cudnn-setup-theano-") as scratch:
        if "," in scratch or "=" in scratch:  # THEANO_FLAGS could not carry it
            yield run_env
            return
        flags = run_env.get("THEANO_FLAGS", "")
        run_env["THEANO_FLAGS"] = ",".join(f for f in (flags, f"base_compiledir={scratch}") if f)
        yield run_env


def theanorc_for(python: str) -> str:
    """The command that writes [blas] ldflags for `python`'s Theano, as a hint gives it: the
    interpreter named, since the tool's own (pipx, a venv of its own) may have no numpy."""
    return f"cudnn-setup theanorc --python {escape(shlex.quote(python))}"


def import_failure(error: str, numpy: str | None, run: TheanoRun, python: str) -> str:
    """Why `import theano` failed under the user's config, and the fix where it is known.
    The fix names `python`: theanorc asks that interpreter's numpy, and the tool's own (pipx,
    a venv of its own) may have none."""
    said = f"`import theano` fails with {run.config_words()}: {error}"
    if "blas_opt_info" not in error:
        return said
    theanorc = theanorc_for(python)
    if not run.files and "THEANORC" in run.env:
        return (f"{said}; numpy {numpy or '?'} has no blas_opt_info, which Theano 1.0.5 reads "
                "unless [blas] ldflags is set, and $THEANORC, set empty, names no config to set "
                f"it in. Fix: unset THEANORC (or name a file in it), then `{theanorc}`")
    where = run.files[-1] if run.files else Path("~/.theanorc")
    return (f"{said}; numpy {numpy or '?'} has no blas_opt_info, which Theano 1.0.5 reads "
            f"unless [blas] ldflags is set, and no config it reads sets it. Fix: `{theanorc}` "
            "writes it (the BLAS this machine links, or empty), or add '[blas]' with "
            f"'ldflags =' to {where}")


def has_theano(python: str, env: Mapping[str, str], runner: Runner | None = None) -> bool:
    """Whether `python`, started from `env` (the command's: its PYTHONPATH counts), finds
    Theano; nothing is imported. Unanswered when it does not say (it could not be started, it
    hung, it failed before asking): that is no "not installed"."""
    done = run_command([python, "-c", "import importlib.util as u; "
                        "print('theano', bool(u.find_spec('theano')))"], 60, env, runner=runner)
    said = done.out.split()[-2:] if done.answered and done.returncode == 0 else []
    if said not in (["theano", "True"], ["theano", "False"]):
        raise Unanswered(done.unanswered() if not done.ok else
                         f"it printed no answer ({escape(done.out.strip()[-200:])})")
    return said[1] == "True"


def theano_range_note(version: str | None) -> str | None:
    """Why Theano 1.0.5 cannot use this cuDNN, or what it says about it (7.2 and later v7: a
    warning), from facts/theano.py's table; None when it is fine or the version is unknown."""
    parts = split_version(version)
    if parts is None:
        return None
    reason = theano_facts.rule_for(parts).reason
    return reason.format(version=version) if reason else None


def theano_supports(version: str | None) -> bool:
    parts = split_version(version)
    return parts is not None and theano_facts.rule_for(parts).usable


class TheanoGraphs(Struct, frozen=True):
    """What probes/theano_graph.py answers, the fields the check judges; BadAnswer when one of
    them is missing or of another type."""

    theano_version: str
    device: str
    exp_ok: bool
    conv_op: str | None
    conv_shape: list
    uses_cudnn: bool
    optimizer_including: str

    @classmethod
    def read(cls, answer: Fields) -> TheanoGraphs:
        return cls(answer.need_text("theano_version", 100), answer.need_text("device", 100),
                   answer.need_flag("exp_ok"), answer.text("conv_op", 100),
                   answer.need_list("conv_shape"), answer.need_flag("uses_cudnn"),
                   answer.text("optimizer_including", 10000) or "")


def why_not_cudnn(said: TheanoAnswer, inst: Installation, gpu: Check | None) -> str:
    """The one reason Theano does not use cuDNN here, most fundamental first: no cuDNN at all;
    a GPU no cuDNN can run on; a cuDNN outside Theano's range (on any machine, GPU or not);
    no GPU; device=cpu; what Theano itself said."""
    if inst.library("libcudnn") is None and inst.header_file is None:
        return f"there is no cuDNN in {inst.root.path} ({inst.lib_dir}, {inst.include_dir})"
    cc = gpu.answer.compute_capability if isinstance(gpu, GpuCheck) and gpu.answer else None
    if cc and gpus.cc_tuple(cc) < gpus.cc_tuple(gpus.THEANO_MIN_CC):
        return f"the GPU has compute capability {cc}; Theano's cuDNN path needs {gpus.THEANO_MIN_CC}"
    if inst.version and not theano_supports(inst.version):
        return theano_range_note(inst.version) or f"Theano 1.0.5 does not support cuDNN {inst.version}"
    if gpu is not None and gpu.status == SKIP:
        return f"no GPU here ({gpu.detail}); Theano runs on the CPU"
    if (said.device or "cpu").startswith("cpu"):
        return "device=cpu: set [global] device=cuda in the theanorc to use the GPU"
    return said.dnn_reason or "Theano did not pick a cuDNN op"


def check_theano(inst: Installation, facts: CheckFacts) -> Check:
    """The theano check of `facts.python` with the config `facts.theanorc`; the gpu check of
    this run only words why cuDNN was not used, so it is waited for after Theano's graphs ran.
    The command's runner ends Theano's child with the command (it may compile for minutes)."""
    if not facts.theano:
        return Check("theano", SKIP, "--no-theano")
    python, theanorc, env, runner = facts.python, facts.theanorc, facts.env, facts.runner
    try:
        installed = has_theano(python, env, runner)
    except Unanswered as silent:
        return Check("theano", FAIL,
                     f"could not ask {python} whether Theano is installed: {silent}")
    if not installed:
        note = theano_range_note(inst.version) if not theano_supports(inst.version) else None
        return Check("theano", SKIP, (f"{note}; besides, " if note else "")
                     + f"Theano is not installed for {python}; {INSTALL_HINT}")
    if (why := unreadable_for_theano(theanorc)) is not None:
        return Check("theano", FAIL, f"Theano cannot start with its config: {why}")
    # Nothing is added to the user's environment but the hash seed (with_fixed_hash_seed) and,
    # for root with another user's HOME, where Theano compiles (scratch_compiledir): not the
    # library dir (the loader check says whether programs find it), not a blas.ldflags.
    run = user_run(env, theanorc)
    with scratch_compiledir(run.env) as probe_env:
        result = run_probe(probe_module("theano_graph"), THEANO_TIMEOUT, probe_env,
                           python=python, runner=runner)
    if result.data is None:
        what = "timed out" if result.timed_out else f"failed ({result.crashed or result.returncode})"
        return Check("theano", FAIL, f"Theano's test graphs {what} with "
                     f"{run.config_words()}: {result.last_error_line()[:300]}")
    said = TheanoAnswer.read(result.answer(WHAT))
    data = dict(said.to_dict(), config_files=[str(f) for f in run.files],
                theano_flags=run.env.get("THEANO_FLAGS"))
    if said.import_error is not None:
        return Check("theano", FAIL, import_failure(said.import_error, said.numpy, run, python), data)
    try:
        got = TheanoGraphs.read(result.answer(WHAT))
    except BadAnswer as exc:
        return Check("theano", FAIL, f"Theano's test graphs ran but their answer cannot be "
                     f"judged: {exc}")
    summary = (f"Theano {got.theano_version} on {got.device} with {run.config_words()}: "
               f"T.exp {'ok' if got.exp_ok else 'WRONG'}, conv net used {got.conv_op}")
    if not got.exp_ok or got.conv_shape != [2, 8, 10, 10]:
        return Check("theano", FAIL, summary + ": wrong results", data)
    if got.uses_cudnn:
        return Check("theano", PASS, summary + " (cuDNN)", data)
    reason = why_not_cudnn(said, inst, facts.result_of("gpu"))
    data["reason"] = reason
    usable = theano_supports(inst.version)
    if theanorc is None:  # the config was left alone (install --no-theanorc): nothing to ask of it
        return Check("theano", WARN, f"{summary}, not cuDNN: {reason}", data)
    if not run.existing:  # the summary says there is none; a cuDNN Theano can use wants one
        return Check("theano", FAIL if usable else WARN, f"{summary}; Theano runs with its "
                     "defaults, without the cuDNN settings (`cudnn-setup theanorc` writes "
                     f"them); not cuDNN: {reason}", data)
    if usable and "cudnn" not in got.optimizer_including.split(":"):
        return Check("theano", FAIL, f"{summary}; the config does not ask for cuDNN "
                     f"(optimizer_including={got.optimizer_including!r}): run `cudnn-setup "
                     "theanorc`", data)
    return Check("theano", WARN, f"{summary}, not cuDNN: {reason}", data)


def stale_dnn_paths(effective: dict) -> list[dict]:
    """Problems with Theano's [dnn] paths (theanorc.effective_config()["effective"]) that point
    where there is no cuDNN, e.g. at a root after `cudnn-setup uninstall`: Theano compiles with
    -I<include_path> -L<library_path> -lcudnn (base_path/include and base_path/lib64 when those
    are unset). fail when optimizer_including=cudnn makes Theano stop on it, else warn (Theano
    falls back without cuDNN); nothing when [dnn] enabled is False."""
    def value(key: str) -> str | None:
        entry = effective.get(key) or {}
        return entry.get("value") or None

    def origin(key: str) -> str:
        return (effective.get(key) or {}).get("from", "?")

    enabled = (value("dnn.enabled") or "auto").strip().lower()
    if enabled in ("false", "0", "no"):
        return []
    including = (value("global.optimizer_including") or "").split(":")
    severity = FAIL if "cudnn" in including else WARN
    base = value("dnn.base_path")
    wanted = [("dnn.include_path", value("dnn.include_path"), "cudnn.h"),
              ("dnn.library_path", value("dnn.library_path"), "libcudnn.so")]
    out = []
    for key, path, needs in wanted:
        derived = False
        if path is None and base:
            path, derived = str(Path(base) / ("include" if needs == "cudnn.h" else "lib64")), True
        if path is None:
            continue
        where = Path(path)
        found = (where / needs).exists() if needs == "cudnn.h" else \
            where.is_dir() and any(where.glob("libcudnn.so*"))
        if found:
            continue
        name = "dnn.base_path" if derived else key
        what = "does not exist" if not where.exists() else f"has no {needs}"
        out.append({"severity": severity, "check": "theano-config",
                    "message": f"Theano's {name} ({value(name)}, from {origin(name)}) points where "
                               f"there is no cuDNN: {path} {what}",
                    "fix": "run `cudnn-setup theanorc --cuda-root ROOT` for the root that holds "
                           "cuDNN, or remove the [dnn] paths"})
    return out
