"""Offscreen cameras (EGL or OSMesa) and the clear error when no GL backend works."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from robot_rl import keys
from robot_rl.config import EnvConfig
from robot_rl.sim import make_env
from robot_rl.sim.render import RendererError, select_backend


@pytest.fixture(scope="module")
def backend() -> str:
    try:
        return select_backend()
    except RendererError as err:
        pytest.skip(f"no offscreen GL backend on this machine (install libegl1 or libosmesa6): {err}")


def test_camera_images(backend):
    env = make_env(EnvConfig(cameras=["front", "wrist"], image_size=48), render_mode="rgb_array")
    try:
        obs, _ = env.reset(seed=0)
        assert env.observation_space.contains(obs)
        for cam in ("front", "wrist"):
            img = obs[keys.image_key(cam)]
            assert img.shape == (48, 48, 3) and img.dtype == np.uint8
            assert img.std() > 5, f"{cam} image is (nearly) constant"
        frame = env.render()
        assert frame.shape == (128, 128, 3) and frame.dtype == np.uint8 and frame.std() > 5
        obs2, *_ = env.step(np.array([0.03, 0.0, -0.03, 1.0], np.float32))
        assert not np.array_equal(obs[keys.image_key("wrist")], obs2[keys.image_key("wrist")])
    finally:
        env.close()


def test_renderer_error_when_no_backend_works():
    code = (
        "from robot_rl.sim.render import RendererError, select_backend\n"
        "try:\n    select_backend()\nexcept RendererError as e:\n    print('ERR', e)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "PYOPENGL_PLATFORM")}
    env["ROBOT_RL_GL"] = "nonexistent"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    msg = out.stdout
    assert msg.startswith("ERR") and "nonexistent" in msg
    assert "EGL" in msg and "OSMesa" in msg and "libegl1" in msg and "libosmesa6" in msg
