"""Write the parameters each node of the graph declares (``config/node_parameters.json``).

``python -m tools.node_parameters [--check]`` (in the project's .venv). The bring-up checks an override or a cell
file's setting against what the node declares (``workcell.bringup.node_parameters``) and types it by the default;
it reads this file instead of importing the node, so the import contracts see every dependency of the bring-up
(it reaches the devices through their parameters, never their code). Each node's ``PARAMETERS`` is the source;
a test regenerates the file and compares, so a new parameter fails the suite until this is run. ``--check``: exit
1 if the file differs, writing nothing.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path
from typing import Any

import yaml

CONFIG = Path(__file__).resolve().parents[1] / "config"
OUT = CONFIG / "node_parameters.json"


def node_modules(graph: Path = CONFIG / "workcell.yaml") -> list[str]:
    """Every node module the graph file starts, sorted."""
    return sorted({node["module"] for node in yaml.safe_load(graph.read_text())["nodes"]})


def declared() -> dict[str, dict[str, Any]]:
    """module -> the parameters its node declares, with their defaults."""
    return {module: dict(importlib.import_module(module).PARAMETERS) for module in node_modules()}


def text() -> str:
    return json.dumps(declared(), indent=1, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the file is not what the nodes declare")
    a = ap.parse_args(argv)
    now = text()
    if a.check:
        same = OUT.is_file() and OUT.read_text() == now
        print(f"{OUT}: " + ("as the nodes declare" if same else "differs from what the nodes declare: run "
                            "python -m tools.node_parameters"))  # fmt: skip
        return 0 if same else 1
    OUT.write_text(now)
    print(f"wrote {OUT}: {len(json.loads(now))} node modules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
