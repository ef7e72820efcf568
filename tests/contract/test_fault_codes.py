"""The fault codes (libero_workcell/faults.py): one table, the operator page's copy of it, every fault text the code
can emit finding its code, and `workcell status` showing code and recovery.

Why an ARCS RPC timeout (`servo command refused: ARCS ...: RPC request timeout.`) reached the operator with no code
although this module passed: it tried each table entry's own example (written with the pattern, so it proves only
that pattern) and the messages of a few producers (the arm's safety states, teleop's statuses, some policy, recorder
and camera messages). No one had listed the text the arm driver builds from what a backend raises (its words
"servo command refused: " around the session's "ARCS <ip:port>: <the SDK's words>"), so it was never tried. Now the
source itself is read (:class:`FaultTexts`): every text the arm (with its gripper) and the belt can report, as the
operator reads it, must find its code, so a new text without one fails here.
"""

from __future__ import annotations

import ast
import importlib
import itertools
import re
from dataclasses import dataclass

import pytest
from conftest import REPO

from libero_workcell import faults
from libero_workcell.faults import FAULTS, classify

OPERATOR_DOC = REPO / "docs" / "operator.md"


def test_the_operator_page_holds_the_table_as_faults_py_writes_it() -> None:
    text = OPERATOR_DOC.read_text(encoding="utf-8")
    match = re.search(r"<!-- faults: generated from src/libero_workcell/faults.py -->\n(.*?)\n<!-- end of faults -->",
                      text, re.S)  # fmt: skip
    assert match, "docs/operator.md has no Faults table between its markers"
    assert match.group(1).strip() == faults.markdown_table(), (
        "docs/operator.md's Faults table differs from faults.py: replace it with `python -m libero_workcell.faults`")


def test_codes_are_short_stable_unique_and_each_example_finds_its_own_code() -> None:
    codes = [f.code for f in FAULTS]
    assert len(codes) == len(set(codes))
    for f in FAULTS:
        assert re.fullmatch(r"[A-Z]+(-[A-Z]+){1,2}", f.code) and len(f.code) <= 24, f.code
        assert f.device in faults.DEVICES and f.meaning.endswith(".") and f.recovery.endswith("."), f.code
        assert f.code.split("-")[0] == {"gripper": "GRIP", "conveyor": "BELT", "recorder": "REC", "camera": "CAM"}.get(
            f.device, f.device.upper()), f.code  # fmt: skip
        assert classify(f.example) is f, f"{f.code}'s example finds {classify(f.example)}: an earlier pattern shadows"
    assert classify("disabled") is None and classify("ok") is None  # states, not faults


def test_every_arm_stop_the_controller_reports_has_its_code() -> None:
    from aubo_bridge.backends import arcs as arcs_backend

    SAFETY_FAULTS, arm_state = arcs_backend.SAFETY_FAULTS, arcs_backend.classify

    expected = {4: "ARM-VIOLATION", 5: "ARM-PSTOP", 6: "ARM-SAFEGUARD", 7: "ARM-ESTOP", 8: "ARM-ESTOP",
                9: "ARM-CONTROLLER"}  # fmt: skip
    assert set(expected) == set(SAFETY_FAULTS)
    for safety, code in expected.items():
        _ready, fault = arm_state(8, safety, False)
        assert classify(fault, [faults.ARM]).code == code, fault
    others = {(8, 1, True): "ARM-COLLISION", (10, 1, False): "ARM-CONTROLLER", (-1, 1, False): "ARM-NO-ARM",
              (0, 1, False): "ARM-NO-ARM"}  # fmt: skip
    for (mode, safety, collided), code in others.items():
        _ready, fault = arm_state(mode, safety, collided)
        assert classify(fault).code == code, fault
    assert arm_state(8, 1, False) == (True, None)


def test_every_state_in_which_teleop_holds_the_arm_has_its_code() -> None:
    from teleop_pico.core import Status

    for status in Status:
        fault = classify(status.value, [faults.TELEOP])
        assert (fault is None) == (not status.holds or status is Status.IDLE), status  # idle: the clutch released


