"""MJCF scene for the Panda pick-cube task, built on the Panda + Robotiq 2F-85 model shipped in gym-hil.

The scene XML is generated as a string that includes gym-hil's ``panda.xml`` by absolute path (gym_hil
itself is never imported). Rendering extras that are slow in software GL (multisampling, shadows,
reflections, skybox) are off.
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path

import mujoco

CUBE_HALF_SIZE_M = 0.02
"""Half edge of the cube (m); the cube is 4 cm wide."""


def gym_hil_assets_dir() -> Path:
    """Folder holding gym-hil's ``panda.xml`` and meshes.

    Raises:
        FileNotFoundError: gym-hil is not installed or ships no ``assets/panda.xml``.
    """
    spec = importlib.util.find_spec("gym_hil")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("gym-hil is not installed; `pip install gym-hil` (it ships the Panda MJCF)")
    path = Path(list(spec.submodule_search_locations)[0]) / "assets"
    if not (path / "panda.xml").is_file():
        raise FileNotFoundError(f"gym-hil install has no {path / 'panda.xml'}")
    return path


def scene_xml(image_size: int = 128, timestep_s: float = 0.002) -> str:
    """The pick-cube scene as an MJCF string (absolute include and mesh paths).

    Args:
        image_size: offscreen framebuffer side in pixels (cameras render up to this size).
        timestep_s: physics timestep (s), ``1 / physics_hz``.
    """
    assets = gym_hil_assets_dir()
    size = max(int(image_size), 128)
    h = CUBE_HALF_SIZE_M
    return f"""
<mujoco model="robot_rl_panda_pick_cube">
  <compiler meshdir="{assets}" texturedir="{assets}"/>
  <include file="{assets / "panda.xml"}"/>
  <option timestep="{timestep_s}" integrator="implicitfast" cone="elliptic" impratio="10"/>
  <statistic center="0.3 0 0.4" extent=".8"/>
  <visual>
    <headlight diffuse=".5 .5 .5" ambient=".5 .5 .5" specular="0 0 0"/>
    <global offheight="{size}" offwidth="{size}"/>
    <quality offsamples="0" shadowsize="0"/>
  </visual>
  <asset>
    <texture name="grid" type="2d" builtin="checker" width="64" height="64" rgb1=".1 .2 .3" rgb2=".2 .3 .4"/>
    <material name="grid" texture="grid" texrepeat="4 4" texuniform="true" reflectance="0"/>
  </asset>
  <worldbody>
    <camera name="front" pos="1.2 0.0 0.6" xyaxes="0 1 0 -0.45 0 0.9" fovy="45"/>
    <light pos="0 0 3" dir="0 0 -1" diffuse=".6 .6 .6" specular="0 0 0" castshadow="false"/>
    <geom name="floor" size="2 2 0.01" type="plane" material="grid"/>
    <body name="block" pos="0.5 0 {h}">
      <freejoint name="block"/>
      <geom name="block" type="box" size="{h} {h} {h}" mass="0.1" rgba=".8 .2 .2 1" friction="1 0.01 0.001"/>
    </body>
  </worldbody>
</mujoco>
"""


@lru_cache(maxsize=8)
def _compiled(image_size: int, timestep_s: float) -> mujoco.MjModel:
    return mujoco.MjModel.from_xml_string(scene_xml(image_size, timestep_s))


def load_model(image_size: int = 128, timestep_s: float = 0.002) -> mujoco.MjModel:
    """Compile the scene (cached per arguments) and return a private copy of the ``MjModel``."""
    return _compiled(int(image_size), float(timestep_s)).__copy__()
