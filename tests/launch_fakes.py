"""Stand-ins for ``launch`` / ``launch_ros`` (no wheels: CI cannot install them) that check like the real API.

Signatures follow launch 3.7 / launch_ros 0.28 (ros2/launch, ros2/launch_ros, rolling of 2024-12,
read in ``launch/actions/*.py`` and ``launch_ros/actions/node.py``): keyword-only where the
real ones are, and every ``**kwargs`` chain ends where the real one does (``Action(condition=)``),
so a misspelled keyword is a TypeError here as it is there. ``Node`` accepts exactly the keywords
of Node -> ExecuteProcess -> ExecuteLocal -> Action, and wants ``parameters`` as a list.
``LaunchConfiguration.perform`` fails on an unset name like the real one, and the context holds
every ``name:=value`` given, declared or not, as ``ros2 launch`` sets them
(``IncludeLaunchDescription`` turns undeclared arguments into launch configurations too).
tests/test_launch_real.py runs the same checks against the real packages where they are installed.
"""

from __future__ import annotations

import os
import types
from typing import Any

_ACTION = {"condition"}
_EXECUTE_LOCAL = {
    "shell", "sigterm_timeout", "sigkill_timeout", "emulate_tty", "output", "output_format", "cached_output",
    "log_cmd", "on_exit", "respawn", "respawn_delay", "respawn_max_retries",
}  # fmt: skip
_EXECUTE_PROCESS = {"prefix", "cwd", "env", "additional_env"}
NODE_KEYWORDS = _ACTION | _EXECUTE_LOCAL | _EXECUTE_PROCESS


class SubstitutionFailure(RuntimeError):  # noqa: N818 (the real name)
    """launch.substitutions.substitution_failure.SubstitutionFailure."""


def _only(cls: str, kwargs: dict[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(kwargs) - allowed)
    if unknown:
        raise TypeError(f"{cls}.__init__() got an unexpected keyword argument {unknown[0]!r}")


def make_modules(made: list[Any]) -> dict[str, types.ModuleType]:
    """Fresh fake modules; every action constructed is appended to ``made``."""

    class Made:
        def _record(self, **fields: Any) -> None:
            self.__dict__.update(fields)
            made.append(self)

    class LaunchDescription:
        def __init__(self, initial_entities=None, *, deprecated_reason=None):
            self.entities = list(initial_entities or [])

    class DeclareLaunchArgument(Made):
        def __init__(self, name, *, default_value=None, description=None, choices=None, **kwargs):
            _only("Action", kwargs, _ACTION)
            if default_value is not None and not isinstance(default_value, str):
                raise TypeError("default_value must be a string (or substitutions)")
            if choices is not None and default_value is not None and default_value not in choices:
                raise RuntimeError(f"default_value {default_value!r} not in choices {choices}")
            self._record(name=name, default_value=default_value, description=description, choices=choices)

    class OpaqueFunction(Made):
        def __init__(self, *, function, args=None, kwargs=None, **left_over_kwargs):
            _only("Action", left_over_kwargs, _ACTION)
            if not callable(function):
                raise TypeError("OpaqueFunction expected a callable for 'function'")
            self._record(function=function, args=list(args or []), kwargs=dict(kwargs or {}))

        def call(self, context):  # as OpaqueFunction.execute does
            return self.function(context, *self.args, **self.kwargs)

    class SetEnvironmentVariable(Made):
        def __init__(self, name, value, **kwargs):
            _only("Action", kwargs, _ACTION)
            self._record(name=name, value=value)

    class UnsetEnvironmentVariable(Made):
        def __init__(self, name, **kwargs):
            _only("Action", kwargs, _ACTION)
            self._record(name=name)

    class LogInfo(Made):
        def __init__(self, *, msg, **kwargs):
            _only("Action", kwargs, _ACTION)
            self._record(msg=msg)

    class Shutdown(Made):
        def __init__(self, *, reason="reason not given", **kwargs):
            _only("Action", kwargs, _ACTION)  # via EmitEvent(event=ShutdownEvent(reason))
            self._record(reason=reason)

    class LaunchConfiguration:
        def __init__(self, variable_name, *, default=None):
            self.name, self.default = variable_name, default

        def perform(self, context):
            if self.name in context.launch_configurations:
                return context.launch_configurations[self.name]
            if self.default is None:
                raise SubstitutionFailure(f"launch configuration '{self.name}' does not exist")
            return str(self.default)

    class Node(Made):
        def __init__(self, *, executable, package=None, name=None, namespace=None, exec_name=None,
                     parameters=None, remappings=None, ros_arguments=None, arguments=None, **kwargs):  # fmt: skip
            _only("Action", kwargs, NODE_KEYWORDS)
            if parameters is not None and not isinstance(parameters, list):
                raise TypeError("'parameters' must be a list")
            self._record(executable=executable, package=package, name=name, parameters=parameters, **kwargs)

    mods = {n: types.ModuleType(n) for n in
            ("launch", "launch.actions", "launch.substitutions", "launch_ros", "launch_ros.actions")}  # fmt: skip
    mods["launch"].LaunchDescription = LaunchDescription
    for cls in (DeclareLaunchArgument, OpaqueFunction, SetEnvironmentVariable, UnsetEnvironmentVariable, LogInfo,
                Shutdown):  # fmt: skip
        setattr(mods["launch.actions"], cls.__name__, cls)
    mods["launch.substitutions"].LaunchConfiguration = LaunchConfiguration
    mods["launch_ros.actions"].Node = Node
    mods["launch"].actions, mods["launch"].substitutions = mods["launch.actions"], mods["launch.substitutions"]
    mods["launch_ros"].actions = mods["launch_ros.actions"]
    return mods


def context(declared: dict[str, str], given: dict[str, str]) -> types.SimpleNamespace:
    """A launch context after ``ros2 launch FILE given...``: declared defaults, then every given value."""
    return types.SimpleNamespace(launch_configurations={**declared, **given}, environment=os.environ)