def test_the_policy_and_recorder_and_camera_messages_find_their_codes(tmp_path) -> None:
    from camera_driver.driver import CameraDriver
    from libero_workcell.loopback import free_port
    from policy_node.clients.openpi_ws.client import TimedPolicyClient, parse_reply
    from policy_node.protocol import MalformedReply, PolicyServerError
    from recorder.session_file import RecorderError, SessionFile

    with pytest.raises(PolicyServerError) as lost:
        TimedPolicyClient(f"ws://127.0.0.1:{free_port()}", timeout=1.0)
    assert classify(f"no policy server: {lost.value}").code == "POLICY-NO-SERVER"  # policy_node's diagnostics
    with pytest.raises(MalformedReply) as malformed:
        parse_reply({"error": 1}, 1.0)
    assert classify(str(malformed.value)).code == "POLICY-MALFORMED"
    with pytest.raises(RecorderError) as full:
        SessionFile(tmp_path / "s.hdf5", {}, {}, min_free_bytes=1 << 62).check_space()
    assert classify(str(full.value)).code == "REC-DISK"

    class NoCamera:
        name = "wrist"

        def latest(self):
            return None

    assert classify(CameraDriver(NoCamera(), 0.2).read_latest()[1]).code == "CAM-STALE"


def test_status_shows_each_fault_with_its_code_and_what_to_do() -> None:
    from workcell.operator_cli import format_status

    seen = {
        "nodes": ["aubo_bridge", "conveyor_driver", "recorder", "teleop_pico", "wrist_camera"],
        "diagnostics": {
            "aubo_bridge": (2, "safety mode RobotEmergencyStop", {"mode": "fault"}),
            "conveyor": (2, "delta_vfd fault code 7 (0x0007)", {}),
            "camera/wrist": (1, "no frame yet", {"last_error": "RealSense 123 is not connected (connected: [])"}),
            "policy_node": (0, "connected", {}),
        },
        "arm": {"mode": "fault", "fault": "safety mode RobotEmergencyStop"},
        "source": "teleop",
        "recorder": {"recording": False, "error": "/d/x_episodes: only 3 MiB free, at least 512 MiB are needed"},
        "teleop": {"status": "no_tracking", "engaged": False},
    }
    text = format_status(seen, 42)
    assert "ERROR aubo_bridge: safety mode RobotEmergencyStop [ARM-ESTOP]" in text
    assert "arm: fault, fault safety mode RobotEmergencyStop [ARM-ESTOP], source teleop" in text
    assert "delta_vfd fault code 7 (0x0007) [BELT-DRIVE]" in text and "no frame yet [CAM-LOST]" in text
    assert "[REC-DISK]" in text and "teleop holds the arm: no_tracking [TELEOP-NO-TRACKING]" in text
    todo = text.split("what to do:\n")[1].splitlines()
    assert [line.split(":")[0].strip() for line in todo] == ["ARM-ESTOP", "BELT-DRIVE", "CAM-LOST", "REC-DISK",
                                                             "TELEOP-NO-TRACKING"]  # fmt: skip
    assert todo[0].strip() == f"ARM-ESTOP: {faults.BY_CODE['ARM-ESTOP'].recovery}"  # once, though shown twice
    assert "what to do" not in format_status({"diagnostics": {"aubo_bridge": (1, "disabled", {})}}, 42)


# ------------------------------------------------------------------ every fault text the code can emit
SRC = REPO / "src"
HOLE = "…"  # what a {...} of a text becomes when the source does not tell its value: words no pattern looks for
INNER = "\x00"  # a {...} that holds another text: an exception's, a device's fault (the text around it wraps it)
FAULT_NAMES = {"fault", "_fault", "error", "reason", "_link_error", "_switch_error", "_estop_error"}
FAULT_CALLS = {"_enter_fault", "_set_fault", "_latch", "_lose_link", "_on_error", "on_error"}
INNER_NAMES = {"exc", "error", "err", "fault", "e", "_text", "_short"}
BUILT = {"__init__", "__post_init__"}  # an exception raised there refuses the start: not a running graph's fault


