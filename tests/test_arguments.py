"""The command line's grammar (arguments.py): every option reaches its command under the name the
command takes, options and arguments mix in any order, and what does not parse is exit 2 with
the message the tool has always given, one JSON object under --json, nothing run."""
import importlib
import inspect
import io
import json
from pathlib import Path

import pytest

from cudnn_setup.arguments import COMMANDS, ArgsError, parse, help_text
from cudnn_setup.cli import main


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_option_is_a_keyword_its_command_takes(name):
    """A misspelt dest would be a TypeError at run time: here it is a failed test."""
    command = COMMANDS[name]
    module, function = command.target.split(":")
    run = getattr(importlib.import_module(f"cudnn_setup.commands.{module}"), function)
    takes = set(inspect.signature(inspect.unwrap(run)).parameters) - {"result", "ctx"}
    given = {o.dest for o in command.options if o.dest != "json_"} | {
        a.dest for a in command.arguments}
    assert given == takes, {"not taken": given - takes, "not given": takes - given}
    values = parse([name, *(["x", "9"][:len(command.arguments)])], {}).values
    # a flag passed only when given (a command built before it existed runs as before)
    assert set(values) == takes - {o.dest for o in command.options if o.only_if_given}


def test_help_names_every_option_and_argument_of_the_table():
    for command in COMMANDS.values():
        text = help_text(command)
        for opt in command.options:
            assert f"{', '.join(opt.flags)}{' ' + opt.metavar if opt.metavar else ''}" in text
        for arg in command.arguments:
            assert f"  {arg.metavar}  " in text
    top = help_text(None)
    assert all(f"  {name}" in top for name in COMMANDS) and "--version" in top


def test_options_and_arguments_mix_in_any_order():
    got = parse(["mirror", "--cuda", "12", "out", "9", "--platform", "linux-sbsa", "9.1",
                 "--cuda", "13", "--json"], {})
    assert got.as_json and got.values["directory"] == Path("out")
    assert got.values["versions"] == ["9", "9.1"] and got.values["cudas"] == ["12", "13"]
    assert got.values["platforms"] == ["linux-sbsa"] and got.values["headers"] == []
    got = parse(["install", "--no-verify", "a.tgz", "--cuda-root=/r", "--header", "A: b",
                 "--header", "C: d"], {})
    assert got.values["source"] == "a.tgz" and got.values["cuda_root"] == Path("/r")
    assert got.values["no_verify"] and got.values["headers"] == ["A: b", "C: d"]
    assert not got.as_json
    # after `--` a word that starts with a dash is an argument, not an option
    assert parse(["install", "--", "-odd-name.tgz"], {}).values["source"] == "-odd-name.tgz"
    assert parse(["download", "u", "-o", "d"], {}).values["output"] == Path("d")


@pytest.mark.parametrize("argv, message", [
    (["install", "--bogus-option"], "No such option: --bogus-option"),
    (["install"], "Missing argument 'SOURCE'."),
    (["mirror", "dir"], "Missing argument 'VERSION...'."),
    (["install", "a", "b"], "Got unexpected extra argument(s) (b)"),
    (["install", "a", "--cuda-root"], "Option '--cuda-root' requires an argument."),
    (["download", "u", "-o"], "Option '-o' requires an argument."),
    (["list", "--json=yes"], "Option '--json' does not take a value."),
    (["bogus"], "No such command 'bogus'."),
    (["--json"], "No such option: --json"),
    (["install", "a", "--cuda-r", "/r"], "No such option: --cuda-r"),  # no prefix matching
    # an empty word is no value: as a path it would be the current directory
    (["install", "a", "--cuda-root="], "Invalid value for '--cuda-root': it is empty"),
    (["verify", "--lib-dir", ""], "Invalid value for '--lib-dir': it is empty"),
    (["install", "a", "--theanorc="], "Invalid value for '--theanorc': it is empty"),
    (["install", "a", "--header", "A: b", "--header="], "Invalid value for '--header': it is empty"),
    (["install", ""], "Invalid value for 'SOURCE': it is empty"),
    (["mirror", "d", "9", ""], "Invalid value for 'VERSION...': it is empty"),
])
def test_what_does_not_parse_says_so(argv, message):
    with pytest.raises(ArgsError) as err:
        parse(argv, {})
    assert err.value.message == message


def test_an_option_given_no_value_before_another_option_is_refused():
    """`--cuda-root --json`: --json is not taken as the CUDA root (and the install not run with
    a root named "--json"); the refusal is one JSON object all the same."""
    out, err = io.StringIO(), io.StringIO()
    code = main(["install", "x.tgz", "--cuda-root", "--json"], env={}, stdout=out, stderr=err)
    assert code == 2
    error = json.loads(out.getvalue())["error"]
    assert error["code"] == "usage" and error["message"] == \
        "Option '--cuda-root' requires an argument."
    assert "Usage: cudnn-setup install [OPTIONS] SOURCE" in err.getvalue()
    assert "Try 'cudnn-setup install --help' for help." in err.getvalue()


def test_an_unknown_command_under_json_is_one_object_pointing_at_the_programs_help():
    out, err = io.StringIO(), io.StringIO()
    assert main(["instal", "--json"], env={}, stdout=out, stderr=err) == 2
    got = json.loads(out.getvalue())
    assert got["command"] == "instal" and got["error"]["message"] == "No such command 'instal'."
    # typer's suggestions, then the program's help
    hint = got["error"]["hint"]
    assert hint.startswith("did you mean 'install'") and hint.endswith("(see `cudnn-setup --help`)")
    assert "did you mean 'install'" in err.getvalue()


