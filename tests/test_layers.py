"""The package's import graph: layers that only look down, and no module cycles.

cli → commands → steps → mirror → sources → placement → benchmarks → (archive, checks,
installation, doctor_order, fetch, state, theanorc, settings, startup_line) → probing → facts →
(errors, report, records, text, child, digest, durable, parallel, trees, private_dirs,
untrusted, urls).
commands/ holds one module per CLI command, and none imports another: what several share is in steps/ (their
context and wrapper, fetching, choosing a release, the recovery, Theano and loader steps); the
install engine is placement/, which needs no verification layer; the mirror's is mirror/.
Probes run in other interpreters and import nothing of the package.
"""
import ast
import functools
from pathlib import Path

from conftest import REPO

PACKAGE = REPO / "cudnn_setup"
LAYER = {"cli": 4, "arguments": 4, "grammar": 4, "typer_app": 4, "crash_report": 4, "console": 4, "__main__": 5, "commands": 3, "mirror": 2.6, "steps": 2.75, "sources": 2.5,
         "placement": 2.25, "benchmarks": 2.1, "archive": 2,
         "checks": 2, "installation": 2, "doctor_order": 2, "fetch": 2, "probing": 1.5,
         "state": 2, "theanorc_merge": 2, "theano_blas": 2, "settings": 2, "startup_line": 2, "facts": 1,
         "errors": 0, "records": 0, "report": 0, "text": 0, "child": 0, "digest": 0, "durable": 0, "parallel": 0,
         "untrusted": 0, "urls": 0, "orphans": 0, "loader_traps": 0, "trees": 0, "private_dirs": 0,
         "probes": None}


def _module(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@functools.cache  # a dozen tests read the package's modules: parsed once per worker
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


@functools.cache
def _nodes(path: Path) -> tuple[ast.AST, ...]:
    return tuple(ast.walk(_tree(path)))


@functools.cache
def _imports() -> dict[str, frozenset[str]]:
    """Every module of the package → the package's modules it imports (anywhere in its body)."""
    modules = {_module(p): p for p in PACKAGE.rglob("*.py")}
    out: dict[str, frozenset[str]] = {}
    for name, path in modules.items():
        found = set()
        for node in _nodes(path):
            if isinstance(node, ast.ImportFrom) and node.level:
                found.add(f"relative import in {name}")  # not followed: see test_imports_are_seen
            elif isinstance(node, ast.ImportFrom) and node.module:
                base = node.module
                for alias in node.names:
                    candidate = f"{base}.{alias.name}"
                    found.add(candidate if candidate in modules else base)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
        out[name] = frozenset(m for m in found
                              if (m in modules or m.startswith("relative")) and m != name)
    return out


def test_imports_are_seen():
    """The checks below judge what _imports() finds: every import absolute, and the ones that
    hold the layers together found."""
    graph = _imports()
    assert not [m for found in graph.values() for m in found if m.startswith("relative")]
    assert len(graph) > 20
    assert any(m.startswith("cudnn_setup.commands") for m in graph["cudnn_setup.cli"])
    assert any(m.startswith("cudnn_setup.facts") for m in graph["cudnn_setup.placement.engine"])


def _layer(module: str):
    parts = module.split(".")
    return LAYER[parts[1]] if len(parts) > 1 else 0  # the package itself holds its version


def test_every_top_level_piece_has_a_layer():
    pieces = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
              if (p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists()))}
    assert {"cli", "commands", "facts", "errors"} <= pieces
    assert pieces - {"__init__"} <= set(LAYER), pieces - set(LAYER)


def test_nothing_imports_upward():
    wrong = []
    for module, imported in _imports().items():
        mine = _layer(module)
        for other in imported:
            theirs = _layer(other)
            if mine is None:
                wrong.append(f"{module} (a probe) imports {other}")
            elif other.split(".")[:2] != module.split(".")[:2] and theirs is not None \
                    and theirs > mine:
                wrong.append(f"{module} (layer {mine}) imports {other} (layer {theirs})")
    assert not wrong, "\n".join(sorted(wrong))


