"""A request to a server process that dies before answering ends at once (issue 39: a push to a learner
that died blocked its full 30 s timeout before the actor reconnected). Real processes and sockets: the
server is a ZeroMQ ROUTER in a subprocess that takes the request and is SIGKILLed."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from robot_rl.transport import PeerUnavailableError, RpcClient

SERVER = """
import os, signal, sys, zmq
sock = zmq.Context.instance().socket(zmq.ROUTER)
port = sock.bind_to_random_port("tcp://127.0.0.1")
print(port, flush=True)
sock.recv_multipart()  # the request arrives ...
print("got it", flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # ... and the server dies without answering
"""


def test_a_request_to_a_server_that_dies_ends_at_once_not_at_its_timeout():
    server = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline())
        client = RpcClient(f"tcp://127.0.0.1:{port}", protocol=1, timeout_s=30.0, name="learner")
        start = time.monotonic()
        with pytest.raises(PeerUnavailableError, match="closed the connection before answering 'push'"):
            client.request({"op": "push"}, b"x" * 1000)
        assert time.monotonic() - start < 10.0  # not the 30 s timeout
        assert server.wait(timeout=10) != 0
        # the client is usable again: a request to nobody times out as before
        with pytest.raises(PeerUnavailableError, match="did not answer 'weights' within 0.3 s"):
            client.request({"op": "weights"}, timeout_s=0.3)
        client.close()
    finally:
        server.kill()
        server.wait()