@dataclass(frozen=True)
class Text:
    where: str  # path:line
    raised: bool  # an exception's message (True), or a text stored or reported as a fault
    texts: tuple[str, ...]  # the text, once for each value its {...} can take (HOLE, INNER where not known)


def _name(node: ast.AST) -> str | None:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def _walk(node: ast.AST, cls: str | None = None, fn: str | None = None):
    """(class, function, node) for every node under ``node``, with the class and the function it is in."""
    for child in ast.iter_child_nodes(node):
        c = child.name if isinstance(child, ast.ClassDef) else cls
        f = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else fn
        yield c, f, child
        yield from _walk(child, c, f)


class FaultTexts:
    """The fault texts in ``modules`` (paths under src/), read from their source: the messages of what they raise
    (BackendError and its kind: what a device's failure raises), the texts they store as a fault (``fault``,
    ``_link_error``, ...) or report through a fault call (``_enter_fault``, ``on_error``, ...). A {...} takes the
    values the source gives it: a module table it indexes, a module constant, what callers pass for the parameter
    or the attribute it names; else HOLE, or INNER when it holds another text."""

    def __init__(self, modules: list[str]) -> None:
        self.trees = {rel: ast.parse((SRC / rel).read_text(encoding="utf-8")) for rel in modules}
        self.tables: dict[str, dict[str, list[str]]] = {}  # module -> its tables and constants by name
        for rel, tree in self.trees.items():
            names = self.tables[rel] = {}
            for node in tree.body:
                target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
                value = getattr(node, "value", None)
                if isinstance(target, ast.Name) and isinstance(value, ast.Dict):
                    names[target.id] = [v.value for v in value.values if isinstance(v, ast.Constant)
                                        and isinstance(v.value, str)]  # fmt: skip
                elif isinstance(target, ast.Name) and isinstance(value, ast.Constant) and isinstance(value.value, str):
                    names[target.id] = [value.value]
        params = {(f.name, i): a.arg for tree in self.trees.values() for f in ast.walk(tree)
                  if isinstance(f, ast.FunctionDef)
                  for i, a in enumerate(f.args.args[1:] if f.args.args[:1] and f.args.args[0].arg == "self"
                                        else f.args.args)}  # fmt: skip
        self.given: dict[tuple[str, str], set[str]] = {}  # (class or function, parameter) -> what callers pass
        for rel, tree in self.trees.items():
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and (fn := _name(node.func)):
                    args = [(k.arg, k.value) for k in node.keywords if k.arg]
                    args += [(params[(fn, i)], a) for i, a in enumerate(node.args) if (fn, i) in params]
                    for arg, value in args:
                        self.given.setdefault((fn, arg), set()).update(self._render(value, rel, None, None))

    def _render(self, node: ast.AST, rel: str, cls: str | None, fn: str | None) -> list[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, ast.JoinedStr):
            parts = [[v.value] if isinstance(v, ast.Constant) else self._hole(v.value, rel, cls, fn)
                     for v in node.values]  # fmt: skip
            return ["".join(p) for p in itertools.islice(itertools.product(*parts), 64)]
        if isinstance(node, ast.IfExp):
            return self._render(node.body, rel, cls, fn) + self._render(node.orelse, rel, cls, fn)
        if isinstance(node, ast.BoolOp):
            return [t for v in node.values for t in self._render(v, rel, cls, fn)]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left = self._render(node.left, rel, cls, fn) or [HOLE]
            return [a + b for a in left for b in self._render(node.right, rel, cls, fn) or [HOLE]]
        return []

    def _hole(self, expr: ast.AST, rel: str, cls: str | None, fn: str | None) -> list[str]:
        table = expr.func.value if isinstance(expr, ast.Call) and _name(expr.func) == "get" else expr
        table = table.value if isinstance(table, ast.Subscript) else table
        if isinstance(table, ast.Name) and table.id in self.tables[rel]:
            return self.tables[rel][table.id]
        if isinstance(expr, ast.Attribute) and _name(expr.value) == "self" and cls and (
                vals := self.given.get((cls, expr.attr.lstrip("_")))):
            return sorted(vals)
        if isinstance(expr, ast.Name) and fn and (vals := self.given.get((fn, expr.id))):
            return sorted(vals)
        return [INNER] if {_name(n) for n in ast.walk(expr)} & INNER_NAMES else [HOLE]

    def texts(self) -> list[Text]:
        from transports.errors import BackendError

        out = []
        for rel, tree in self.trees.items():
            module = vars(importlib.import_module(rel.removesuffix(".py").replace("/", ".")))
            errors = {n for n, v in module.items() if isinstance(v, type) and issubclass(v, BackendError)}
            readers = {f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.returns is not None
                       and "str | None" in ast.unparse(f.returns)}  # fmt: skip  # (value, fault) readers
            for cls, fn, node in _walk(tree):
                found: list[tuple[bool, ast.AST]] = []
                if isinstance(node, ast.Call):
                    call = _name(node.func)
                    if call in errors and node.args and fn not in BUILT:
                        found.append((True, node.args[0]))
                    if call in FAULT_CALLS and node.args:
                        found.append((False, node.args[0]))
                    found += [(False, k.value) for k in node.keywords if k.arg == "fault"]
                elif isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple) and fn in readers:
                    found += [(False, e) for e in node.value.elts if isinstance(e, (ast.JoinedStr, ast.Constant))]
                elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                    for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                        pairs = (zip(target.elts, node.value.elts, strict=False) if isinstance(target, ast.Tuple)
                                 and isinstance(node.value, ast.Tuple) else [(target, node.value)])  # fmt: skip
                        found += [(False, v) for t, v in pairs if _name(t) in FAULT_NAMES]
                for raised, value in found:
                    texts = tuple(t for t in self._render(value, rel, cls, fn) if t.strip(HOLE + INNER + " :()"))
                    if texts:  # (a text that is only another one passes that one on: it is read where it is made)
                        out.append(Text(f"src/{rel}:{node.lineno}", raised, texts))
        return out


