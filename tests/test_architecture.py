"""The layering docs/architecture.md states, checked on the source: imports point down the layer order, no import
cycle between the project's modules, no Prefect below flows/, no function longer than a screen."""
import ast
from pathlib import Path

from tests.conftest import ROOT

PACKAGES = ("cli", "flows", "tasks", "model", "pretrain")


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def imports_of(path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules a module imports, at its top or inside a function."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        out |= {n for n in names if n in known}
    return out


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, as the modules along it, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt, path + [nxt])):
                return found
        state[node] = 2
        return None

    return next((found for m in sorted(graph) if m not in state and (found := visit(m, [m]))), None)


def test_no_module_imports_one_that_imports_it():
    known = modules()
    graph = {name: imports_of(path, known) - {name} for name, path in known.items()}
    assert len(graph) > 100
    assert cycle(graph) is None, " -> ".join(cycle(graph))


# the floors, ground first: a module imports only from its own floor or below
LAYERS = ["pretrain", "model", "tasks.common", "tasks.stages", "tasks.versions", "flows", "cli"]


def layer(module: str) -> int:
    if module.startswith("tasks."):
        top = ".".join(module.split(".")[:2])
        return LAYERS.index(top if top in ("tasks.common", "tasks.versions") else "tasks.stages")
    return LAYERS.index(module.split(".")[0])


def test_imports_point_down_the_layer_order():
    known = modules()
    upward = [f"{name} -> {target}" for name, path in known.items() for target in imports_of(path, known)
              if layer(target) > layer(name)]
    assert upward == []


def test_the_layer_check_sees_an_arrow_up():
    assert layer("tasks.common.hosts") < layer("tasks.clean.shards") < layer("tasks.versions") < layer("flows.train")
    assert layer("pretrain.config") < layer("model.data") < layer("cli.main")


def test_the_cycle_finder_finds_a_cycle():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]


def test_nothing_below_flows_imports_prefect():
    offenders = []
    for package in ("tasks", "model", "pretrain"):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                offenders += [f"{path.relative_to(ROOT)}:{node.lineno}" for n in names if n.split(".")[0] == "prefect"]
    assert offenders == []


def test_no_function_is_longer_than_60_lines():
    long = [f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for path in modules().values() for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 60]
    assert long == []
