"""Every fault the stack reports to the operator, in one table: a short stable code, what it means, what to do.

Why: the nodes report faults as text (``/diagnostics`` messages, the arm's ``/aubo/mode``, the recorder's and the
teleop's status), written where the fault is found and worded for that place. An operator needs the same
answer for the same fault wherever it shows: ``workcell status`` matches each reported text against this table
and prints the code and its recovery; ``docs/operator.md`` ("Faults") holds the table as
:func:`markdown_table` writes it (``tests/contract/test_fault_codes.py`` keeps the two in step, and checks that the
messages the code really produces find their codes). ``python -m libero_workcell.faults`` prints the table.

Order matters: the first entry whose pattern matches a text is its fault, so the specific come before the
general (a gripper fault reaches the operator through the arm, prefixed ``gripper:``; a policy fault through
policy_node's words, :data:`POLICY_WORDS`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

ARM, GRIPPER, BELT, CAMERA, POLICY, RECORDER, TELEOP = "arm", "gripper", "conveyor", "camera", "policy", "recorder", \
    "teleop"  # fmt: skip
LOG: Final = "session log"
DEVICES: Final = (ARM, GRIPPER, BELT, CAMERA, POLICY, RECORDER, TELEOP, LOG)
RESET_ENABLE: Final = "then `workcell call reset` and `workcell call enable`"
# policy_node's own words before a policy text: its diagnostics' ("no policy server: ", "holding: ") and the
# runner's for a request it could not send ("not sent: "). A policy pattern reads the words right after them,
# never further on, where the server's own words follow (a traceback's last line, a close reason, a reply's keys).
POLICY_WORDS: Final = r"^(?:no policy server: |holding: |not sent: )*"


def _policy(alternatives: str) -> str:
    """A policy fault's pattern: ``alternatives`` right after :data:`POLICY_WORDS`."""
    return f"{POLICY_WORDS}(?:{alternatives})"


@dataclass(frozen=True)
class Fault:
    code: str  # short and stable: quoted in logs, notes and the docs
    device: str  # one of DEVICES
    pattern: str  # a regular expression found (re.search) in the text the stack reports
    meaning: str
    recovery: str
    example: str  # a text the stack reports for it (tests/contract/test_fault_codes.py checks it finds this code)

    def matches(self, text: str) -> bool:
        return re.search(self.pattern, text) is not None


