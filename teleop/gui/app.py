"""The GUI's FastAPI app: the live page, its websockets and the e-stop routes.

Routes (all behind :func:`~robot_rl.teleop.gui.auth.require_token`):

- ``GET /``: the live page (``static/index.html``); a ``?token=`` sets the ``robot_rl_token`` cookie so
  the page's websocket and links carry it;
- ``GET /api/live``: the hub's state as JSON (e-stop, connected actors, their newest numbers);
- ``POST /api/estop`` / ``POST /api/estop/reset``: latch / reset the e-stop on every actor (also for
  scripts);
- ``WS /ws/ui``: a browser tab (commands in, status out; :class:`~robot_rl.teleop.gui.hub.Hub`);
- ``WS /ws/actor/{k}``: actor ``k``'s device (:mod:`robot_rl.teleop.gui.device`);
- the episode browser's router (``/episodes``, ``/learner``, ``/api/history/...``).

A websocket without the token is closed before it is accepted (the handshake gets HTTP 403).
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

from fastapi import Depends, FastAPI, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import FileResponse

from robot_rl.teleop.gui.auth import page_response, require_token, token_ok
from robot_rl.teleop.gui.history import history_router
from robot_rl.teleop.gui.hub import Hub, UiClient

log = logging.getLogger(__name__)
STATIC = Path(__file__).parent / "static"
MAX_MESSAGE = 16 * 1024 * 1024  # bytes of one actor status message (its JPEG frames)
POLICY_VIOLATION = 1008


def create_app(run_dir: str | Path, token: str | None = None) -> FastAPI:
    """The GUI app for run ``run_dir``; ``token`` None or '' = open (serve it on loopback only:
    :func:`robot_rl.teleop.gui.bind.check_bind`)."""
    app = FastAPI(title="robot_rl GUI", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.token = token or None
    app.state.run_dir = Path(run_dir)
    app.state.hub = hub = Hub()
    guarded = [Depends(require_token)]

    @app.get("/", dependencies=guarded)
    def index(request: Request) -> FileResponse:
        return page_response(request, STATIC / "index.html")

    @app.get("/api/live", dependencies=guarded)
    def live() -> dict:
        return hub.snapshot()

    @app.post("/api/estop", dependencies=guarded)
    async def estop() -> dict:
        await hub.set_estop(True, "POST /api/estop")
        return {"estop": True}

    @app.post("/api/estop/reset", dependencies=guarded)
    async def estop_reset() -> dict:
        await hub.set_estop(False, "")
        return {"estop": False}

    @app.websocket("/ws/ui")
    async def ui_socket(ws: WebSocket) -> None:
        if not token_ok(ws):
            await ws.close(code=POLICY_VIOLATION)
            return
        await ws.accept()
        ui = UiClient(ws)
        hub.ui_joined(ui)
        pump = asyncio.create_task(ui.pump())
        try:
            while True:
                text = await ws.receive_text()
                try:
                    msg = json.loads(text)
                except ValueError:
                    continue
                if isinstance(msg, dict):
                    await hub.command(ui, msg)
        except WebSocketDisconnect:
            pass
        finally:
            pump.cancel()
            await hub.ui_left(ui)

    @app.websocket("/ws/actor/{actor}")
    async def actor_socket(ws: WebSocket, actor: int) -> None:
        if not token_ok(ws) or not 0 <= actor < 2**31:
            await ws.close(code=POLICY_VIOLATION)
            return
        await ws.accept()
        try:
            hello = json.loads(await ws.receive_text())
            await hub.actor_joined(actor, ws, hello if isinstance(hello, dict) else {})
            log.info("gui: actor %d connected", actor)
            while True:
                text = await ws.receive_text()
                if len(text) > MAX_MESSAGE:
                    continue
                msg = json.loads(text)
                if isinstance(msg, dict):
                    msg["actor"] = actor
                    hub.actor_status(actor, text, msg)
        except (WebSocketDisconnect, ValueError):
            pass
        finally:
            hub.actor_left(actor, ws)
            log.info("gui: actor %d disconnected", actor)

    app.include_router(history_router(Path(run_dir)))
    return app
