"""What is recorded with an evaluation's results: enough to know what was evaluated, and how."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from libero_workcell.cell_file import redact, redact_text


@dataclass(frozen=True)
class EvalSettings:
    checkpoint: str = "builtin:expert"  # the checkpoint's name (the server's; the local server's built-in)
    policy_url: str = ""  # sim: "" (the local server) or --policy-url; real: the graph's policy.url
    mode: str = "async"
    replan_steps: int = 5
    preference: str = ""
    extra: dict[str, str] = field(default_factory=dict)  # further graph overrides, NAME:=VALUE


def recorded(settings: EvalSettings) -> dict[str, Any]:
    """``settings`` as results record them: a URL's credentials (``ws://user:pw@host``) never reach a file."""
    return {**asdict(settings), "policy_url": redact_text(settings.policy_url), "extra": redact(settings.extra)}