FAULTS: Final[tuple[Fault, ...]] = (
    # ---------------------------------------------------------------- the simulated controller (a rehearsal)
    # first of all: its reason is free text, which may name any other fault
    Fault("ARM-SIM-STOP", ARM, r"^controller protective stop: ",
          "A protective stop set in the simulated controller (sim_world's `arm_fault`, a rehearsal): the reason "
          "follows.",
          "End it with `workcell call sim clear` (or `ros2 param set /sim_world arm_fault \"\"`), then "
          "`workcell call reset` and `workcell call enable`.",
          "controller protective stop: protective stop: collision at the tray"),
    # ---------------------------------------------------------------- the gripper (reported through the arm)
    Fault("GRIP-ALARM", GRIPPER, r"gripper alarm code",
          "The gripper reports an alarm (its alarm register is non-zero).",
          f"Check the fingers are free and the load within the gripper's force; {RESET_ENABLE}.",
          "gripper: gripper alarm code 3"),
    Fault("GRIP-STALE", GRIPPER, r"gripper state stale",
          "No fresh reading from the gripper within `gripper.max_age`: the bus is too slow or the gripper stopped "
          "answering.",
          f"Check the RS-485 adapter and cable (`workcell check`); {RESET_ENABLE}.",
          "gripper: gripper state stale (0.512 s old, max 0.4 s)"),
    Fault("GRIP-TOOL", GRIPPER, r"tool Modbus signals missing|tool RS-485|tool gripper",
          "The gripper on the arm's tool flange (`gripper_path: tool`) does not answer through the controller.",
          f"Check the tool connector and the tool supply voltage on the pendant; {RESET_ENABLE} (adds the Modbus "
          "signals again).",
          "gripper: tool RS-485 /dev/ttyRobotTool: disconnected"),
    Fault("GRIP-LINK", GRIPPER, r"^gripper: ",
          "The gripper's RS-485 link failed (no valid reply at its Modbus ID, or the port is gone).",
          "Check the adapter (`/dev/ttyGripper`), the cable, the ID and the baud rate (`workcell check`); "
          f"{RESET_ENABLE}. A power-cycled gripper needs the node restarted (it is enabled once).",
          "gripper: ctag_gripper: link down: read 0x0418: no valid reply after 3 attempts (No response received)"),
    # ---------------------------------------------------------------- the arm (the ARCS controller and the driver)
    Fault("ARM-ESTOP", ARM, r"EmergencyStop",
          "An emergency stop is engaged (the pendant's or control box's button, or the external e-stop input); "
          "the arm is powered off.",
          "Release the e-stop, make the cell safe, then `workcell call reset` (restarts the safety board and "
          "powers the arm on: stand clear) and `workcell call enable`.",
          "safety mode RobotEmergencyStop"),
    Fault("ARM-COLLISION", ARM, r"collision detected",
          "The controller detected a collision and stopped the arm.",
          f"Free the arm and clear the obstacle, {RESET_ENABLE}.",
          "collision detected (isCollisionOccurred)"),
    Fault("ARM-PSTOP", ARM, r"safety mode ProtectiveStop|refused to unlock the",
          "The controller made a protective stop; the arm stays powered.",
          f"Remove the cause (the pendant's log names it), {RESET_ENABLE}.",
          "safety mode ProtectiveStop"),
    Fault("ARM-SAFEGUARD", ARM, r"safety mode SafeguardStop",
          "The safeguard input (light curtain, door switch) stopped the arm.",
          f"Clear the safeguard and reset it (its reset input, if it has one), {RESET_ENABLE}.",
          "safety mode SafeguardStop"),
    Fault("ARM-VIOLATION", ARM, r"safety mode Violation",
          "A safety limit (joint, speed, force or position) was violated; the arm is powered off.",
          f"Find which limit in the pendant's log, confirm safety on the teach pendant, {RESET_ENABLE}.",
          "safety mode Violation"),
    Fault("ARM-CONTROLLER", ARM, r"safety mode Fault|robot mode Error",
          "The controller reports a hardware or system fault; the arm is powered off.",
          f"Read and clear it on the teach pendant, {RESET_ENABLE}; power-cycle the controller if it stays.",
          "safety mode Fault"),
    Fault("ARM-NO-ARM", ARM, r"robot mode (NoController|Disconnected)|reports no robot",
          "The controller has no link to the arm.",
          f"Check the arm's power and the cable between the control box and the arm, {RESET_ENABLE}.",
          "robot mode Disconnected: controller has no link to the arm"),
    # An SDK call that failed (session.call: "ARCS <ip:port>: <the SDK's words>"): first, so a text that carries one
    # (the driver's "servo command refused: ...", a state poll's) shows it, not the step that made the call.
    Fault("ARM-RPC", ARM, r"ARCS \S+: ",
          "A call to the controller failed in pyaubo_sdk: no reply within `arcs.request_timeout` (`RPC request "
          "timeout.`: a busy controller or a slow or lost network), the connection dropped, or a reply it could not "
          "read; the arm holds.",
          f"Check the network to the controller and the controller's load (`workcell check`), {RESET_ENABLE} (it "
          "reconnects).",
          "servo command refused: ARCS 192.168.10.20:30004: RPC request timeout."),
    Fault("ARM-LOGIN", ARM, r"login to .* (failed|rejected|refused)",
          "The controller refused the robot PC's login (RPC or RTDE): a wrong user or password.",
          f"Set `arcs.user` and `arcs.password` to the controller's (`workcell check`), {RESET_ENABLE}.",
          "login to 192.168.10.20:30004 as 'aubo' rejected (wrong user or password?): -7"),
    Fault("ARM-SDK-VERSION", ARM, r"interface version mismatch",
          "pyaubo_sdk and the controller speak different interface versions: the connection is refused.",
          "Install the pyaubo-sdk that matches the controller's ARCS version (HARDWARE.md), then `workcell call "
          "reset`.",
          "ARCS controller at 192.168.10.20:30004: interface version mismatch between pyaubo_sdk and the controller"),
    Fault("ARM-LINK", ARM, r"connection to ARCS controller .* lost|state poll (of .* )?failed|RTDE stream from .* "
          r"lost|RTDE (connect|port)|connect to ARCS controller|unreachable|refused the connection|^not connected|"
          r"ARCS backend not connected|ip is not configured",
          "The robot PC lost its RPC or RTDE connection to the controller, or cannot open it.",
          "Check the network to the controller and `arcs.ip` (`workcell check`), "
          f"{RESET_ENABLE} (it reconnects).",
          "connection to ARCS controller at 192.168.10.20:30004 lost"),
    Fault("ARM-STALE", ARM, r"state from .* stale|no state from the .* process|no (first )?measurement|sim world|"
          r"sim link",
          "No fresh arm state within `arcs.state_stale_after` (a slow network or controller, or a hung SDK "
          "process; in simulation, a stopped or stalled sim_world).",
          f"Check the network and the controller's load (in simulation: that sim_world runs), {RESET_ENABLE}.",
          "state from 192.168.10.20:30004 stale: no reply for 0.30 s"),
    Fault("ARM-RTDE-FRAME", ARM, r"malformed RTDE frame|recipe refused|returned .*, expected",
          "An RTDE frame or an RPC reply did not parse, or the RTDE recipe was refused (an SDK or controller "
          "version that does not match).",
          "Install the pyaubo-sdk that matches the controller's ARCS version; `workcell call reset` sends the "
          "recipe again.",
          "malformed RTDE frame from 192.168.10.20:30010 (RTDE): ValueError: shapes q (5,)"),
    Fault("ARM-FOLLOWING", ARM, r"following error",
          "A joint lagged its servo target too far: something held the arm back, or the controller runs slower "
          "than commanded.",
          f"Check what blocked the arm and the controller's speed slider, {RESET_ENABLE}.",
          "following error: joint 2 is 0.210 rad from its servo target"),
    Fault("ARM-NOT-READY", ARM, r"left the ready state|still not ready|not Running after|\S+ refused by ",
          "The controller left Running (powered off, brakes applied, or taken over from the pendant).",
          "Bring it back to Running (`workcell call reset` runs the start-up path: stand clear, the brakes "
          "release), then `workcell call enable`.",
          "arm controller left the ready state"),
    Fault("ARM-SERVO", ARM, r"servoJoint|setServoModeSelect|stopJoint|did not confirm a hold|refusing servo target",
          "The controller refused a servo target or a hold (limits, inverse kinematics, not in servo mode).",
          f"Read the reason in the fault; move the arm back into its workspace from the pendant if needed, "
          f"{RESET_ENABLE}.",
          "servo tick failed: servoJoint refused: -5 (invalid argument: joint limits or target out of range)"),
    # Last of the arm's: the driver's own words around a text no entry above knows (a bug's exception), and its
    # processes'. An entry above, when it knows the text inside, comes first.
    Fault("ARM-DRIVER", ARM, r"servo loop is not running|process (exited|gone|gave no answer|not running)|"
          r"arm driver:|servo tick failed|servo command refused|state read failed|^(closed|not started)$",
          "The arm driver failed to read the arm or to send it a target for a reason no other code names (the "
          "text says which), or its servo loop or one of its SDK processes stopped.",
          "`workcell call reset` restarts it; the node's log names the cause if it happens again.",
          "arcs-arm-servo process exited during servo"),
    # ---------------------------------------------------------------- the conveyor
    Fault("BELT-ESTOP-UNCONFIRMED", BELT, r"(?i)emergency stop (not confirmed|failed)",
          "The drive did not acknowledge an emergency stop: the belt may still run.",
          "Use the hardware e-stop now; the node re-sends the stop until the drive confirms it. Then check the "
          "RS-485 link.",
          "emergency stop not confirmed by the drive: conveyor: emergency stop not confirmed by the drive within 2 s"),
    Fault("BELT-ESTOP", BELT, r"emergency stop requested",
          "The belt was emergency-stopped (`/conveyor/emergency_stop`); it stays stopped.",
          "`workcell call belt reset`, then `workcell call belt start`.",
          "emergency stop requested"),
    Fault("BELT-STOP-UNCONFIRMED", BELT, r"stop not confirmed|^halt failed",
          "The drive did not acknowledge a stop: the belt may still run.",
          "Use the hardware stop; check the RS-485 link; `workcell call belt reset` once the drive answers.",
          "stop not confirmed by the drive: conveyor: stop not confirmed by the drive within 2.0 s"),
    Fault("BELT-DRIVE", BELT, r"fault code",
          "The drive reports a fault code (its manual names it: overcurrent, overvoltage, overload, ...); the "
          "belt stopped.",
          "Clear the cause at the drive, then `workcell call belt reset` and `workcell call belt start`.",
          "delta_vfd fault code 7 (0x0007)"),
    Fault("BELT-STALE", BELT, r"conveyor state stale|no read-back from|sim world|sim link",
          "No fresh state from the drive (or the relay's controller output, or in simulation sim_world) within its "
          "max age.",
          "Check the RS-485 link or the network to the controller (`workcell check`); `workcell call belt reset`.",
          "conveyor state stale (1.204 s old, max 1.0 s)"),
    Fault("BELT-LINK", BELT, r"conveyor|link down|no valid reply|not polled yet|ARCS|^(not connected|closed)$|"
          r"login to",
          "The link to the conveyor drive failed (RS-485, or the controller output of a relay-switched belt).",
          "Check the cable, `modbus.port` and `modbus.slave_id` (`workcell check`), then `workcell call belt reset`.",
          "conveyor_delta_vfd: link down: read 0x2100: no valid reply after 3 attempts (No response received)"),
    # ---------------------------------------------------------------- the cameras
    Fault("CAM-ENDED", CAMERA, r"end of playback",
          "The recording standing in for a camera ended.",
          "Restart with `realsense.playback_loop:=true`, or use the camera itself.",
          "end of playback file /data/wrist.db3"),
    Fault("CAM-LOST", CAMERA, r"is not connected|cannot open|unplugged|RealSense devices are connected",
          "The camera gives no frames: unplugged, stalled, or not the serial / path configured. The node "
          "reopens it by itself.",
          "Check the cable and `realsense.serial` / `uvc.device` (`workcell check`); it comes back when plugged in.",
          "RealSense 123456789012 is not connected (connected: [])"),
    Fault("CAM-STALE", CAMERA, r"frame is .* old|no frame yet|no frame within|frame not published",
          "The newest frame is older than `max_frame_age` (or there is none yet): the policy and the recorder "
          "refuse it.",
          "Check the USB bandwidth (`uvc.fourcc: MJPG` on USB 2) and the CPU load; see CAM-LOST if it stopped.",
          "newest frame is 410 ms old (max 200 ms)"),
    # ---------------------------------------------------------------- the policy
    Fault("POLICY-STALE", POLICY, _policy(r"(no observation yet|observation \S+ ms old) \(policy\.max_obs_age "),
          "The newest observation (the robot state or a camera frame) is older than `policy.max_obs_age`, or none "
          "came yet: it is never sent; the arm holds until the inputs are fresh.",
          "Find the stale input in `workcell status` (CAM-STALE, CAM-LOST, ARM-STALE) and the CPU load; raise "
          "`policy.max_obs_age` only for inputs known to come that late.",
          "holding: observation 412 ms old (policy.max_obs_age 200 ms)"),
    Fault("POLICY-NO-TASK", POLICY, _policy(r"no task"),
          "The policy has no instruction: on the physical cell `/policy/start` is refused without one.",
          "`workcell call policy task \"...\"` (or `task:=` at bring-up), then `workcell call policy start`.",
          "no task: on the physical cell the policy starts only with an instruction"),
    Fault("POLICY-TIMEOUT", POLICY, _policy(r"no reply within"),
          "The policy server did not answer within `policy.timeout`; the arm holds and the node reconnects.",
          "Check the GPU machine's load and the network; raise `policy.timeout` only for a known longer round trip.",
          "no policy server: no reply within 500 ms"),
    Fault("POLICY-SERVER", POLICY, _policy(r"the server failed"),
          "The policy raised an exception on the server (the last line of its traceback is shown).",
          "Read the server's log; check the checkpoint's inputs match `policy.state_format` and `policy.image_view` "
          "(docs/training.md).",
          "no policy server: the server failed: KeyError: 'observation/state'"),
    Fault("POLICY-TOO-BIG", POLICY, _policy(r"(the reply|the server's metadata) exceeds policy\.max_reply_bytes"),
          "A frame from the policy server was larger than `policy.max_reply_bytes` (4 MiB by default; openpi's "
          "replies are a few KiB): refused unread; the arm holds and the node reconnects.",
          "Check that `policy_url` is openpi's policy server; raise `policy.max_reply_bytes` only for a server known "
          "to send more.",
          "no policy server: the reply exceeds policy.max_reply_bytes (4194304 bytes): refused unread, the "
          "connection closed"),
    Fault("POLICY-PROTOCOL", POLICY, _policy(r"the (reply|server's metadata) is not openpi's msgpack-numpy|"
                                             r"the server's metadata is a |the server's first frame is text"),
          "A frame from the policy server is not openpi's msgpack-numpy (corrupt, or an array of a dtype, shape or "
          "size the client never builds), or its first frame is not openpi's metadata: refused before numpy read "
          "it; the arm holds and the node reconnects, waiting longer after each such fault.",
          "Check that `policy_url` is openpi's policy server (`curl http://HOST:PORT/healthz`) and nothing else "
          "listens there (docs/policy.md, \"What the client accepts\").",
          "no policy server: the reply is not openpi's msgpack-numpy: dtype '|O' is not numeric (bool, int, uint or "
          "float of 1, 2, 4 or 8 bytes)"),
    Fault("POLICY-CLIENT", POLICY, _policy(r"the policy client failed"),
          "policy_node's client thread failed on something no handler expected (the exception is shown): it "
          "reported it, dropped the connection and reconnects; the arm holds meanwhile.",
          "Report it with the log line (a bug); the node reconnects by itself.",
          "no policy server: the policy client failed: MemoryError: a bug in the client"),
    Fault("POLICY-MALFORMED", POLICY, _policy(r"the reply |the observation cannot be sent|actions (are|must)|"
                                              r"action \S+ of the chunk|a chunk of \S+ actions"),
          "A reply that is not a chunk of valid 7-D actions (shape, NaN, range) was refused; the arm holds.",
          "Check that the server runs a checkpoint for this workcell's 7-D actions (docs/training.md).",
          "the reply has no 'actions' (keys: ['error'])"),
    Fault("POLICY-NO-SERVER", POLICY, _policy(r"no policy server|cannot connect to the policy server|the server "
                                              r"closed the connection|connection lost|the connection closed|"
                                              r"connecting$|not sent: "),
          "policy_node cannot reach the policy server; nothing is sent and the arm holds.",
          "Start the server, check `policy_url` (`curl http://HOST:PORT/healthz`, `workcell check`); the node "
          "reconnects by itself.",
          "no policy server: cannot connect to the policy server at ws://gpu:8000: [Errno 111] Connection refused"),
    # ---------------------------------------------------------------- the session log
    Fault("LOG-STOPPED", LOG, r"^logging stopped: ",
          "The session log stopped writing: the system refused a write (a full disk, a folder gone). It follows "
          "nothing more; the graph runs on, and what it wrote before stays readable.",
          "Free space in the folder of `record_mcap` (`python -m session_log.review FILE` reads what was written); "
          "a new log needs the graph brought up again.",
          "logging stopped: [Errno 28] No space left on device"),
    # ---------------------------------------------------------------- the recorder
    Fault("REC-DISK", RECORDER, r"MiB free",
          "Too little free disk space to record an episode (`min_free_mb`).",
          "Free some space, or record elsewhere (`record_path:=...`).",
          "/data/demos/d2s_episodes: only 120 MiB free, at least 512 MiB are needed to record an episode"),
    Fault("REC-SLOW", RECORDER, r"fell .* behind|did not finish within",
          "The image writer fell behind, or a save did not finish in time: the disk is too slow for two cameras at "
          "the control rate (or hung).",
          "Record to a faster local disk; the episode failed (kept as `*.partial`): record it again.",
          "the image writer fell 5 s behind (disk too slow?)"),
    Fault("REC-SHORT", RECORDER, r"a demo needs at least",
          "An episode was saved almost as soon as it started: too short to be a demo, discarded.",
          "Record it again (start, demonstrate, then save).",
          "demo_3: 1 steps recorded, a demo needs at least 2: discarded"),
    Fault("REC-UNREADABLE", RECORDER, r"could not be read \(|is unreadable \(",
          "An episode file of the session could not be read at start-up (a copy cut short, a failing disk): it is "
          "moved aside as `*.unreadable`, never deleted, and recording resumes with the others (if it cannot be "
          "moved, the recorder does not start).",
          "Check the disk (`dmesg`) and the folder's permissions; keep the moved file for recovery and record that "
          "demo again if the plan needs it.",
          "demo_4 could not be read (truncated file): moved aside as demo_4.hdf5.unreadable; resumed with the other "
          "episodes"),
    Fault("REC-SESSION", RECORDER, r"was recorded with env_args",
          "The session file was recorded on another setup (its `env_args`: the cell, the cameras, the control "
          "rate): the recorder never mixes two setups' demos in one session, and does not start.",
          "Record into a new file (`record_path:=...`), or bring up the setup the session was recorded with.",
          "/data/demos/d2s.hdf5 was recorded with env_args {...}, this session has {...}: record into a new file"),
    Fault("REC-INDEX", RECORDER, r"index could not be rewritten",
          "The session's index (the `.hdf5` that lists the demos) could not be rewritten (a full disk, "
          "permissions); the episode files themselves are complete.",
          "Free some space or fix the folder's permissions, then restart the recorder: at its start it lists every "
          "complete episode the index missed.",
          "/data/demos/d2s.hdf5: the index could not be rewritten (No space left on device); the episode files are "
          "complete, and the recorder's next start lists any the index missed"),
    Fault("REC-WRITER", RECORDER, r"writer process|cannot start the writer|writer could not be sent",
          "The episode's writer process could not start, ended or stopped answering (killed, out of memory, a "
          "crash): that episode failed and is kept as `*.partial`; earlier demos are kept.",
          "Record the episode again; if it repeats, read the node's log and `dmesg` (out of memory?).",
          "demo_3 could not be written (the episode writer process ended (killed by SIGKILL)); kept as "
          "/data/demos/d2s_episodes/demo_3.hdf5.partial"),
    Fault("REC-INTERNAL", RECORDER, r" is closed$|a step needs images|^saving .* failed: ",
          "The recorder met a failure no handler expected (the exception is shown), or a step or a save its own "
          "state does not allow (a bug): that episode failed; earlier demos are kept.",
          "Report it with the node's log (a bug); record the episode again.",
          "saving demo_3 failed: MemoryError()"),
    Fault("REC-WRITE", RECORDER, r"could not be written|cannot start|not writable|cannot record into|is missing|"
          r"not a session file|^[^:]* failed: ",
          "The recorder cannot write the session (permissions, a full disk, or a damaged session file); earlier "
          "demos are kept.",
          "Check the folder of `record_path` (`workcell check`); the failed episode is kept as `*.partial`.",
          "cannot record into /data/demos/d2s.hdf5: the file is not writable"),
    # ---------------------------------------------------------------- teleoperation
    Fault("TELEOP-NO-TRACKING", TELEOP, r"^no_tracking$",
          "The headset gives no controller pose (its PC service is not running, or the controller is not "
          "tracked); the arm holds.",
          "Start the XRoboToolkit PC service, connect the headset, keep the right controller in view (`workcell "
          "check`).",
          "no_tracking"),
    Fault("TELEOP-FROZEN", TELEOP, r"^frozen$",
          "The headset's stream stopped (its time stamp no longer advances); the arm holds.",
          "Check the headset's connection to the PC service; it resumes by itself, with a fresh clutch.",
          "frozen"),
    Fault("TELEOP-JUMP", TELEOP, r"^jump$",
          "The controller moved further than `teleop.max_jump` or turned further than `teleop.max_rot_jump` "
          "between samples (a tracking glitch); the clutch released.",
          "Release the grip and engage it again.",
          "jump"),
    Fault("TELEOP-NO-SOURCE", TELEOP, r"^no_source$",
          "The controller source failed or ended (a scripted session that finished); the arm holds.",
          "Restart the teleop node, or check its log for the source's error.",
          "no_source"),
    Fault("TELEOP-BAD-INPUT", TELEOP, r"^bad_input$",
          "The headset reports a grip or trigger that is not a finite number; the arm holds, the clutch released, "
          "the gripper as it was.",
          "Check the controller (its battery, its pairing with the headset); engage the grip again once "
          "`/teleop/status` says why no more.",
          "bad_input"),
    Fault("TELEOP-BAD-STATE", TELEOP, r"^bad_state$",
          "The robot state teleop follows from is not a state (NaN, or an absurd value); the arm holds.",
          "Check the arm bridge (`workcell status`: its fault and diagnostics); teleop resumes on a good state.",
          "bad_state"),
    Fault("TELEOP-INVALID-ACTION", TELEOP, r"^invalid_action$",
          "Teleop computed an action the contract refuses (a bug); a hold was sent instead.",
          "Report it with the node's log (it names the values); restart the teleop node.",
          "invalid_action"),
    Fault("TELEOP-NO-STATE", TELEOP, r"^no_state$",
          "No fresh robot state reaches teleop; it sends nothing and the arm's watchdog holds it.",
          "Check that the arm bridge runs and publishes `/workcell/robot_state` (`workcell status`).",
          "no_state"),
    Fault("TELEOP-NOT-ENABLED", TELEOP, r"^arm_not_enabled$",
          "The grip is pressed, but the arm is not enabled, or was stopped, homed or faulted since the grip was "
          "pressed: the clutch does not engage and the arm holds.",
          "`workcell call enable` (after `workcell call reset` for a fault), then release the grip and press it "
          "again.",
          "arm_not_enabled"),
)  # fmt: skip

