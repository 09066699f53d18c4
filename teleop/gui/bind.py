"""Where the GUI server may listen: off loopback only with a token. Needs nothing of the ``gui`` extra, so
``robot-rl online`` (which starts the server as a child process) imports it without FastAPI installed;
the token check of each request is :mod:`robot_rl.teleop.gui.auth`.
"""

from __future__ import annotations

import ipaddress

LOOPBACK_NAMES = ("localhost",)


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IP addresses (127.0.0.0/8, ::1)."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None) -> None:
    """Refuse to serve off loopback without a token.

    Raises:
        ValueError: ``host`` is not loopback and ``token`` is empty (names the host and the fix).
    """
    if not token and not is_loopback(host):
        raise ValueError(
            f"gui: bound to {host} without a token; pass --token (or intervention.gui_token) or bind to "
            "127.0.0.1"
        )
