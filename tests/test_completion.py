"""Shell completion as a shell uses it: the script typer writes is sourced in a real bash, the
completion function it registers is called with COMP_WORDS and COMP_CWORD set as bash sets them,
and it runs the program to get its answer."""
import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, clean_env


@pytest.fixture
def on_path(tmp_path, home):
    """`cudnn-setup` on PATH (the program run from this checkout) and the environment to run a
    shell in."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    program = bindir / "cudnn-setup"
    program.write_text(f'#!/bin/sh\nexec {sys.executable} -m cudnn_setup "$@"\n')
    program.chmod(0o755)
    env = clean_env(home)
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', os.defpath)}"
    return env


def script(shell: str, env) -> str:
    """The script `--show-completion` writes for `shell`: named, as a user may, instead of
    detected from the parent process (which is no shell here)."""
    env = {**env, "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}
    done = subprocess.run(["cudnn-setup", "--show-completion", shell], env=env,
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr
    return done.stdout


def bash(commands: str, env) -> str:
    done = subprocess.run(["bash", "--norc", "--noprofile", "-c", commands], env=env,
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    return done.stdout


def complete(env, *words: str) -> list[str]:
    """What bash offers for the last of `words` (COMP_CWORD pointing at it)."""
    quoted = " ".join(f"'{w}'" for w in ("cudnn-setup", *words))
    # the shell detects itself: the script is asked for from within bash
    out = bash('eval "$(cudnn-setup --show-completion)"\n'
               f"COMP_WORDS=({quoted}); COMP_CWORD={len(words)}\n"
               'function=$(complete -p cudnn-setup | sed -E "s/.* -F ([^ ]+) .*/\\1/")\n'
               # as bash calls it: the command, the word completed, the word before it
               '"$function" cudnn-setup "${COMP_WORDS[COMP_CWORD]}" '
               '"${COMP_WORDS[COMP_CWORD-1]}"\n'
               'printf "%s\\n" "${COMPREPLY[@]}"', env)
    return out.split()


def test_the_bash_script_registers_a_completion_function(on_path):
    text = bash("cudnn-setup --show-completion", on_path)  # bash detected as the shell
    assert "_CUDNN_SETUP_COMPLETE=complete_bash" in text and text == script("bash", on_path)
    registered = bash(f"{text}\ncomplete -p cudnn-setup", on_path)
    assert registered.startswith("complete ") and "-F _cudnn_setup_completion" in registered
    assert registered.rstrip().endswith(" cudnn-setup")


def test_bash_offers_commands_options_and_none_that_do_not_fit(on_path):
    assert complete(on_path, "ins") == ["inspect", "install"]
    assert complete(on_path, "rep") == ["repair"]
    assert "--cuda-root" in complete(on_path, "install", "--cuda-r")
    offered = complete(on_path, "verify", "--")
    assert {"--cuda-root", "--theanorc", "--json", "--help"} <= set(offered)
    assert "--sha256" not in offered  # install's, not verify's
    assert complete(on_path, "zzz") == []


@pytest.mark.parametrize("shell, marker", [("zsh", "#compdef cudnn-setup"),
                                           ("fish", "complete --command cudnn-setup")])
def test_zsh_and_fish_scripts_are_written(on_path, shell, marker):
    text = script(shell, on_path)
    assert marker in text and "_CUDNN_SETUP_COMPLETE" in text


def test_install_completion_writes_into_the_users_shell_config(on_path, home):
    said = bash("cudnn-setup --install-completion", on_path)
    assert "bash completion installed in" in said
    assert "cudnn-setup" in (home / ".bashrc").read_text()
    sourced = list((home / ".bash_completions").iterdir())
    assert [p.name for p in sourced] == ["cudnn-setup.sh"]
    assert "_cudnn_setup_completion" in sourced[0].read_text()


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed (.ci/run installs it)")
def test_fish_offers_commands_and_options_through_the_script_it_sources(on_path):
    """fish's own `complete -C` asks the completion the script registers, as typing would."""
    source = script("fish", on_path)

    def fish(line: str) -> list[str]:
        done = subprocess.run(["fish", "--no-config", "-c", f"{source}\ncomplete -C {line!r}"],
                              env=on_path, capture_output=True, text=True, timeout=120, cwd=REPO)
        assert done.returncode == 0, done.stderr
        return [row.split("\t")[0] for row in done.stdout.splitlines()]

    assert fish("cudnn-setup ins") == ["inspect", "install"]
    assert fish("cudnn-setup verify --cuda-r") == ["--cuda-root"]
    offered = fish("cudnn-setup verify --")
    assert {"--cuda-root", "--theanorc", "--json", "--help"} <= set(offered)
    assert "--sha256" not in offered
    assert fish("cudnn-setup zzz") == []
