"""The GUI's one token per server: every route depends on :func:`require_token`.

The token is ``app.state.token`` (None: no token, allowed only for a server bound to localhost). A request
carries it as the ``token`` query parameter, an ``Authorization: Bearer <token>`` header or the
``robot_rl_token`` cookie.
"""

from __future__ import annotations

import hmac

from fastapi import HTTPException, Request

COOKIE = "robot_rl_token"


def require_token(request: Request) -> None:
    """FastAPI dependency: pass when the app has no token or the request carries the right one.

    Raises:
        HTTPException: 401 when a token is configured and the request's is missing or wrong."""
    expected = request.app.state.token
    if expected is None:
        return
    header = request.headers.get("authorization", "")
    offered = [
        request.query_params.get("token"),
        header[len("Bearer ") :] if header.startswith("Bearer ") else None,
        request.cookies.get(COOKIE),
    ]
    if not any(t is not None and hmac.compare_digest(t.encode(), expected.encode()) for t in offered):
        raise HTTPException(status_code=401, detail="missing or wrong token (?token=..., Bearer or cookie)")