BY_CODE: Final = {f.code: f for f in FAULTS}


# what a /diagnostics status reports on, by its name's first part ("camera/wrist": a camera): its text is a fault of
# these devices only (a recorder's path that names the conveyor is not a belt fault)
DIAGNOSTIC_DEVICES: Final[dict[str, tuple[str, ...]]] = {
    "aubo_bridge": (ARM, GRIPPER),
    "conveyor": (BELT,),
    "policy_node": (POLICY,),
    "camera": (CAMERA,),
    "recorder": (RECORDER,),
    "session_log": (LOG,),
}


def diagnostic_devices(name: str) -> tuple[str, ...]:
    """The devices a /diagnostics status named ``name`` reports on (none known: ())."""
    return DIAGNOSTIC_DEVICES.get(name.split("/")[0], ())


def classify(text: str, devices: Iterable[str] | None = None) -> Fault | None:
    """The fault a reported ``text`` is (the first entry that matches), among ``devices`` (default: all)."""
    wanted = set(DEVICES if devices is None else devices)
    return next((f for f in FAULTS if f.device in wanted and f.matches(text)), None)


def markdown_table() -> str:
    """The table docs/operator.md holds under "Faults"."""
    rows = ["| code | device | meaning | recovery |", "|---|---|---|---|"]
    rows += [f"| `{f.code}` | {f.device} | {f.meaning} | {f.recovery} |" for f in FAULTS]
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown_table())