def test_no_import_cycles():
    graph = _imports()
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if nxt.endswith("__main__"):
                continue
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(path[path.index(nxt):] + [nxt]) if nxt in path
                              else f"{node} -> {nxt}")
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, "\n".join(cycles)


def test_sources_sit_between_the_work_and_the_commands():
    """sources/ uses fetch/ and archive/ and is used by commands/; nothing below it (fetch,
    archive, state, checks, facts) reaches up into it, and it never reaches into commands/."""
    graph = _imports()
    sources = {m: found for m, found in graph.items() if m.startswith("cudnn_setup.sources")}
    assert len(sources) >= 7  # base, tree, nvidia, mirror, pypi, local, url…
    uses = set().union(*sources.values())
    assert any(m.startswith("cudnn_setup.fetch") for m in uses)
    assert any(m.startswith("cudnn_setup.archive") for m in uses)
    assert not any(m.startswith(("cudnn_setup.commands", "cudnn_setup.cli")) for m in uses)
    below = [m for m, found in graph.items()
             if _layer(m) is not None and _layer(m) < LAYER["sources"]
             and any(f.startswith("cudnn_setup.sources") for f in found)]
    assert not below, below
    assert any(f.startswith("cudnn_setup.sources") for f in graph["cudnn_setup.steps.by_version"])



# The CLI's commands, each in the module of its name (cli.py dispatches to them).
COMMANDS = {"install", "download", "list", "mirror", "verify", "inspect", "uninstall", "theanorc",
            "doctor", "bench", "repair"}


def test_commands_hold_one_module_per_command_and_none_imports_another():
    graph = _imports()
    commands = {m for m in graph if m.startswith("cudnn_setup.commands.")}
    assert {m.rsplit(".", 1)[1] for m in commands} == COMMANDS
    crossing = sorted(f"{m} imports {f}" for m in commands for f in graph[m]
                      if f.startswith("cudnn_setup.commands"))
    assert not crossing, "\n".join(crossing)
    # the check sees what the commands are built from
    assert any(f.startswith("cudnn_setup.placement") for f in graph["cudnn_setup.commands.install"])
    assert any(f.startswith("cudnn_setup.steps") for f in graph["cudnn_setup.commands.download"])


def test_the_install_engine_sits_below_what_fetches_and_chooses():
    """placement/ places an archive already on disk: it never reaches into the sources, the
    commands' steps or the commands."""
    graph = _imports()
    engine = {m: found for m, found in graph.items() if m.startswith("cudnn_setup.placement")}
    assert len(engine) >= 6  # engine, judge, targets, fit, same_archive, commit
    uses = set().union(*engine.values())
    assert any(m.startswith("cudnn_setup.state") for m in uses)
    assert not any(m.startswith(("cudnn_setup.sources", "cudnn_setup.steps",
                                 "cudnn_setup.commands", "cudnn_setup.cli")) for m in uses)
    below = [m for m, found in graph.items()
             if _layer(m) is not None and _layer(m) < LAYER["placement"]
             and any(f.startswith("cudnn_setup.placement") for f in found)]
    assert not below, below


# A command parses what it was given, calls its engine and fills a Result: the lines it may
# take, and what only an engine imports.
COMMAND_LINES = {"mirror": 120}
ENGINE_ONLY = {"cudnn_setup.archive", "cudnn_setup.fetch.mirror_tree", "cudnn_setup.durable",
               "cudnn_setup.fetch.redistrib_json", "cudnn_setup.digest"}


def test_commands_hold_no_engine():
    graph = _imports()
    for name, budget in COMMAND_LINES.items():
        path = PACKAGE / "commands" / f"{name}.py"
        lines = len(path.read_text().splitlines())
        assert lines <= budget, f"commands/{name}.py has {lines} lines, more than {budget}"
        tree = _tree(path)
        classes = [n.name for n in tree.body if isinstance(n, ast.ClassDef)]
        assert not classes, f"commands/{name}.py defines {classes}"
        engine = sorted(m for m in graph[f"cudnn_setup.commands.{name}"]
                        if m.startswith(tuple(ENGINE_ONLY)))
        assert not engine, f"commands/{name}.py imports {engine}"