def modules(*patterns: str) -> list[str]:
    found = sorted({str(p.relative_to(SRC)) for pattern in patterns for p in SRC.glob(pattern)})
    assert found, patterns
    return found


# The arm's fault (`/aubo/mode`, what `workcell status` shows beside "arm:") is what the driver latched: its own
# words, around an exception's message where it caught one, or the arm backend's fault as it is, or the gripper's
# behind "gripper: ". Every one of these modules can put a text there as it is (a poller passes what a poll raised).
ARM_MODULES = modules("aubo_bridge/driver.py", "aubo_bridge/process/*.py", "aubo_bridge/backends/arcs.py",
                      "aubo_bridge/backends/sim.py", "transports/arcs/*.py", "transports/process_host/*.py",
                      "transports/sim_link.py")  # fmt: skip
GRIPPER_MODULES = modules("gripper/sim_backend.py", "gripper/ctag/*.py", "transports/modbus_bus.py")
GRIPPER_PREFIX = "gripper: "  # the arm driver's words before a gripper's text
ARM_DRIVER = "src/aubo_bridge/driver.py"
# The belt's fault: the driver's words, or a backend's fault as it is. The Modbus bus's exceptions reach it only
# inside its own fault texts ("<device>: <what failed>: no valid reply after ...") or the backend's words.
BELT_MODULES = modules("conveyor_driver/driver.py", "conveyor_driver/node.py", "conveyor_driver/*_backend.py",
                       "transports/arcs/session.py", "transports/arcs/poller.py", "transports/sim_link.py")
BELT_WRAPPED = modules("transports/modbus_bus.py")


def read(text: str) -> str:
    """A text as the operator reads it when nothing more is known of what its {...} holds."""
    return text.replace(INNER, HOLE)


