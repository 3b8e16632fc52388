"""The layering is kept by a machine: import contracts that fail the test command when broken, and no circle.

``lint-imports`` reads the contracts from ``pyproject.toml`` (the README's "Layout" says what each package is
for). These tests show that the command passes on the tree, that it fails, naming the contract, when a core is
made to import Django in a scratch copy, and that no module imports one that imports it back, even from inside
a function (grimp counts every import statement, wherever it stands).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
_LINTER = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
#: every package the contracts know (their root packages): a new one is checked as soon as it is declared
PACKAGES = tuple(_LINTER["root_packages"])


def lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=cwd, capture_output=True, text=True, timeout=300,
        env={"PATH": str(LINT_IMPORTS.parent), "PYTHONPATH": str(cwd)},
    )


def test_contracts_hold_on_the_tree() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Contracts: {len(_LINTER['contracts'])} kept, 0 broken." in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("engine/entities.py", "import django.conf", "The plain-Python cores import no Django"),
        ("quotas/models/clusters.py", "import quotas.push", "Layers, top to bottom"),
        ("quotas/push/flags.py", "import devtools.redis_server", "devtools (local services"),
        ("traffic/loadgen.py", "import pipeline.kernel", "The cores stand apart"),
        ("quotactl/client.py", "import django.conf", "quotactl talks to the portal over HTTP only"),
        ("memory_limiter/limiter.py", "import quotas.models", "The plain-Python cores import no Django"),
        ("kafka_wire/connection.py", "import quotas.connectors", "The plain-Python cores import no Django"),
        ("quotas/connectors/kafka.py", "import django.conf", "The connectors to Kafka and to the engine's brokers"),
        ("frontend/views.py", "import quotas.api.views.base", "The pages call the quota domain, not the API layer"),
        ("portal/api/errors.py", "import quotas.models", "Layers, top to bottom"),
        ("quotas/api/views/base.py", "import portal.settings", "Layers, top to bottom"),
    ],
)
def test_a_broken_contract_fails_the_command_naming_it(tmp_path: Path, module: str, line: str, contract: str) -> None:
    for name in PACKAGES:
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__", "static"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / module
    target.write_text(target.read_text() + f"\n{line}  # broken on purpose\n")

    result = lint_imports(tmp_path)

    assert result.returncode != 0
    broken = result.stdout.split("Broken contracts")[-1]
    assert contract in broken, result.stdout


def test_every_module_of_the_project_has_its_place_in_the_layers() -> None:
    """The project is laid out module by module, so that its API toolkit (portal.api) can sit low: a module added to
    portal/ and not listed would be checked by no layer."""
    layers = next(c for c in _LINTER["contracts"] if c["id"] == "layers")["layers"]
    listed = {name.strip() for layer in layers for name in re.split(r"[:|]", layer)}
    portal = ROOT / "portal"
    modules = {f"portal.{p.stem}" for p in portal.glob("*.py") if p.stem != "__init__"}
    modules |= {f"portal.{p.parent.name}" for p in portal.glob("*/__init__.py")}
    assert modules - listed == set()


def _cycles(graph: grimp.ImportGraph, modules: set[str]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    edges = {m: [t for t in graph.find_modules_directly_imported_by(m) if t in modules] for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(modules):
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_circle_even_inside_functions() -> None:
    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=True)
    modules = set(graph.modules)
    # the import statements inside functions are in the graph too: this one is function-level
    assert "quotas.push.dispatch" in graph.find_modules_directly_imported_by("quotas.apps")

    assert _cycles(graph, modules) == []


def test_the_cycle_finder_sees_a_circle() -> None:
    """The finder above is not blind: a two-module circle in a scratch package is found."""

    class Graph:
        modules = {"a", "b", "c"}

        @staticmethod
        def find_modules_directly_imported_by(m: str) -> set[str]:
            return {"a": {"b"}, "b": {"a"}, "c": {"a"}}[m]

    assert _cycles(Graph(), Graph.modules) == [["a", "b"]]  # type: ignore[arg-type]
