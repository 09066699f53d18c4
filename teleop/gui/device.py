"""The actor side of the web GUI: intervention device ``gui``.

Each actor opens a websocket to the GUI server (``ws://host:port/ws/actor/<k>``). After every executed
step (:meth:`GuiDevice.observe`) it sends its live numbers, and every camera image as a JPEG (OpenCV) at
most ``camera_hz`` times a second (the browser's decoding and drawing of frames is the GUI's main CPU
cost; at a ``camera_hz`` >= the control rate every step carries its frames); it
receives the operator's commands, which :meth:`GuiDevice.poll` turns into a
:class:`~robot_rl.runtime.intervention.HumanInput` with the keyboard/gamepad mapping and limits of the
device teleop (:data:`~robot_rl.teleop.keyboard.MOVE_KEYS`,
:class:`~robot_rl.teleop.command.ActionMapper`).

Failure behaviour: the actor never waits for the GUI. Without a connection (server not up yet, gone,
restarted) the device reports no human input (policy-only control), logs it once, and reconnects every
second; on a disconnect the take-over and held keys are dropped, so a lost browser or server never keeps
driving. A latched e-stop is the exception: it stays latched on the actor until the operator resets it
(a reconnecting actor re-latches the server's e-stop).

Messages (JSON text): actor -> server ``hello`` (``actor``, ``estop``) then ``status`` (the step info of
:class:`robot_rl.runtime.live.LiveStats` without ``obs``, plus ``frames`` {camera: base64 JPEG} (empty
between the ``camera_hz`` frame times), ``t_frame`` (s since the epoch, with frames), ``estop``,
``steps_after_latch``, ``takeover``, ``cmd_seq``, ``cmd_t_press`` (ms), ``cmd_t_applied`` (ms),
``observed`` steps), or a ``beat`` of the device's own
fields every 0.25 s while no step runs; server -> actor ``estop`` (``latched``), ``takeover``
(``on``), ``drive`` (``held`` key names, ``axes`` (3,) gamepad x/y/z in [-1, 1], ``pad`` RB held,
``gripper`` 0/1 or None, ``seq``, ``t`` (ms since the epoch of the browser's key event)) and ``label``.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import threading
import time
from typing import Any

import numpy as np

from robot_rl import keys
from robot_rl.runtime.intervention import LABELS, DeviceError, HumanInput
from robot_rl.teleop.command import ActionMapper, DeviceCommand, apply_deadzone
from robot_rl.teleop.keyboard import MOVE_KEYS

log = logging.getLogger(__name__)
TOKEN_ENV = "ROBOT_RL_GUI_TOKEN"
GUI_EXTRA = "pip install 'robot-rl[gui]'"
PAD_DEADZONE = 0.1  # as GamepadDevice's default
RECONNECT_S = 1.0
JPEG_QUALITY = 80
BEAT_S = 0.25  # status beat while no step runs (s)


def translation_from(held: list[str], axes: list[float]) -> np.ndarray:
    """(3,) float64 deflection from held key names (keyboard.MOVE_KEYS: ``up``/``down`` +-x,
    ``left``/``right`` +-y, ``page_up``/``page_down`` +-z, full deflection each) plus gamepad axes (3,)
    in [-1, 1] after the gamepad device's dead zone; clipped to [-1, 1] by the mapper."""
    t = np.zeros(3)
    for name in set(held):
        if name in MOVE_KEYS:
            axis, sign = MOVE_KEYS[name]
            t[axis] += sign
    a = np.nan_to_num(np.asarray(axes, dtype=np.float64).reshape(-1)[:3])
    if a.size == 3:
        t += apply_deadzone(a, PAD_DEADZONE)
    return t


def connect_host(host: str) -> str:
    """Where an actor reaches a server bound to ``host`` (a wildcard bind is reached on loopback)."""
    return "127.0.0.1" if host in ("", "0.0.0.0", "::") else host


