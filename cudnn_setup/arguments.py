"""Reading a command line against the grammar (grammar.py): `parse()` reads argv and returns what
to run, or raises `ArgsError` (exit 2); `help_text()` writes a command's help.

The words are read here once, left to right (linear however many options are given): which are
options, their values, the arguments. typer (cudnn_setup/typer_app.py, built from this table)
then judges a command line cut to one occurrence of each option (click's parser is quadratic in
the number of words), writes help, suggests and completes. `--version` needs none of it, so
typer is imported only past that point.
"""
from __future__ import annotations

from cudnn_setup.grammar import (COMMANDS, HELP_FLAGS, ArgsError, Command, Opt,
                                 versions_source, versions_source_hint)


class Parsed:
    """What the command line asks for: `help` (the text; `code` 0, or 2 when nothing at all
    was given and it goes to stderr), `version`, `done` (typer answered it already: shell
    completion; `code` its exit code), else `command` and the keyword `values` its function
    takes; `as_json` for --json."""

    def __init__(self, command: Command | None = None, values: dict | None = None,
                 as_json: bool = False, help: str | None = None, version: bool = False,
                 code: int = 0, done: bool = False):
        self.command, self.values, self.as_json = command, values or {}, as_json
        self.help, self.version, self.code, self.done = help, version, code, done


def parse(argv: list[str], env, cwd=None) -> Parsed:
    """Read argv (the words after the program's name); `env` is the command's environment (the
    PATH --python is looked up in, the variables options default to), `cwd` the directory
    relative paths are read from."""
    if not argv:
        return Parsed(help=help_text(None), code=2)
    first = argv[0]
    if first.startswith("-"):
        before = argv[:argv.index("--")] if "--" in argv else argv
        if "--version" in before:
            return Parsed(version=True)
        if any(flag in before for flag in HELP_FLAGS):
            return Parsed(help=help_text(None))
    if first == "--":  # click would take what follows for no command at all, and say nothing
        raise ArgsError("`--` ends the options; the command comes first",
                        hint="give the command: cudnn-setup COMMAND [OPTIONS] (see `cudnn-setup "
                             "--help`)")
    command = COMMANDS.get(first)
    if command is None:  # the program's own options (completion), or what it does not know
        from cudnn_setup import typer_app

        return Parsed(done=True, code=typer_app.run_top(argv))
    words = Words(command, argv[1:])
    if words.help:
        return Parsed(command, help=help_text(command))
    values = _values(command, words, env, cwd)
    as_json = values.pop("json_")
    return Parsed(command, values, as_json=as_json)


class Words:
    """A command's words read once, left to right: each option's values (`given`, by dest, in
    order, with the spelling used), the arguments, and `judge`: the same command line with each
    option once and one word of a repeatable argument, which is what typer is handed (what it
    would refuse in the whole line it refuses in this one)."""

    def __init__(self, command: Command, words: list[str]):
        takes_value = {f: o for o in command.options if o.metavar is not None for f in o.flags}
        flags = {f: o for o in command.options if o.metavar is None for f in o.flags}
        self.given: dict[str, list[tuple[str, str | None]]] = {}
        self._repeat: dict[str, bool] = {}
        self.arguments: list[str] = []
        self.help = False
        self.words = words
        unknown: list[str] = []
        i, n = 0, len(words)
        while i < n:
            word = words[i]
            i += 1
            if word == "--":
                self.arguments += words[i:]
                break
            name, eq, value = word.partition("=") if word.startswith("--") else (word, "", "")
            if word in takes_value:
                if i == n or _an_option(words[i]):  # `--cuda-root --json`: never the value
                    raise ArgsError(f"Option '{word}' requires an argument.", command.name,
                                    command)
                self._add(takes_value[word], word, words[i])
                i += 1
            elif eq and name in takes_value:
                self._add(takes_value[name], name, value)
            elif word in flags:
                self._add(flags[word], word, None)
            elif word in HELP_FLAGS:
                self.help = True
            elif _an_option(word):  # unknown, `--json=yes`, `-oDIR`: typer judges it
                unknown.append(word)
            else:
                self.arguments.append(word)
        fixed = [a for a in command.arguments if not a.many]
        many = len(command.arguments) > len(fixed)
        shown = self.arguments[:len(fixed) + 1] if many else self.arguments
        options = []
        for dest, values in self.given.items():
            spelling, value = values[0] if self._repeat[dest] else values[-1]
            options.append(spelling if value is None else f"{_long(command, dest)}={value}")
        self.judge = [*unknown, *options, "--", *shown]
        self.command, self.unknown = command, unknown

    def values(self, env) -> dict | None:
        """The keyword values, read without typer where typer would have nothing to say: no
        word it would refuse (an unknown option, a value given to a flag), the arguments there
        and not too many. None: typer judges (tests/test_arguments.py holds both to the same
        answers)."""
        command, count = self.command, len(self.arguments)
        needed = sum(a.required for a in command.arguments)
        many = any(a.many for a in command.arguments)
        if self.unknown or count < needed or (not many and count > len(command.arguments)):
            return None
        values: dict = {}
        for opt in command.options:
            got = [value for _, value in self.given.get(opt.dest, [])]
            if opt.metavar is None:
                values[opt.dest] = bool(got)
            elif opt.repeat:
                values[opt.dest] = got
            else:
                values[opt.dest] = got[-1] if got else opt.default(env)
        for i, arg in enumerate(command.arguments):
            values[arg.dest] = self.arguments[i:] if arg.many else (
                self.arguments[i] if i < count else None)
        return values

    def _add(self, opt: Opt, spelling: str, value: str | None) -> None:
        self._repeat[opt.dest] = opt.repeat
        self.given.setdefault(opt.dest, []).append((spelling, value))


