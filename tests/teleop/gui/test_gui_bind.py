"""Where the GUI server may listen: loopback without a token, anywhere else only with one."""

from __future__ import annotations

import pytest

from robot_rl.teleop.gui.bind import check_bind


@pytest.mark.parametrize("host", ["127.0.0.1", "127.3.2.1", "localhost", "::1"])
def test_loopback_needs_no_token(host):
    check_bind(host, None)


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.20", "::", "robot-pc.local", "127.1"])
def test_anything_else_without_a_token_is_refused_naming_the_host(host):
    with pytest.raises(ValueError, match=f"bound to {host} without a token"):
        check_bind(host, None)
    with pytest.raises(ValueError, match="without a token"):
        check_bind(host, "")
    check_bind(host, "s3cret-token")
