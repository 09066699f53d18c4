"""The GUI server's shared state: every actor's latest status, who drives which actor, the latched e-stop.

All of it lives in the server (one asyncio event loop, no locks), so every browser tab shows the same
thing and a page reload finds the e-stop still latched. Browsers get only the newest message per actor
(a slow tab skips steps instead of queueing them; camera frames come only with some steps, at the actors'
``intervention.gui_camera_hz``, so a newer step without frames carries the unsent frames along);
commands go to the actor's websocket at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from starlette.websockets import WebSocket

from robot_rl.runtime.intervention import LABELS

log = logging.getLogger(__name__)
MAX_HELD = 16


class UiClient:
    """One browser tab: a websocket and the newest unsent message per topic."""

    def __init__(self, ws: WebSocket) -> None:
        self.ws = ws
        self.pending: dict[str, str] = {}
        self.pending_frames: dict[str, dict[str, Any]] = {}  # topic -> unsent frames / t_frame
        self.ready = asyncio.Event()

    def offer(self, topic: str, text: str, msg: dict[str, Any] | None = None) -> None:
        """Queue ``text`` as the newest message of ``topic``, replacing an unsent one. ``msg``: ``text``
        parsed, for an actor status: when it has no camera frames and the message it replaces had
        some, they are carried into it (re-encoded), so a slow tab never loses frames to a status."""
        if msg is not None:
            if msg.get("frames"):
                self.pending_frames[topic] = {"frames": msg["frames"], "t_frame": msg.get("t_frame")}
            elif topic in self.pending_frames:
                text = json.dumps({**msg, **self.pending_frames[topic]})
            else:
                self.pending_frames.pop(topic, None)
        self.pending[topic] = text
        self.ready.set()

    async def pump(self) -> None:
        """Send pending messages until the websocket fails."""
        while True:
            await self.ready.wait()
            self.ready.clear()
            batch, self.pending = self.pending, {}
            self.pending_frames = {}
            for text in batch.values():
                await self.ws.send_text(text)


class Hub:
    """The state one GUI server shares between actors and browser tabs."""

    def __init__(self) -> None:
        self.actors: dict[int, WebSocket] = {}
        self.status: dict[int, tuple[str, dict]] = {}  # newest status message per actor: text, parsed
        self.framed: dict[int, tuple[str, dict]] = {}  # newest status with camera frames per actor
        self.meta: dict[int, dict[str, Any]] = {}  # the newest value of each field but frames (/api/live)
        self.uis: set[UiClient] = set()
        self.drivers: dict[int, UiClient] = {}  # actor -> the tab that took over
        self.estop = False
        self.estop_reason = ""

    # -- actors --------------------------------------------------------------------------------------
    async def actor_joined(self, actor: int, ws: WebSocket, hello: dict[str, Any]) -> None:
        """Register actor ``actor``; an actor that is still latched latches the server (a restarted GUI
        never releases an e-stop by itself); then tell it the e-stop state."""
        old = self.actors.get(actor)
        self.actors[actor] = ws
        if old is not None:
            await _close_quietly(old)
        if hello.get("estop") and not self.estop:
            await self.set_estop(True, f"actor {actor} reported a latched e-stop")
        await ws.send_text(json.dumps({"type": "estop", "latched": self.estop}))
        self._broadcast(f"actor{actor}", {"type": "joined", "actor": actor})

    def actor_left(self, actor: int, ws: WebSocket) -> None:
        if self.actors.get(actor) is ws:
            del self.actors[actor]
            self.drivers.pop(actor, None)
            self._broadcast(f"gone{actor}", {"type": "gone", "actor": actor})

    def actor_status(self, actor: int, text: str, msg: dict[str, Any]) -> None:
        """Keep and forward the newest status or beat of ``actor``."""
        status = msg.get("type") == "status"
        if status:
            self.status[actor] = text, msg
            if msg.get("frames"):
                self.framed[actor] = text, msg
        self.meta.setdefault(actor, {}).update((k, v) for k, v in msg.items() if k != "frames")
        for ui in self.uis:
            ui.offer(f"actor{actor}" if status else f"beat{actor}", text, msg if status else None)

    async def to_actor(self, actor: int, msg: dict[str, Any]) -> None:
        ws = self.actors.get(actor)
        if ws is not None:
            try:
                await ws.send_text(json.dumps(msg))
            except Exception:  # the actor's handler notices the disconnect
                pass

    # -- browsers ------------------------------------------------------------------------------------
    def ui_joined(self, ui: UiClient) -> None:
        """A new tab gets the whole state: the e-stop and every actor's newest status with its newest
        camera frames."""
        self.uis.add(ui)
        ui.offer("estop", self._estop_text())
        for actor, (text, msg) in self.status.items():
            if actor in self.framed:
                ui.offer(f"actor{actor}", *self.framed[actor])
            ui.offer(f"actor{actor}", text, msg)

    async def ui_left(self, ui: UiClient) -> None:
        """A tab closed or lost its connection: the actors it drove go back to the policy."""
        self.uis.discard(ui)
        for actor in [a for a, d in self.drivers.items() if d is ui]:
            await self.command(ui, {"type": "takeover", "actor": actor, "on": False})

    async def command(self, ui: UiClient, msg: dict[str, Any]) -> None:
        """Apply one browser command: ``estop``, ``reset``, ``takeover`` (``actor``, ``on``), ``drive``
        (``actor``, ``held``, ``axes``, ``pad``, ``gripper``, ``seq``, ``t``) or ``label`` (``actor``,
        ``label``). Unknown or malformed commands are ignored (logged)."""
        kind = msg.get("type")
        if kind == "estop":
            await self.set_estop(True, str(msg.get("reason", "operator"))[:200])
            return
        if kind == "reset":
            await self.set_estop(False, "")
            return
        try:
            actor = int(msg["actor"])
        except (KeyError, TypeError, ValueError):
            log.warning("gui: ignored a command without an actor: %.200s", msg)
            return
        if kind == "takeover":
            on = bool(msg.get("on"))
            if on:
                self.drivers[actor] = ui
            else:
                self.drivers.pop(actor, None)
                await self.to_actor(actor, {"type": "drive", "held": [], "axes": [0, 0, 0], "pad": False})
            await self.to_actor(actor, {"type": "takeover", "on": on})
            self._broadcast(f"driver{actor}", {"type": "driver", "actor": actor, "on": on})
        elif kind == "drive":
            held = [str(k) for k in msg.get("held", [])][:MAX_HELD]
            axes = msg.get("axes") if isinstance(msg.get("axes"), list) else [0, 0, 0]
            fwd = {"type": "drive", "held": held, "axes": axes[:3], "pad": bool(msg.get("pad", False))}
            fwd.update(gripper=msg.get("gripper"), seq=msg.get("seq", -1), t=msg.get("t", 0.0))
            if fwd["pad"]:
                self.drivers[actor] = ui
            await self.to_actor(actor, fwd)
        elif kind == "label" and msg.get("label") in LABELS:
            await self.to_actor(actor, {"type": "label", "label": msg["label"]})
        else:
            log.warning("gui: ignored an unknown command: %.200s", msg)

    # -- e-stop --------------------------------------------------------------------------------------
    async def set_estop(self, latched: bool, reason: str) -> None:
        """Latch (or reset) the e-stop on every actor and show it on every tab."""
        if latched and not self.estop:
            log.warning("gui: e-stop latched (%s)", reason)
        elif not latched and self.estop:
            log.warning("gui: e-stop reset by the operator")
        self.estop, self.estop_reason = latched, reason if latched else ""
        for actor in list(self.actors):
            await self.to_actor(actor, {"type": "estop", "latched": latched})
        for ui in self.uis:
            ui.offer("estop", self._estop_text())

    def _estop_text(self) -> str:
        return json.dumps({"type": "estop", "latched": self.estop, "reason": self.estop_reason})

    def _broadcast(self, topic: str, msg: dict[str, Any]) -> None:
        text = json.dumps(msg)
        for ui in self.uis:
            ui.offer(topic, text)

    def snapshot(self) -> dict[str, Any]:
        """JSON-able state: ``estop``, ``estop_reason``, ``actors`` (connected ids) and ``status`` (each
        actor's newest numbers, without frames)."""
        return {
            "estop": self.estop,
            "estop_reason": self.estop_reason,
            "actors": sorted(self.actors),
            "status": {str(k): v for k, v in self.meta.items()},
        }


async def _close_quietly(ws: WebSocket) -> None:
    try:
        await ws.close()
    except Exception:
        pass