def test_the_mirror_engine_is_used_by_the_mirror_command_only():
    graph = _imports()
    engine = {m for m in graph if m.startswith("cudnn_setup.mirror")}
    assert {"cudnn_setup.mirror.build", "cudnn_setup.mirror.manifest"} <= engine
    users = sorted(m for m, found in graph.items() if m not in engine
                   and any(f.startswith("cudnn_setup.mirror.") or f == "cudnn_setup.mirror"
                           for f in found))
    assert users == ["cudnn_setup.commands.mirror"], users
    uses = set().union(*(graph[m] for m in engine))
    assert not any(m.startswith(("cudnn_setup.steps", "cudnn_setup.commands", "cudnn_setup.cli"))
                   for m in uses)


def test_the_install_engine_needs_no_verification_layer():
    """placement/ judges an archive before it is placed (fit.py: the CUDA major, the GPUs and
    driver) from facts and the driver probe's answer, never from a check."""
    graph = _imports()
    reaching = sorted(f"{m} imports {f}" for m, found in graph.items()
                      if m.startswith("cudnn_setup.placement")
                      for f in found if f.startswith("cudnn_setup.checks"))
    assert not reaching, "\n".join(reaching)
    assert "cudnn_setup.probing.driver" in graph["cudnn_setup.placement.fit"]


# The verification layers verify and install run, each in the module named after it with its
# `check_x(inst, facts) -> Check` (suite.py runs them in order). Beside them only what they share:
# the suite, what a check is handed, and the frameworks layer's model, explanation and what-if.
# What is not a layer lives where its name says: the child protocol in probing/, the
# Installation and finding it in installation/, doctor's order, bench.
LAYER_MODULES = {"files": "files_check", "elf": "elf_check", "versions": "versions_check",
                 "load": "load_check", "coherence": "coherence", "deps": "deps",
                 "loader": "loader_check", "cuda": "cuda_check", "driver": "driver_check",
                 "compile": "compile_check", "gpu": "gpu", "frameworks": "frameworks_check",
                 "clients": "clients_check", "theano": "theano_check"}
BESIDE_THE_LAYERS = {"__init__", "suite", "check_facts", "framework_entry", "framework_loader",
                     "framework_whatif"}


def test_checks_holds_the_verification_layers_only():
    held = {p.stem for p in (PACKAGE / "checks").iterdir()
            if p.suffix == ".py" or (p.is_dir() and p.name != "__pycache__")}
    wanted = set(LAYER_MODULES.values()) | BESIDE_THE_LAYERS
    assert "suite" in held
    assert held == wanted, (f"not a verification layer: {sorted(held - wanted)}; "
                            f"missing: {sorted(wanted - held)}")


def _checks_of_the_facts(path: Path) -> list[str]:
    """The functions of a module that take (inst, facts): what the suite can run."""
    return [n.name for n in _tree(path).body
            if isinstance(n, ast.FunctionDef) and [a.arg for a in n.args.args] == ["inst", "facts"]]


def test_each_layer_is_one_module_exposing_its_check_of_the_installation_and_the_facts():
    from cudnn_setup.checks.suite import CHECKS, ORDER

    assert set(ORDER) == set(LAYER_MODULES)
    for name, module in LAYER_MODULES.items():
        found = _checks_of_the_facts(PACKAGE / "checks" / f"{module}.py")
        assert found == [f"check_{name}"], f"checks/{module}.py: {found}"
        assert CHECKS[name].__module__ == f"cudnn_setup.checks.{module}", name
        assert CHECKS[name].__name__ == f"check_{name}", name
    for stem in BESIDE_THE_LAYERS:
        path = PACKAGE / "checks" / f"{stem}.py"
        assert not _checks_of_the_facts(path), f"checks/{stem}.py holds a check"