def _an_option(word: str) -> bool:
    """What argparse took for an option: a dash and more, but not a negative number."""
    if not word.startswith("-") or word == "-":
        return False
    try:
        float(word)
        return False
    except ValueError:
        return True


def _long(command: Command, dest: str) -> str:
    return next(o.name for o in command.options if o.dest == dest)


def _values(command: Command, words: Words, env, cwd) -> dict:
    values = words.values(env)
    if values is None:
        values = _judged(command, words, env)

    def refused(message: str, hint: str = "") -> ArgsError:
        return ArgsError(message, command.name, command, hint)

    # An empty word is never a value the tool can use, and as a path it would be the current
    # directory (Path("") is "."): `--cuda-root=` must not mean "here".
    for opt in command.options:
        given = values[opt.dest]
        if opt.metavar is not None and given is not None and "" in (
                given if opt.repeat else [given]):
            raise refused(f"Invalid value for '{opt.name}': it is empty",
                          f"give {opt.metavar} after {opt.name}, or leave the option out")
    for arg in command.arguments:
        value = values[arg.dest]
        if value is not None and "" in (value if arg.many else [value]):
            raise refused(f"Invalid value for '{arg.metavar}': it is empty")
        if arg.path and value is not None:
            values[arg.dest] = [_path(v) for v in value] if arg.many else _path(value)
    for opt in command.options:
        value = values[opt.dest]
        if opt.path and value is not None:
            values[opt.dest] = _path(value)
        if opt.check is not None and value is not None:
            why = opt.check(value, env, cwd)
            if why:
                hint = versions_source_hint(value) if opt.check is versions_source else ""
                raise refused(f"Invalid value for '{opt.name}': {why}", hint)
        if opt.only_if_given and not value:
            del values[opt.dest]
    return values


def _judged(command: Command, words: Words, env) -> dict:
    """The values as typer reads them (or its refusal, with the tool's hints)."""
    from cudnn_setup import typer_app

    try:
        values = typer_app.judge(command, words.judge, env)
    except ArgsError as exc:
        if exc.message.endswith("does not take a value."):  # --json=yes
            exc.hint = _flag_hint(exc.message.split("'")[1])
        elif exc.message.startswith("Got unexpected extra argument"):  # --json true
            exc.hint = _extra_hint(command, words.words) or exc.hint
        raise
    # what typer saw once, as given: every value of a repeatable option, every argument
    for opt in command.options:
        if opt.repeat:
            values[opt.dest] = [v for _, v in words.given.get(opt.dest, [])] or (
                list(values[opt.dest] or []))
    last = command.arguments[-1] if command.arguments else None
    if last is not None and last.many:
        values[last.dest] = words.arguments[len(command.arguments) - 1:]
    return values


def _path(value: str):
    from pathlib import Path

    return Path(value)


_BOOL_WORDS = {"true", "false", "yes", "no", "on", "off", "1", "0"}


def _flag_hint(flag: str) -> str:
    return f"{flag} is a flag and takes no value: give {flag} alone, or leave it out"


def _extra_hint(command: Command, words: list[str]) -> str:
    """`--json true` reads as a value given to a flag; say that flags take none."""
    flags = {f for o in command.options if o.metavar is None for f in o.flags}
    for before, word in zip(words, words[1:]):
        if word.lower() in _BOOL_WORDS and before in flags:
            return _flag_hint(before)
    return ""


def help_text(command: Command | None) -> str:
    """A command's help (the program's with None), as typer writes it."""
    from cudnn_setup import typer_app

    return typer_app.help_text(command)
