"""The import contracts (pyproject.toml, docs/architecture.md) hold, and they bite: an import that points up fails
`lint-imports` with a message naming it. They see every import: a module imported by name (importlib, a name
import-linter cannot read) is held to the same contracts here, and one whose name is computed must say why."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from conftest import REPO, TOP_PACKAGES

LINT = Path(sys.executable).with_name("lint-imports")


def lint(root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{root / 'src'}{os.pathsep}{root}"}
    return subprocess.run([str(LINT), "--no-cache"], cwd=root, env=env, capture_output=True, text=True, timeout=300)


def linted_copy(copy: Path) -> Path:
    """What lint-imports reads of the tree (the packages and pyproject.toml), copied to ``copy`` to be broken."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO / "src", copy / "src", ignore=ignore)
    for name in TOP_PACKAGES:
        shutil.copytree(REPO / name, copy / name, ignore=ignore)
    shutil.copy(REPO / "pyproject.toml", copy)
    return copy


def test_the_tree_keeps_its_layers():
    result = lint(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 kept, 0 broken" in result.stdout


def test_an_import_that_points_up_fails_the_check_and_is_named(tmp_path):
    copy = linted_copy(tmp_path / "repo")
    contract = copy / "src" / "libero_workcell" / "contract.py"
    upward = "\nfrom workcell import bringup  # noqa: E402 (up: the contract on bring-up)\n"
    contract.write_text(contract.read_text() + upward)
    result = lint(copy)
    assert result.returncode == 1, result.stdout
    assert "libero_workcell is not allowed to import workcell" in result.stdout
    assert "libero_workcell.contract -> workcell.bringup" in result.stdout


# ---- imports by name -------------------------------------------------------------------------------------------
BY_NAME = {  # module -> why it imports a module whose name it computes
    "libero_workcell.preflight": "the child process of in_child runs the probe its caller names (a process "
    "boundary, as a node's launch is): the caller's own module, never one above it",
    "session_log.follow": "a ROS message class by its type name (<package>.msg: the ROS interface packages, "
    "not this repository's)",
}
DYNAMIC = {("importlib", "import_module"), ("importlib.util", "find_spec"), ("builtins", "__import__")}


def _module_of(path: Path, root: Path) -> str:
    rel = path.relative_to(root / "src" if path.is_relative_to(root / "src") else root).with_suffix("")
    return ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)


def imports_by_name(root: Path) -> list[tuple[str, str | None, int]]:
    """Every import by name in the linted packages: (module, the name imported or None when computed, line)."""
    found = []
    for path in [*(root / "src").rglob("*.py"), *(p for name in TOP_PACKAGES for p in (root / name).rglob("*.py"))]:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            called = ("builtins", f.id) if isinstance(f, ast.Name) and f.id == "__import__" else (
                (ast.unparse(f.value), f.attr) if isinstance(f, ast.Attribute) else None)  # fmt: skip
            if called not in DYNAMIC or not node.args:
                continue
            arg = node.args[0]
            name = arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else None
            found.append((_module_of(path, root), name, node.lineno))
    return found


def contract_breaches(importer: str, imported: str, config: dict) -> list[str]:
    """What ``importer`` importing ``imported`` breaks of pyproject.toml's contracts, as lint-imports names them."""
    a, b = importer.split(".")[0], imported.split(".")[0]
    out = []
    for contract in config["tool"]["importlinter"]["contracts"]:
        if contract["type"] == "layers" and a != b:
            level = {pkg.strip(): i for i, layer in enumerate(contract["layers"]) for pkg in layer.split("|")}
            if a in level and b in level and level[a] >= level[b]:
                out.append(f"{contract['name']}: {a} is not allowed to import {b}")
        elif contract["type"] == "forbidden":
            ignored = {tuple(s.replace(" ", "").split("->")) for s in contract.get("ignore_imports", ())}
            if a in contract["source_modules"] and b in contract["forbidden_modules"] and \
                    (importer, imported) not in ignored:  # fmt: skip
                out.append(f"{contract['name']}: {a} is not allowed to import {b}")
        elif contract["type"] == "protected":
            protected = any(imported == p or imported.startswith(p + ".") for p in contract["protected_modules"])
            allowed = any(importer == m or importer.startswith(m + ".") for m in contract["allowed_importers"])
            if protected and not allowed:
                out.append(f"{contract['name']}: {importer} is not allowed to import {imported}")
    return out


def breaches_by_name(root: Path) -> list[str]:
    config = tomllib.loads((root / "pyproject.toml").read_text())
    out = []
    for importer, name, line in imports_by_name(root):
        if name is None:
            if importer not in BY_NAME:
                out.append(f"{importer}:{line} imports a module whose name it computes: say why in BY_NAME, or "
                           "import it plainly")  # fmt: skip
            continue
        out += [f"{importer}:{line} imports {name} by name: {b}" for b in contract_breaches(importer, name, config)]
    return out


def test_every_import_by_name_keeps_the_contracts_and_a_computed_one_says_why():
    assert breaches_by_name(REPO) == []
    assert {m for m, name, _ in imports_by_name(REPO) if name is None} == set(BY_NAME)  # each reason still needed


def test_an_import_by_name_that_points_up_fails_as_a_plain_one_does(tmp_path):
    copy = linted_copy(tmp_path / "repo")
    contract = copy / "src" / "libero_workcell" / "contract.py"
    contract.write_text(contract.read_text() + "\nimport importlib  # noqa: E402\n"
                        "BRINGUP = importlib.import_module('workcell.bringup')\n"
                        "CHOSEN = importlib.import_module(__name__ + '_extra')\n")  # fmt: skip
    bridge = copy / "src" / "workcell" / "cli.py"
    bridge.write_text(bridge.read_text() + "\n_ARM = __import__('aubo_bridge.node')\n")
    found = breaches_by_name(copy)
    assert any("libero_workcell.contract" in b and "imports workcell.bringup by name" in b
               and "libero_workcell is not allowed to import workcell" in b for b in found), found  # fmt: skip
    assert any("libero_workcell.contract" in b and "whose name it computes" in b for b in found), found
    assert any("workcell.cli" in b and "workcell is not allowed to import aubo_bridge" in b for b in found), found
    assert len(found) == 3, found


# ---- loops -----------------------------------------------------------------------------------------------------
def import_loops(imports: dict[str, set[str]]) -> list[list[str]]:
    """The import loops of ``imports`` (module -> the modules it imports): each set of two or more modules that
    reach each other, sorted (Tarjan's strongly connected components; a module importing itself is no loop)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    loops: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in imports.get(module, ()):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            members = []
            while True:
                m = stack.pop()
                on_stack.discard(m)
                members.append(m)
                if m == module:
                    break
            if len(members) > 1:
                loops.append(sorted(members))

    for module in sorted(imports):
        if module not in index:
            visit(module)
    return sorted(loops)


def test_loops_are_found_and_a_module_importing_itself_is_none():
    assert import_loops({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}) == [["a", "b", "c"]]
    assert import_loops({"a": {"b"}, "b": set(), "c": {"c"}}) == []


def test_the_tree_has_no_import_loop():
    """A loop ties its modules into one: neither can be read, tested or moved without the other (issue 37 broke
    the tree's last one, convert_batch <-> convert_cluster, by giving their shared unit a module of its own)."""
    import grimp

    packages = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["root_packages"]
    graph = grimp.build_graph(*packages, cache_dir=None)
    imports = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    assert import_loops(imports) == []
