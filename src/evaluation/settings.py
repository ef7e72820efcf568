"""What is recorded with an evaluation's results: enough to know what was evaluated, and how."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class EvalSettings:
    checkpoint: str = "builtin:expert"  # the checkpoint's name (the server's; the local server's built-in)
    policy_url: str = ""  # "" in sim: the local server; else the server every trial connects to
    mode: str = "async"
    replan_steps: int = 5
    preference: str = ""
    extra: dict[str, str] = field(default_factory=dict)  # further graph overrides, NAME:=VALUE
