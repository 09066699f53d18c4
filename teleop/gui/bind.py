"""Where the GUI server may listen: off loopback only with a token. Needs nothing of the ``gui`` extra, so
``robot-rl online`` (which starts the server as a child process) imports it without FastAPI installed;
the token check of each request is :mod:`robot_rl.teleop.gui.auth`.
"""

from __future__ import annotations

from robot_rl.security import is_loopback_host


def check_bind(host: str, token: str | None) -> None:
    """Refuse to serve off loopback without a token.

    Raises:
        ValueError: ``host`` is not loopback and ``token`` is empty (names the host and the fix).
    """
    if not token and not is_loopback_host(host):
        raise ValueError(
            f"gui: bound to {host} without a token; pass --token (or intervention.gui_token) or bind to "
            "127.0.0.1"
        )
