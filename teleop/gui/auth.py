"""One token per GUI server: every page, API route and websocket carries it (or the server is open).

The token is read from the ``?token=...`` query, an ``Authorization: Bearer ...`` header or the
``robot_rl_token`` cookie (the live page sets it, so links and websockets of the same origin carry it).
``app.state.token`` None means no token is required, which
:func:`robot_rl.teleop.gui.bind.check_bind` allows only on loopback.
"""

from __future__ import annotations

import hmac
from pathlib import Path

from fastapi import HTTPException, Request
from fastapi.responses import FileResponse
from starlette.requests import HTTPConnection

COOKIE = "robot_rl_token"


def presented_token(conn: HTTPConnection) -> str | None:
    """The token a request or websocket handshake carries (query, bearer header, cookie), or None."""
    token = conn.query_params.get("token")
    if token:
        return token
    auth = conn.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return conn.cookies.get(COOKIE) or None


def token_ok(conn: HTTPConnection) -> bool:
    """True when the server is open (``conn.app.state.token`` is None) or ``conn`` carries its token
    (constant-time comparison)."""
    expected = getattr(conn.app.state, "token", None)
    if expected is None:
        return True
    given = presented_token(conn)
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


def require_token(request: Request) -> None:
    """FastAPI dependency: refuse a request without the server's token.

    Raises:
        HTTPException: 401 when ``request.app.state.token`` is set and the request does not carry it.
    """
    if not token_ok(request):
        raise HTTPException(status_code=401, detail="missing or wrong token (?token=..., Bearer or cookie)")


def page_response(request: Request, path: Path) -> FileResponse:
    """The HTML page ``path`` for a request that passed :func:`require_token` (every page route of the GUI:
    live page, episode browser, learner view). A token that came as ``?token=`` is kept in the
    ``robot_rl_token`` cookie (HttpOnly, SameSite=Strict), so the page's websockets, scripts and links to
    the other pages carry it; ``Cache-Control: no-store``, so a page is never shown from a cache."""
    response = FileResponse(path, headers={"Cache-Control": "no-store"})
    token = request.app.state.token
    if token is not None and request.query_params.get("token"):
        response.set_cookie(COOKIE, token, httponly=True, samesite="strict")
    return response
