"""The typer application, built from the grammar's table (grammar.py): one command per entry,
each option with its value name, help and environment variable. It judges a command line that
arguments.Words has read, writes help, suggests what was mistyped and completes in bash, zsh and
fish. arguments.py imports it only past `--version`.

typer is pinned (pyproject.toml says why); it carries its own copy of click, typer._click, whose
exceptions and Context are the ones raised and used here.
"""
from __future__ import annotations

import inspect
from typing import Annotated, List, Optional

import typer
import typer.main
from typer._click import exceptions as click_errors

from cudnn_setup.grammar import COMMANDS, HELP_FLAGS, PROG, SUMMARY, ArgsError, Command

# Help as wide as a terminal of 80 columns, whatever the terminal; plain text (no rich boxes)
SETTINGS = {"help_option_names": list(HELP_FLAGS), "max_content_width": 80, "terminal_width": 80}
VERSION_HELP = "Show the version and exit."


def _callback(command: Command):
    """A function whose signature is the command's table entry, as typer reads functions."""
    keyword = inspect.Parameter.KEYWORD_ONLY
    params = []
    for arg in command.arguments:
        kind = List[str] if arg.many else (str if arg.required else Optional[str])
        info = typer.Argument(metavar=arg.metavar, help=arg.help, show_default=False)
        params.append(inspect.Parameter(arg.dest, keyword, annotation=Annotated[kind, info],
                                        **({} if arg.required else {"default": None})))
    for opt in command.options:
        if opt.metavar is None:
            kind, default = bool, False
            info = typer.Option(*opt.flags, help=opt.help, show_default=False)
        else:
            kind, default = (Optional[List[str]] if opt.repeat else Optional[str]), None
            info = typer.Option(*opt.flags, metavar=opt.metavar, help=opt.help,
                                show_default=False, envvar=opt.env,
                                show_envvar=opt.env is not None)
        params.append(inspect.Parameter(opt.dest, keyword, annotation=Annotated[kind, info],
                                        default=default))

    def callback(**given):  # what typer read, by keyword, for the CLI to pass on
        return given

    callback.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    callback.__annotations__ = {p.name: p.annotation for p in params}
    callback.__doc__ = command.summary
    return callback


def _app(commands) -> typer.Typer:
    app = typer.Typer(name=PROG, help=SUMMARY, add_completion=True, rich_markup_mode=None,
                      pretty_exceptions_enable=False, context_settings=SETTINGS)
    for command in commands:
        app.command(command.name, help=command.summary, short_help=command.summary,
                    context_settings=SETTINGS)(_callback(command))
    return app


def _group(env=None):
    """The whole program: every command, `--version`, the completion options."""
    app = _app(COMMANDS.values())

    @app.callback(help=SUMMARY)
    def top(version: Annotated[bool, typer.Option("--version", help=VERSION_HELP)] = False):
        pass  # --version is answered before typer is imported: here it is shown in help

    group = typer.main.get_command(app)
    for sub in getattr(group, "commands", {}).values():
        _read_env(sub, COMMANDS[sub.name], env or {})
    return group


def _command(command: Command, env):
    """One command alone (typer gives a lone command, not a group), reading `env`."""
    cmd = typer.main.get_command(_app([command]))
    _read_env(cmd, command, env)
    return cmd


def _read_env(cmd, command: Command, env) -> None:
    """Options default to the command's environment (the one main() was given, not this
    process's), and only those the CLI reads itself: the others' variables are read below, where
    their precedence among config files is known; help shows them all."""
    options = {o.dest: o for o in command.options}
    for param in cmd.params:
        opt = options.get(param.name)
        if opt is None or opt.env is None:
            continue
        param.resolve_envvar_value = lambda ctx, value=opt.default(env): value


def judge(command: Command, words: list[str], env) -> dict:
    """The values typer reads from `words` (arguments.Words.judge), or ArgsError."""
    cmd = _command(command, env)
    try:
        with cmd.make_context(f"{PROG} {command.name}", list(words)) as ctx:
            return dict(cmd.invoke(ctx))
    except click_errors.UsageError as exc:
        raise _refusal(exc, command) from None


def _refusal(exc, command: Command | None) -> ArgsError:
    """click's words, its suggestions moved into the hint."""
    message, hint = exc.format_message(), ""
    missing = getattr(exc, "param", None) if isinstance(exc, click_errors.MissingParameter) \
        else None
    arg = next((a for a in command.arguments if a.dest == missing.name), None) if (
        command and missing is not None) else None
    if arg is not None:  # typer's arguments are click parameters: say which, as click would
        message = f"Missing argument '{arg.metavar}'."
    elif isinstance(exc, click_errors.NoSuchOption) and exc.possibilities:
        message = exc.message
        hint = f"did you mean {' or '.join(sorted(exc.possibilities))}?"
    elif ". Did you mean " in message:  # typer's suggestion for a command
        message, _, rest = message.partition(". Did you mean ")
        message += "."
        hint = f"did you mean {rest.rstrip('?')}? (see `{PROG} --help`)"
    name = command.name if command else ""
    return ArgsError(message, name, command, hint)


def run_top(argv: list[str]) -> int:
    """The program's own options (--install-completion, --show-completion) or what is not a
    command: typer answers or refuses (ArgsError, with the command given)."""
    group = _group()
    try:
        with group.make_context(PROG, list(argv)) as ctx:
            group.invoke(ctx)
        return 0
    except typer.Exit as exc:
        return exc.exit_code
    except SystemExit as exc:  # how typer's completion options end
        return exc.code if isinstance(exc.code, int) else 0
    except click_errors.UsageError as exc:
        error = _refusal(exc, None)
        error.command = next((a for a in argv if not a.startswith("-")), "")
        option = getattr(exc, "option_name", None)
        command = COMMANDS.get(error.command)
        takes = [c.name for c in ([command] if command else COMMANDS.values())
                 if any(option in o.flags for o in c.options)]
        if isinstance(exc, click_errors.NoSuchOption) and takes:
            # `cudnn-setup --json install X`: the command's option given before the command
            error.hint = (f"{option} is an option of the command: put it after the command "
                          f"(`{PROG} {takes[0] if command else 'COMMAND'} {option}`)")
        raise error from None


def help_text(command: Command | None) -> str:
    """A command's help (the program's with None), plain text."""
    group = _group()
    if command is None:
        ctx = group.make_context(PROG, [], resilient_parsing=True)
        text = group.get_help(ctx)
    else:
        cmd = group.commands[command.name]
        ctx = cmd.make_context(f"{PROG} {command.name}", [], resilient_parsing=True)
        # the usage line the tool's refusals show too (typer writes a required SOURCE {SOURCE})
        text = "\n".join([command.usage(), *cmd.get_help(ctx).splitlines()[1:]])
    return text


def complete(argv: list[str]) -> int:
    """Shell completion asked by the script the shell sourced (its variables name the words)."""
    group = _group()
    try:
        group.main(args=argv, prog_name=PROG, standalone_mode=True)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 0
    return 0