class GuiDevice:
    """Intervention from the web GUI for actor ``actor_id`` (module docstring).

    Args:
        url: the server's websocket base, e.g. ``ws://127.0.0.1:8765``.
        actor_id: this actor's panel.
        action_low, action_high: the env's action box ``[dx, dy, dz, ..., grip]``; ``scale``: fraction of
            the largest step full deflection commands (as the keyboard device).
        control_hz: :meth:`poll` paces the control loop to this rate (a human drives in real time; a real
            robot already runs at it, so this only slows a simulator).
        token: the server's token ('' = none).
        camera_hz: camera frames sent per second (all cameras of a step together; Hz > 0).

    Raises:
        DeviceError: the ``websockets`` package is missing (names the ``gui`` extra).
        ValueError: a bad action box, scale, control rate or camera rate.
    """

    def __init__(
        self,
        url: str,
        actor_id: int,
        action_low: np.ndarray,
        action_high: np.ndarray,
        scale: float = 1.0,
        control_hz: float = 10.0,
        token: str = "",
        camera_hz: float = 5.0,
    ) -> None:
        try:
            from websockets.sync.client import connect
        except ModuleNotFoundError as e:
            raise DeviceError(
                f"gui: the optional package 'websockets' is not installed; run {GUI_EXTRA}"
            ) from e
        if not (np.isfinite(control_hz) and control_hz > 0):
            raise ValueError(f"gui: control_hz must be a positive number; got {control_hz}")
        if not (np.isfinite(camera_hz) and camera_hz > 0):
            raise ValueError(f"gui: camera_hz must be a positive number; got {camera_hz}")
        self._connect = connect
        self.url = f"{url.rstrip('/')}/ws/actor/{int(actor_id)}"
        self.actor_id, self.token = int(actor_id), token
        self.mapper = ActionMapper(action_low, action_high, scale)
        self.period = 1.0 / float(control_hz)
        self.frame_period = 1.0 / float(camera_hz)
        self._next_frame = 0.0  # monotonic time the next camera frames are due
        self.lock = threading.Lock()
        self.latched = False
        self.steps_after_latch = 0  # env steps that completed after the e-stop reached this actor
        self.observed = 0  # env steps observed
        self.task = ""  # the running episode's instruction, shown on the actor's panel
        self.beats = 0  # beats sent while no step ran
        self._clear_controls()
        self._label: str | None = None
        self._cmd = (-1, 0.0, 0.0)  # seq, browser press time (ms), time the action was returned (ms)
        self._next = 0.0
        self._outbox: dict[str, Any] | None = None
        self._out_ready = threading.Event()
        self._closed = threading.Event()
        self._ws = None
        self.connected = False
        self._thread = threading.Thread(target=self._run, name=f"gui-actor{actor_id}", daemon=True)
        self._thread.start()
        self._sender = threading.Thread(target=self._send_loop, name=f"gui-send{actor_id}", daemon=True)
        self._sender.start()

    @classmethod
    def from_config(
        cls, cfg, action_low: np.ndarray, action_high: np.ndarray, actor_id: int, control_hz: float
    ) -> GuiDevice:
        """From ``InterventionConfig`` (``gui_host``, ``gui_port``, ``gui_token`` or $ROBOT_RL_GUI_TOKEN,
        ``gui_camera_hz``)."""
        url = f"ws://{connect_host(cfg.gui_host)}:{cfg.gui_port}"
        token = cfg.gui_token or os.environ.get(TOKEN_ENV, "")
        return cls(url, actor_id, action_low, action_high, cfg.scale, control_hz, token, cfg.gui_camera_hz)

    def _clear_controls(self) -> None:
        self.takeover, self.pad, self.gripper = False, False, 0.0
        self.held: list[str] = []
        self.axes = [0.0, 0.0, 0.0]

    # -- the InterventionDevice protocol ---------------------------------------------------------------
    def reset(self, env_seed: int) -> None:
        """Episode start: the policy drives, gripper open, pending label dropped (``env_seed`` unused)."""
        with self.lock:
            self.takeover, self.gripper, self._label = False, 0.0, None

    def instruct(self, task: str) -> None:
        """The episode's instruction (after :meth:`reset`): sent with every status, the panel shows it, so
        the operator knows what this episode asks for (pick-colour's cube)."""
        with self.lock:
            self.task = str(task)

    def poll(self, obs: dict[str, np.ndarray]) -> HumanInput:
        """Wait for this control step's slot (``control_hz``), then the operator's command: ``stop`` while
        the e-stop is latched, a label if one was pressed, an action while taken over (``obs`` unused)."""
        now = time.monotonic()
        if self._next > now:
            time.sleep(self._next - now)
        self._next = max(now, self._next) + self.period
        with self.lock:
            if self.latched:
                return HumanInput(None, None, stop=True)
            label, self._label = self._label, None
            cmd = DeviceCommand(
                translation_from(self.held, self.axes), self.gripper, self.takeover or self.pad, label
            )
            if cmd.intervene and self._cmd[2] == 0.0:
                self._cmd = (self._cmd[0], self._cmd[1], time.time() * 1000.0)
        return self.mapper(cmd)

    def observe(self, step_info: dict[str, Any]) -> None:
        """Queue the step's live numbers for the server, with its camera images when frames are due
        (``camera_hz``). The newest step replaces an unsent one, keeping that one's unsent frames when it
        has none of its own; never blocks the control loop."""
        with self.lock:
            self.observed += 1
            if self.latched:
                self.steps_after_latch += 1
        out = {k: v for k, v in step_info.items() if k != "obs"}
        out["task"] = self.task
        now = time.monotonic()
        if now >= self._next_frame:
            on_grid = now - self._next_frame < self.frame_period  # else restart the grid now
            self._next_frame = (self._next_frame if on_grid else now) + self.frame_period
            obs = step_info["obs"]
            out["images"] = {k: np.array(v) for k, v in obs.items() if k.startswith(keys.IMAGE_PREFIX)}
            out["t_frame"] = time.time()
        with self.lock:
            pending = self._outbox
            if "images" not in out and pending is not None and "images" in pending:
                out["images"], out["t_frame"] = pending["images"], pending["t_frame"]
            self._outbox = out
        self._out_ready.set()

    def close(self) -> None:
        """Stop the link threads and close the websocket."""
        self._closed.set()
        self._out_ready.set()
        ws = self._ws
        if ws is not None:
            ws.close()
        self._thread.join(timeout=3)
        self._sender.join(timeout=3)

    # -- the link ----------------------------------------------------------------------------------------
    def _run(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else None
        warned = False
        while not self._closed.is_set():
            opened = False
            try:
                with self._connect(self.url, additional_headers=headers, open_timeout=2.0) as ws:
                    opened, warned = True, False
                    with self.lock:
                        latched = self.latched
                    ws.send(json.dumps({"type": "hello", "actor": self.actor_id, "estop": latched}))
                    self._ws, self.connected = ws, True
                    log.info("actor %d: connected to the GUI at %s", self.actor_id, self.url)
                    for text in ws:
                        self._handle(json.loads(text))
            except Exception as err:
                if self._closed.is_set():
                    pass
                elif opened:
                    log.warning(
                        "actor %d: lost the GUI (%s); policy-only control until it is back",
                        self.actor_id,
                        err,
                    )
                elif not warned:
                    log.warning(
                        "actor %d: no GUI at %s (%s); policy-only control until it is up",
                        self.actor_id,
                        self.url,
                        err,
                    )
                    warned = True
            finally:
                self._ws, self.connected = None, False
                with self.lock:
                    self._clear_controls()  # a lost browser or server never keeps driving
            self._closed.wait(RECONNECT_S)

    def _handle(self, msg: dict[str, Any]) -> None:
        kind = msg.get("type")
        with self.lock:
            if kind == "estop":
                if bool(msg.get("latched")) and not self.latched:
                    self.steps_after_latch = 0
                    self._clear_controls()
                self.latched = bool(msg.get("latched"))
                self._out_ready.set()  # acknowledge at once (a beat)
            elif kind == "takeover":
                self.takeover = bool(msg.get("on"))
            elif kind == "drive":
                self.held = [str(k) for k in msg.get("held", [])][:16]
                axes = msg.get("axes") or [0.0, 0.0, 0.0]
                self.axes = [float(a) for a in axes[:3]] if len(axes) >= 3 else [0.0, 0.0, 0.0]
                self.pad = bool(msg.get("pad", False))
                if msg.get("gripper") is not None:
                    self.gripper = 1.0 if float(msg["gripper"]) >= 0.5 else 0.0
                self._cmd = (int(msg.get("seq", -1)), float(msg.get("t", 0.0)), 0.0)
            elif kind == "label" and msg.get("label") in LABELS:
                self._label = msg["label"]

    def _send_loop(self) -> None:
        import cv2

        while not self._closed.is_set():
            self._out_ready.wait(BEAT_S)
            self._out_ready.clear()
            with self.lock:
                out, self._outbox = self._outbox, None
            ws = self._ws
            if ws is None:
                continue
            if out is None:  # no step ran (e-stop, waiting for weights): a beat keeps the panel current
                self.beats += 1
                out = {"type": "beat", "actor": self.actor_id, "beats": self.beats, "images": {}}
            frames = {}
            for key, img in out.pop("images", {}).items():
                ok, jpg = cv2.imencode(
                    ".jpg", np.ascontiguousarray(img[..., ::-1]), [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY]
                )
                if ok:
                    frames[key.removeprefix(keys.IMAGE_PREFIX)] = base64.b64encode(jpg.tobytes()).decode()
            with self.lock:
                seq, t_press, t_applied = self._cmd
                out.setdefault("type", "status")
                out.update(
                    frames=frames,
                    observed=self.observed,
                    estop=self.latched,
                    steps_after_latch=self.steps_after_latch,
                    takeover=self.takeover or self.pad,
                    cmd_seq=seq,
                    cmd_t_press=t_press,
                    cmd_t_applied=t_applied,
                )
            try:
                ws.send(json.dumps(out))
            except Exception:  # the link thread notices and reconnects
                pass