def _value_or_callable(annotation: ast.expr) -> bool:
    """`X | Callable[..., X]`: a union of a function type and a value other than None."""
    parts: list[ast.expr] = []

    def flatten(node: ast.expr) -> None:
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            flatten(node.left)
            flatten(node.right)
        else:
            parts.append(node)

    flatten(annotation)

    def is_callable(node: ast.expr) -> bool:
        target = node.value if isinstance(node, ast.Subscript) else node
        return isinstance(target, (ast.Name, ast.Attribute)) and \
            ast.unparse(target).split(".")[-1] == "Callable"

    functions = [p for p in parts if is_callable(p)]
    values = [p for p in parts if not is_callable(p)
              and not (isinstance(p, ast.Constant) and p.value is None)]
    return bool(functions and values)


def test_no_parameter_is_a_value_or_a_function_returning_it():
    """A parameter has one type: a value, or a function, never either (`x() if callable(x)
    else x`); what is slow to know is asked of the command's facts object."""
    found = []
    assert _value_or_callable(ast.parse("int | Callable[[], int]", mode="eval").body)
    assert not _value_or_callable(ast.parse("Callable[[], int] | None", mode="eval").body)
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in _nodes(path):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id == "callable":
                found.append(f"{_module(path)}:{node.lineno} callable()")
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args
                for arg in args.posonlyargs + args.args + args.kwonlyargs:
                    if arg.annotation is not None and _value_or_callable(arg.annotation):
                        found.append(f"{_module(path)}:{node.lineno} {node.name}({arg.arg})")
    assert not found, "\n".join(found)


def test_the_install_engines_steps_are_named_functions_not_closures():
    """Each step of placement/ (stage and judge, plan, the commit point) is a function of its
    module that a test or a reader can find by name: none is defined inside another."""
    nested = []
    for path in sorted((PACKAGE / "placement").glob("*.py")):
        for outer in _nodes(path):
            if isinstance(outer, (ast.FunctionDef, ast.AsyncFunctionDef)):
                nested += [f"{path.name}: {inner.name} inside {outer.name}"
                           for inner in ast.walk(outer) if inner is not outer
                           and isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef))]
    assert not nested, "\n".join(nested)
    names = {n.name for path in (PACKAGE / "placement").glob("*.py")
             for n in _tree(path).body if isinstance(n, ast.FunctionDef)}
    assert {"stage_and_judge", "plan_install", "place", "commit_manifest", "commit_removal",
            "install", "uninstall", "recover_pending"} <= names

# Below the CLI nothing reads this process's own environment, home or working directory, and
# every program started gets an environment handed to it (the command's, or one made for it):
# a child inheriting os.environ would see other variables than the command was given.
HIDDEN_STATE = {("os", "environ"), ("os", "getenv"), ("os", "environb"), ("Path", "home"),
                ("Path", "cwd"), ("os", "getcwd"), ("os", "path.expanduser")}
STARTS_A_PROGRAM = {"run_command", "Popen", "run", "check_output", "check_call", "call"}


def _below_the_cli():
    for path in sorted(PACKAGE.rglob("*.py")):
        name = _module(path)
        if name.split(".")[1:2] in (["cli"], ["__main__"], ["probes"]):
            continue  # the CLI builds the Context; probes run in children of their own
        yield name, _tree(path)


def test_nothing_below_the_cli_reads_hidden_state():
    found = []
    for name, tree in _below_the_cli():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and (node.value.id, node.attr) in HIDDEN_STATE:
                found.append(f"{name}:{node.lineno} {node.value.id}.{node.attr}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr == "expanduser":
                found.append(f"{name}:{node.lineno} expanduser")
    assert not found, "\n".join(found)


def test_every_program_started_below_the_cli_is_given_its_environment():
    unset = []
    started = 0
    for name, tree in _below_the_cli():
        if name == "cudnn_setup.child":
            continue  # run_command itself: its callers hand it the environment
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            callee = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) \
                else None
            module = f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) \
                else None
            if callee == "run_command" or (module == "subprocess" and callee in STARTS_A_PROGRAM):
                started += 1
                positional_env = callee == "run_command" and len(node.args) >= 3
                if not positional_env and not any(k.arg == "env" for k in node.keywords):
                    unset.append(f"{name}:{node.lineno} {ast.unparse(f)}")
    assert started > 5  # the check sees the calls it is about
    assert not unset, "\n".join(unset)