def test_a_commands_option_before_the_command_says_where_it_goes():
    """`cudnn-setup --json install X`, as a provisioning script may write it: one JSON object,
    and a hint that moves the option after the command (not click's "did you mean
    --version?")."""
    out, err = io.StringIO(), io.StringIO()
    assert main(["--json", "verify"], env={}, stdout=out, stderr=err) == 2
    got = json.loads(out.getvalue())
    assert got["command"] == "verify" and got["error"]["message"] == "No such option: --json"
    assert got["error"]["hint"] == ("--json is an option of the command: put it after the "
                                    "command (`cudnn-setup verify --json`)")
    err = io.StringIO()
    assert main(["--cuda-root", "/opt/cuda"], env={}, stdout=io.StringIO(), stderr=err) == 2
    assert "put it after the command (`cudnn-setup COMMAND --cuda-root`)" in err.getvalue()
    err = io.StringIO()
    assert main(["--versio"], env={}, stdout=io.StringIO(), stderr=err) == 2
    assert "did you mean --version?" in err.getvalue()  # the program's own: a suggestion


def test_no_arguments_is_the_help_on_stderr_and_exit_2():
    out, err = io.StringIO(), io.StringIO()
    assert main([], env={}, stdout=out, stderr=err) == 2
    assert out.getvalue() == "" and err.getvalue().startswith("Usage: cudnn-setup [OPTIONS]")


def test_help_lines_fit_80_columns_and_words_given_are_shown_printable():
    for command in [None, *COMMANDS.values()]:
        assert max(len(line) for line in help_text(command).splitlines()) <= 80
    out, err = io.StringIO(), io.StringIO()
    assert main(["install", "--\x1b[31mred"], env={}, stdout=out, stderr=err) == 2
    assert "\x1b" not in err.getvalue()


def _lines(command, rng):
    """Command lines for `command`: its options in any order, some twice, in both spellings,
    with values that look like anything but an option; arguments among them, sometimes one
    starting with a dash after `--`."""
    many = any(a.many for a in command.arguments)
    for _ in range(60):
        pieces = []
        for opt in command.options:
            for _ in range(rng.choice([0, 0, 1, 2])):
                if opt.metavar is None:
                    pieces.append([opt.flags[0]])
                    continue
                value = rng.choice(["v", "/a b", "-", "-3", f"x{rng.random()}", "ü"])
                pieces.append([rng.choice(opt.flags), value] if rng.random() < 0.5 else
                              [f"{opt.name}={value}"])
        count = len(command.arguments) + (rng.choice([0, 1, 2]) if many else 0)
        pieces += [[f"arg{i}"] for i in range(count - rng.choice([0, 0, 1]))]
        rng.shuffle(pieces)
        line = [word for piece in pieces for word in piece]
        yield line + (["--", "-dash"] if rng.random() < 0.2 else [])


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_what_is_read_without_typer_is_what_typer_reads(name):
    """A command line typer would have nothing to say about is read by the grammar alone (every
    command pays for typer's import otherwise); both readings give the same values, from the
    environment too."""
    import random

    from cudnn_setup.arguments import Words, _judged

    command = COMMANDS[name]
    env = {"CUDNN_SETUP_CUDA_ROOT": "/env/cuda", "CUDNN_SETUP_CACHE_DIR": "/env/cache",
           "CUDNN_SETUP_MIRROR": "/env/mirror", "PIP_INDEX_URL": "http://env/simple"}
    read = 0
    for line in _lines(command, random.Random(name)):
        for environment in (env, {}):
            words = Words(command, line)
            fast = words.values(environment)
            if fast is None:
                continue
            read += 1
            assert fast == _judged(command, words, environment), line
    assert read >= 60


def test_a_mistyped_option_gets_the_options_it_is_close_to():
    """`--cuda-rot` as typed in a hurry: the hint names the option meant."""
    out, err = io.StringIO(), io.StringIO()
    assert main(["install", "x.tgz", "--cuda-rot", "/r", "--json"], env={}, stdout=out,
                stderr=err) == 2
    error = json.loads(out.getvalue())["error"]
    assert error["message"] == "No such option: --cuda-rot"
    assert "--cuda-root" in error["hint"] and error["hint"].startswith("did you mean")
    assert "hint: did you mean" in err.getvalue()


def test_install_help_says_what_source_may_be():
    """A new user's first question: a wheel, a PyPI version? The help answers it."""
    out = io.StringIO()
    assert main(["install", "-h"], env={"COLUMNS": "80"}, stdout=out, stderr=io.StringIO()) == 0
    text = " ".join(out.getvalue().split())
    for words in (".tgz", ".tar.xz", ".whl", "http(s)/file URL", "a version (9, 9.17",
                  "--from pypi"):
        assert words in text, words
    out = io.StringIO()
    assert main(["inspect", "-h"], env={"COLUMNS": "80"}, stdout=out, stderr=io.StringIO()) == 0
    assert ".whl" in out.getvalue()


def test_cuda_root_help_names_every_place_the_root_is_looked_for(tmp_path):
    """--cuda-root's help lists discovery in full: a machine with only /usr/local/cuda-12.4
    (no /usr/local/cuda link) is found, and its user should be able to read why."""
    from cudnn_setup.facts.cuda import discovery_steps
    (tmp_path / "usr" / "local").mkdir(parents=True)
    places = [step()[1].replace(str(tmp_path), "") for step in
              discovery_steps({}, None, prefix=tmp_path)]
    assert len(places) == 7 and "newest /usr/local/cuda-X.Y" in places
    for command in ("install", "verify", "doctor", "list", "uninstall", "repair", "theanorc",
                    "bench"):
        out = io.StringIO()
        assert main([command, "-h"], env={"COLUMNS": "80"}, stdout=out,
                    stderr=io.StringIO()) == 0
        text = " ".join(out.getvalue().split())
        for place in places:
            assert place in text, (command, place)