def uncoded(texts: list[Text], devices: tuple[str, ...], prefix: str = "") -> list[str]:
    return [f"{t.where}: {prefix + read(x)!r}" for t in texts for x in t.texts
            if (f := classify(prefix + read(x), devices)) is None or f.device not in devices]  # fmt: skip


def test_the_scan_finds_the_texts_the_operator_reads() -> None:
    """The scan itself: the texts it must see (those of the incident and of each kind of source) are there."""
    arm = {read(x) for t in FaultTexts(ARM_MODULES + GRIPPER_MODULES).texts() for x in t.texts}
    belt = {read(x) for t in FaultTexts(BELT_MODULES + BELT_WRAPPED).texts() for x in t.texts}
    for text in ["servo command refused: …", "state read failed: …", "ARCS …: …", "gripper: …",  # the incident's
                 "safety mode ProtectiveStop", "robot mode Disconnected: controller has no link to the arm",  # tables
                 "state poll of … failed: …: …",  # a poller's, with the words its caller gives
                 "arm controller left the ready state", "closed",
                 "sim world state is … s old: world stopped or stalled",  # a (state, fault) reader's
                 "gripper alarm code …", "tool Modbus signal errors: …", "ctag_gripper: link down: …"]:  # fmt: skip
        assert text in arm, text
    for text in ["stop not confirmed by the drive: …", "halt failed: …", "emergency stop failed: …",  # parameters
                 "conveyor_…: link down: …", "read 0x…: no valid reply after … attempts (…)", "not polled yet",
                 "… fault code … (0x…)", "conveyor state stale (… s old, max … s)"]:  # fmt: skip
        assert text in belt, text


def test_every_fault_text_the_arm_and_its_gripper_can_emit_has_its_code() -> None:
    arm = (faults.ARM, faults.GRIPPER)
    missing = uncoded(FaultTexts(ARM_MODULES).texts(), arm)
    gripper = FaultTexts(ARM_MODULES + GRIPPER_MODULES).texts()
    missing += uncoded([t for t in gripper if t.where.removeprefix("src/").split(":")[0] in GRIPPER_MODULES],
                       (faults.GRIPPER,), GRIPPER_PREFIX)  # fmt: skip
    assert not missing, "fault texts with no code (add a pattern to libero_workcell/faults.py):\n" + "\n".join(missing)


def test_the_arm_drivers_words_around_a_text_never_hide_its_code() -> None:
    """Around an exception the arm driver caught, its words say where ("servo command refused: ", "state read
    failed: ", ...); the code is the text's own where it has one (an RPC timeout is ARM-RPC wherever it happened),
    the driver's (ARM-DRIVER) only where it has none."""
    texts = FaultTexts(ARM_MODULES).texts()
    wrappers = {x for t in texts if t.where.startswith(ARM_DRIVER) for x in t.texts if INNER in x}
    wrappers = {w for w in wrappers if not w.startswith(GRIPPER_PREFIX)}
    assert {"servo command refused: \x00", "state read failed: \x00", "servo tick failed: \x00"} <= wrappers
    hidden = []
    for inner in {read(x) for t in texts if t.raised for x in t.texts}:
        if (own := classify(inner, (faults.ARM,))) is not None:
            hidden += [f"{w.replace(INNER, inner)!r} reads as {classify(w.replace(INNER, inner)).code}, not {own.code}"
                       for w in sorted(wrappers) if classify(w.replace(INNER, inner)) is not own]  # fmt: skip
        for w in wrappers:
            assert classify(w.replace(INNER, inner), (faults.ARM,)) is not None, w
    assert not hidden, "\n".join(hidden)


def test_every_fault_text_the_belt_can_emit_has_its_code() -> None:
    texts = FaultTexts(BELT_MODULES + BELT_WRAPPED).texts()
    shown = [t for t in texts if not (t.raised and t.where.removeprefix("src/").split(":")[0] in BELT_WRAPPED)]
    missing = uncoded(shown, (faults.BELT,))
    assert not missing, "fault texts with no code (add a pattern to libero_workcell/faults.py):\n" + "\n".join(missing)
