"""The fault codes (libero_workcell/faults.py): one table, the operator page's copy of it, every fault text the code
can emit finding its code, and `workcell status` showing code and recovery.

Why an ARCS RPC timeout (`servo command refused: ARCS ...: RPC request timeout.`) reached the operator with no code
although this module passed: it tried each table entry's own example (written with the pattern, so it proves only
that pattern) and the messages of a few producers (the arm's safety states, teleop's statuses, some policy, recorder
and camera messages). No one had listed the text the arm driver builds from what a backend raises (its words
"servo command refused: " around the session's "ARCS <ip:port>: <the SDK's words>"), so it was never tried. Now the
source itself is read (:class:`FaultTexts`): every text the arm (with its gripper), the belt, the recorder and the
policy node can report, as the operator reads it, must find its code, so a new text without one fails here. The
same few-producers sample had missed 17 recorder texts (a failed image write, a writer process that died, an
unreadable episode moved aside, ...) and 8 of the policy's (a stale observation the arm holds on, a chunk too
long, ...); and since the policy's patterns were found anywhere in a text, a server's words inside it (a
traceback's last line, a reply's keys) could choose the code: they are read now only right after the node's own.
"""

from __future__ import annotations

import ast
import functools
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
        prefix = {"gripper": "GRIP", "conveyor": "BELT", "recorder": "REC", "camera": "CAM", "session log": "LOG"}
        assert f.code.split("-")[0] == prefix.get(f.device, f.device.upper()), f.code
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
FAULT_KEYWORDS = {"fault"}
PASSES = {"redact_text"}  # a call that is its argument's text (the URL's credentials hidden)
# an exception raised there refuses the start: not a running graph's fault (unless the object is made while it runs)
BUILT = frozenset({"__init__", "__post_init__"})


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
    (``errors``' kinds, default BackendError: what a device's failure raises; not in ``built``), the texts they store
    as a fault (``fault``, ``_link_error``, ...), report through a fault call (``_enter_fault``, ``on_error``, ...) or
    pass as a fault keyword, and what a function that says why or None (``-> str | None``) returns. A {...} takes the
    values the source gives it: a module table it indexes, a module constant, the texts its function assigns the
    local it names, what callers pass for the parameter or the attribute it names (HOLE or INNER too for a caller
    that passes what the source does not tell); else HOLE, or INNER when it holds another text. A call of one of
    the module's functions is what that function returns; of PASSES, its argument's text. ``names``, ``calls``,
    ``keywords`` and ``inner`` add to the sets above (a module's own words for them)."""

    def __init__(self, modules: list[str], errors: tuple[type, ...] = (), names: frozenset[str] = frozenset(),
                 calls: frozenset[str] = frozenset(), keywords: frozenset[str] = frozenset(),
                 inner: frozenset[str] = frozenset(), built: frozenset[str] = BUILT) -> None:  # fmt: skip
        from transports.errors import BackendError

        self.errors = errors or (BackendError,)
        self.names, self.calls = FAULT_NAMES | names, FAULT_CALLS | calls
        self.keywords, self.inner, self.built = FAULT_KEYWORDS | keywords, INNER_NAMES | inner, built
        self.trees = {rel: ast.parse((SRC / rel).read_text(encoding="utf-8")) for rel in modules}
        self.tables: dict[str, dict[str, list[str]]] = {}  # module -> its tables and constants by name
        self.functions: dict[str, dict[str, list[tuple[str | None, ast.FunctionDef]]]] = {}  # module -> its defs
        for rel, tree in self.trees.items():
            names_ = self.tables[rel] = {}
            for node in tree.body:
                target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
                value = getattr(node, "value", None)
                if isinstance(target, ast.Name) and isinstance(value, ast.Dict):
                    names_[target.id] = [v.value for v in value.values if isinstance(v, ast.Constant)
                                         and isinstance(v.value, str)]  # fmt: skip
                elif isinstance(target, ast.Name) and isinstance(value, ast.Constant) and isinstance(value.value, str):
                    names_[target.id] = [value.value]
            defs = self.functions[rel] = {}
            for cls, _fn, node in _walk(tree):
                if isinstance(node, ast.FunctionDef):
                    defs.setdefault(node.name, []).append((cls, node))
        self._rendering: set[tuple[str, str]] = set()  # the functions being rendered (a recursion ends there)
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
                        self.given.setdefault((fn, arg), set()).update(self._values(value, rel, None, None))

    def _unknown(self, expr: ast.AST) -> list[str]:
        """What a value the source does not tell reads as: INNER when it holds another text, else HOLE."""
        return [INNER] if {_name(n) for n in ast.walk(expr)} & self.inner else [HOLE]

    def _values(self, expr: ast.AST, rel: str, cls: str | None, fn: str | None) -> list[str]:
        """What ``expr`` can hold: its texts, and where a branch of it is not told, what that reads as."""
        if isinstance(expr, ast.IfExp):
            return self._values(expr.body, rel, cls, fn) + self._values(expr.orelse, rel, cls, fn)
        if isinstance(expr, ast.BoolOp):
            return [t for v in expr.values for t in self._values(v, rel, cls, fn)]
        return self._render(expr, rel, cls, fn) or self._unknown(expr)

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
        if isinstance(node, ast.Call) and (call := _name(node.func)):
            if call in PASSES and node.args:
                return self._render(node.args[0], rel, cls, fn)
            return self._returns(call, rel)
        return []

    def _returns(self, function: str, rel: str) -> list[str]:
        """The texts the module's ``function`` returns (each of its definitions')."""
        if (rel, function) in self._rendering:
            return []
        self._rendering.add((rel, function))
        try:
            return [t for cls, f in self.functions[rel].get(function, []) for node in ast.walk(f)
                    if isinstance(node, ast.Return) and node.value is not None
                    for t in self._render(node.value, rel, cls, f.name)]  # fmt: skip
        finally:
            self._rendering.discard((rel, function))

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
        if isinstance(expr, ast.Name) and fn and (vals := self._local(expr.id, rel, fn)):
            return vals
        if isinstance(expr, (ast.IfExp, ast.BoolOp)):
            return self._values(expr, rel, cls, fn)
        return self._unknown(expr)

    def _local(self, name: str, rel: str, fn: str) -> list[str]:
        """The texts function ``fn`` assigns to its local ``name``."""
        return [t for cls, f in self.functions[rel].get(fn, []) for node in ast.walk(f)
                if isinstance(node, ast.Assign) and [_name(t) for t in node.targets] == [name]
                and isinstance(node.targets[0], ast.Name) for t in self._values(node.value, rel, cls, fn)]  # fmt: skip

    def texts(self) -> list[Text]:
        out = []
        for rel, tree in self.trees.items():
            module = vars(importlib.import_module(rel.removesuffix(".py").replace("/", ".")))
            errors = {n for n, v in module.items() if isinstance(v, type) and issubclass(v, self.errors)}
            readers = {f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.returns is not None
                       and "str | None" in ast.unparse(f.returns)}  # fmt: skip  # (value, fault) readers; why or None
            for cls, fn, node in _walk(tree):
                found: list[tuple[bool, ast.AST]] = []
                if isinstance(node, ast.Call):
                    call = _name(node.func)
                    if call in errors and node.args and fn not in self.built:
                        found.append((True, node.args[0]))
                    if call in self.calls and node.args:
                        found.append((False, node.args[0]))
                    found += [(False, k.value) for k in node.keywords if k.arg in self.keywords]
                elif isinstance(node, ast.Return) and fn in readers and isinstance(node.value, ast.Tuple):
                    found += [(False, e) for e in node.value.elts if isinstance(e, (ast.JoinedStr, ast.Constant))]
                elif isinstance(node, ast.Return) and fn in readers and isinstance(node.value, (ast.JoinedStr,
                                                                                                ast.Constant)):
                    found.append((False, node.value))  # a function that says why, or None
                elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                    for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                        pairs = (zip(target.elts, node.value.elts, strict=False) if isinstance(target, ast.Tuple)
                                 and isinstance(node.value, ast.Tuple) else [(target, node.value)])  # fmt: skip
                        found += [(False, v) for t, v in pairs if _name(t) in self.names]
                for raised, value in found:
                    texts = tuple(dict.fromkeys(t for t in self._render(value, rel, cls, fn)
                                                if t.strip(HOLE + INNER + " :()")))  # fmt: skip
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


# The recorder's fault is its status's "error", which its diagnostics' message repeats: what it reports through _fail,
# a RecorderError's message (the session file's, an episode writer's: one is made per episode, so what its __init__
# raises is a running graph's fault) or its own words. An episode writer's texts wrap what its process or its sender
# thread found (`_error`; the process's `error`): the writer's words around it never hide its code.
RECORDER_MODULES = modules("recorder/node.py", "recorder/session_file.py", "recorder/episode_writer.py",
                           "recorder/episode_child.py")  # fmt: skip
RECORDER_WRITER = ("src/recorder/episode_writer.py", "src/recorder/episode_child.py")
RECORDER_WRAPPERS = {"… failed: \x00; kept as …", "… failed: \x00", "… could not be written (\x00); kept as …"}
# The policy's fault: a PolicyServerError's message (its clients', the runner's; a client is made per connection)
# and a chunk's ContractError, which the runner keeps as last_error (/policy/status) and a step's record gives as why
# the arm holds (StepRecord.reason, the status's step); policy_node's diagnostics put its words before them
# (POLICY_DIAGNOSTICS, read from its _publish_diagnostics), the runner its "not sent: " before a connection's loss.
POLICY_MODULES = modules("policy_node/node.py", "policy_node/runner.py", "policy_node/protocol.py",
                         "policy_node/chunks.py", "policy_node/clients/openpi_ws/*.py")  # fmt: skip
POLICY_DIAGNOSTICS = {"no policy server: \x00", "holding: \x00"}
POLICY_NOT_SENT = "not sent: \x00"
# Texts the scan must find, each with the code written for it (an entry's alternative that a later, wider entry would
# also take: removing it changes the code, not whether there is one)
EXPECTED = {
    "… could not be read (…): moved aside as ……; resumed with the other episodes": "REC-UNREADABLE",
    "… is unreadable (…) and cannot be moved aside: …": "REC-UNREADABLE",
    "… was recorded with env_args …, this session has …: record into a new file": "REC-SESSION",
    "…: the index could not be rewritten (…); the episode files are complete, and the recorder's next start lists any "
    "the index missed": "REC-INDEX",
    "cannot start the writer of …: …": "REC-WRITER", "the episode writer process stopped answering": "REC-WRITER",
    "the episode writer could not be sent …: …": "REC-WRITER",
    "… is closed": "REC-INTERNAL", "a step needs images …, got …": "REC-INTERNAL", "saving … failed: …": "REC-INTERNAL",
    "…: the save did not finish within … s: its writer was stopped; kept as …": "REC-SLOW",
    "image write failed: …": "REC-WRITE", "closing failed: …": "REC-WRITE", "… failed: …; kept as …": "REC-WRITE",
    "observation … ms old (policy.max_obs_age … ms)": "POLICY-STALE",
    "no observation yet (policy.max_obs_age … ms)": "POLICY-STALE",
    "the server's metadata exceeds policy.max_reply_bytes (… bytes): refused unread, the connection closed":
        "POLICY-TOO-BIG",
    "the reply exceeds policy.max_reply_bytes (… bytes): refused unread, the connection closed": "POLICY-TOO-BIG",
    "the reply is not openpi's msgpack-numpy: …": "POLICY-PROTOCOL", "the server's metadata is a …, not a map":
        "POLICY-PROTOCOL",
    "the observation cannot be sent: …": "POLICY-MALFORMED", "action … of the chunk: …": "POLICY-MALFORMED",
    "a chunk of … actions (at most …)": "POLICY-MALFORMED",
    "the server closed the connection (…)": "POLICY-NO-SERVER", "the connection closed": "POLICY-NO-SERVER",
    "connecting": "POLICY-NO-SERVER", "not sent: …": "POLICY-NO-SERVER",
}  # fmt: skip


@functools.cache
def recorder_texts() -> list[Text]:
    from recorder.session_file import RecorderError

    return FaultTexts(RECORDER_MODULES, errors=(RecorderError,), names=frozenset({"_error"}),
                      calls=frozenset({"_fail"}), inner=frozenset({"_error", "detail"}), built=frozenset()).texts()


@functools.cache
def policy_texts() -> list[Text]:
    from libero_workcell.contract import ContractError
    from policy_node.protocol import PolicyServerError

    return FaultTexts(POLICY_MODULES, errors=(PolicyServerError, ContractError), calls=frozenset({"_mark_lost"}),
                      keywords=frozenset({"reason"}), inner=frozenset({"last_error"}),
                      built=frozenset()).texts()  # fmt: skip


def policy_diagnostics() -> set[str]:
    """The texts policy_node's diagnostics say around another one (its _publish_diagnostics' ``message``)."""
    tree = ast.parse((SRC / "policy_node/node.py").read_text(encoding="utf-8"))
    fn = next(f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name == "_publish_diagnostics")
    texts = FaultTexts(["policy_node/node.py"], names=frozenset({"message"}),
                       inner=frozenset({"last_error", "reason"})).texts()  # fmt: skip
    lines = range(fn.lineno, fn.end_lineno + 1)
    return {x for t in texts if int(t.where.rsplit(":", 1)[1]) in lines for x in t.texts if INNER in x}


def filled(template: str, hole: str) -> str:
    return template.replace(INNER, hole).replace(HOLE, hole)


def test_the_scan_finds_the_recorders_and_the_policys_texts() -> None:
    recorder = {x for t in recorder_texts() for x in t.texts}
    policy = {x for t in policy_texts() for x in t.texts}
    assert recorder >= RECORDER_WRAPPERS and POLICY_NOT_SENT in policy
    assert policy_diagnostics() == POLICY_DIAGNOSTICS
    for text in ["the episode writer fell … s behind (disk too slow?)", "…: … steps recorded, a demo needs at least 2: "
                 "discarded", "the episode writer process ended (killed by …)", "…: only … MiB free, at least … MiB "
                 "are needed to record an episode: free some space or record elsewhere"]:  # fmt: skip
        assert text in {read(x) for x in recorder}, text
    for text in ["no reply within … ms", "the server failed: …", "the reply has no 'actions' (keys: …)",
                 "cannot connect to the policy server at …: …", "the policy client failed: …: …"]:  # fmt: skip
        assert text in {read(x) for x in policy}, text
    scanned = {read(x) for x in recorder | policy}
    assert not set(EXPECTED) - scanned, set(EXPECTED) - scanned
    wrong = {text: (classify(text).code if classify(text) else None) for text, code in EXPECTED.items()
             if classify(text) is None or classify(text).code != code}  # fmt: skip
    assert not wrong, wrong


def test_every_fault_text_the_recorder_can_emit_has_its_code() -> None:
    """As its status's "error" and its diagnostics say it (workcell status: "recorder error: TEXT [CODE]")."""
    missing = uncoded(recorder_texts(), (faults.RECORDER,))
    assert not missing, "fault texts with no code (add a pattern to libero_workcell/faults.py):\n" + "\n".join(missing)


def test_the_episode_writers_words_around_a_text_never_hide_its_code() -> None:
    """"demo_3 could not be written (the episode writer process ended ...); kept as ..." is REC-WRITER: the words
    around what the writer's process or thread found keep its code (REC-WRITE only where it has none)."""
    texts = recorder_texts()
    inner = {read(x) for t in texts if t.where.split(":")[0] in RECORDER_WRITER and not t.raised for x in t.texts}
    assert "image write failed: …" in inner and "the episode writer fell … s behind (disk too slow?)" in inner
    hidden = []
    for text in inner:
        own = classify(text, (faults.RECORDER,))
        for wrapper in RECORDER_WRAPPERS:
            shown = classify(wrapper.replace(INNER, text), (faults.RECORDER,))
            if shown is None or (own is not None and shown is not own):
                hidden.append(f"{wrapper.replace(INNER, text)!r} reads as {shown and shown.code}, not "
                              f"{own and own.code}")  # fmt: skip
    assert not hidden, "\n".join(hidden)


def test_every_fault_text_the_policy_can_emit_has_its_code_behind_the_nodes_words() -> None:
    """Bare (/policy/status's last_error and its step's reason; the console), behind the diagnostics' words
    ("no policy server: ", "holding: ") and the runner's ("not sent: "): the code, and the text's own."""
    texts = policy_texts()
    missing = uncoded(texts, (faults.POLICY,))
    hidden = []
    for text in {read(x) for t in texts for x in t.texts}:
        own = classify(text, (faults.POLICY,))
        for wrapper in {*POLICY_DIAGNOSTICS, POLICY_NOT_SENT, POLICY_NOT_SENT + "\x00".join(POLICY_DIAGNOSTICS)}:
            shown = classify(wrapper.replace(INNER, text), (faults.POLICY,))
            if shown is None or shown is not own:
                hidden.append(f"{wrapper.replace(INNER, text)!r} reads as {shown and shown.code}, not "
                              f"{own and own.code}")  # fmt: skip
    assert not missing, "fault texts with no code (add a pattern to libero_workcell/faults.py):\n" + "\n".join(missing)
    assert not hidden, "\n".join(hidden)


def test_the_servers_words_in_a_policy_text_never_decide_its_code() -> None:
    """A policy text carries the server's own words (a traceback's last line, a close reason, a reply's keys, what
    websockets says) after the node's (its first ": " or " ("): whatever they are, even another fault's text, the
    code is the one the node's words give; so with an older last_error of another fault beside it (diagnostics)."""
    examples = [f.example for f in FAULTS]
    changed = []
    for template in {x for t in policy_texts() for x in t.texts if x != POLICY_NOT_SENT}:
        own = classify(read(template), (faults.POLICY,))
        head, sep, tail = (re.split(r"(: | \()", template, maxsplit=1) + ["", ""])[:3]  # the node's words, the rest
        if HOLE not in tail and INNER not in tail:
            continue
        for example in examples:
            said = filled(head, "7") + sep + filled(tail, example)
            for text in (said, f"holding: {said} {example}"):
                if (got := classify(text, (faults.POLICY,))) is not own:
                    changed.append(f"{text!r} reads as {got and got.code}, not {own and own.code}")
    assert not changed, "\n".join(changed[:20])


def test_every_text_teleop_holds_the_arm_with_comes_with_a_coded_status() -> None:
    """Teleop's words (/teleop/status "fault") always come with its status, and workcell status codes the status
    (its name: TELEOP-...), not the words: every status teleop holds the arm with, in its source, has a code."""
    from teleop_pico.core import Status
    from workcell.operator_cli import format_status

    held = set()
    for rel in modules("teleop_pico/*.py"):
        for node in ast.walk(ast.parse((SRC / rel).read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Call, ast.Tuple)):
                items = node.args if isinstance(node, ast.Call) else node.elts
                held |= {a.attr for a in items if isinstance(a, ast.Attribute) and _name(a.value) == "Status"}
    assert {"NO_SOURCE", "FROZEN", "NO_TRACKING", "BAD_INPUT", "BAD_STATE", "JUMP", "ARM_NOT_ENABLED",
            "INVALID_ACTION", "NO_STATE"} <= held  # fmt: skip
    for name in held - {"IDLE", "FOLLOWING"}:
        status = Status[name].value
        fault = classify(status, (faults.TELEOP,))
        assert fault is not None, name
        text = format_status({"teleop": {"status": status, "fault": "the controller moved 0.4 m"}}, 1)
        assert f"teleop holds the arm: {status} [{fault.code}]" in text and fault.recovery in text


def test_status_shows_a_recorder_and_a_policy_fault_with_its_code_and_what_to_do() -> None:
    """The texts the scan reads, as workcell status gets them: the recorder's status "error", the policy's
    diagnostics at WARN (with an older last_error of another fault beside it)."""
    from workcell.operator_cli import format_status

    stale = "holding: observation 412 ms old (policy.max_obs_age 200 ms)"
    failed = ("demo_3 could not be written (the episode writer process ended (killed by SIGKILL)); kept as "
              "/data/demos/d2s_episodes/demo_3.hdf5.partial")  # fmt: skip
    templates = {x for t in policy_texts() + recorder_texts() for x in t.texts} | POLICY_DIAGNOSTICS
    for text in (stale.removeprefix("holding: "), failed, "the episode writer process ended (killed by SIGKILL)"):
        assert any(re.fullmatch(".*".join(map(re.escape, re.split(f"[{HOLE}{INNER}]", x))), text) for x in templates)
    seen = {
        "nodes": ["policy_node", "recorder"],
        "diagnostics": {"policy_node": (1, stale, {"last_error": "no reply within 500 ms"}),
                        "recorder": (2, failed, {"last_error": failed})},
        "recorder": {"recording": False, "error": failed},
    }  # fmt: skip
    text = format_status(seen, 7)
    assert f"WARN  policy_node: {stale} [POLICY-STALE]" in text
    assert f"ERROR recorder: {failed} [REC-WRITER]" in text  # (its diagnostics, faults first: the recorder's)
    assert f"recorder error: {failed} [REC-WRITER]" in text
    todo = text.split("what to do:\n")[1].splitlines()
    assert todo == [f"    REC-WRITER: {faults.BY_CODE['REC-WRITER'].recovery}",
                    f"    POLICY-STALE: {faults.BY_CODE['POLICY-STALE'].recovery}"]  # fmt: skip
    for fault in (f for f in FAULTS if f.device in (faults.RECORDER, faults.POLICY)):  # each code, where it shows
        where = {"recorder": {"error": fault.example}} if fault.device == faults.RECORDER else \
            {"diagnostics": {"policy_node": (2, fault.example, {"last_error": fault.example})}}  # fmt: skip
        shown = format_status(where, 7)
        assert f"{fault.example} [{fault.code}]" in shown and f"    {fault.code}: {fault.recovery}" in shown, shown


def test_a_diagnostics_text_is_a_fault_of_the_devices_its_name_reports_on() -> None:
    """A recorder's error naming a path with "conveyor" in it is not a belt fault; the session log's full disk is
    its own (the console and `workcell status` classify a /diagnostics text by the status's name)."""
    text = "image write failed: /data/conveyor_link/d2s_episodes/demo_3.hdf5: [Errno 28] No space left on device"
    assert classify(text).code == "BELT-LINK"  # (among every device's patterns)
    assert classify(text, faults.diagnostic_devices("recorder")).code == "REC-WRITE"
    assert classify("logging stopped: [Errno 28] No space left on device",
                    faults.diagnostic_devices("session_log")).code == "LOG-STOPPED"  # fmt: skip
    assert faults.diagnostic_devices("camera/wrist") == (faults.CAMERA,) and faults.diagnostic_devices("x") == ()
