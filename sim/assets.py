"""MJCF scene of the Panda tasks (pick-cube and the task suite), built on the Panda + Robotiq 2F-85 model
shipped in gym-hil.

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


def cube_xml(name: str, rgba: str, pos: str = f"0.5 0 {CUBE_HALF_SIZE_M}") -> str:
    """MJCF of a free 4 cm, 0.1 kg cube body ``name`` (freejoint and geom of the same name), colour ``rgba``
    ("r g b a" in [0, 1]) at ``pos`` ("x y z", m)."""
    h = CUBE_HALF_SIZE_M
    return f"""    <body name="{name}" pos="{pos}">
      <freejoint name="{name}"/>
      <geom name="{name}" type="box" size="{h} {h} {h}" mass="0.1" rgba="{rgba}" friction="1 0.01 0.001"/>
    </body>
"""


PICK_CUBE_OBJECTS = cube_xml("block", ".8 .2 .2 1")
"""The pick-cube task's objects: one red cube named ``block``."""


def scene_xml(image_size: int = 128, timestep_s: float = 0.002, objects: str = PICK_CUBE_OBJECTS) -> str:
    """The Panda scene as an MJCF string (absolute include and mesh paths).

    Args:
        image_size: offscreen framebuffer side in pixels (cameras render up to this size).
        timestep_s: physics timestep (s), ``1 / physics_hz``.
        objects: the task's ``<worldbody>`` elements (bodies of primitive geoms; default the pick-cube's
            cube, :data:`PICK_CUBE_OBJECTS`).
    """
    assets = gym_hil_assets_dir()
    size = max(int(image_size), 128)
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
{objects}  </worldbody>
</mujoco>
"""


ARM_ROOT_BODY = "link1"
"""The first moving body of the arm: it and every body below it (arm links, gripper) get ``gravcomp``."""


def scene_spec(
    image_size: int = 128,
    timestep_s: float = 0.002,
    objects: str = PICK_CUBE_OBJECTS,
    arm_gravcomp: bool = False,
) -> mujoco.MjSpec:
    """The scene of :func:`scene_xml` as an uncompiled ``MjSpec`` (to edit before compiling), with
    ``gravcomp`` on the arm and gripper bodies when ``arm_gravcomp`` (see :func:`load_model`)."""
    spec = mujoco.MjSpec.from_string(scene_xml(image_size, timestep_s, objects))
    if arm_gravcomp:
        stack = [spec.body(ARM_ROOT_BODY)]
        while stack:
            body = stack.pop()
            body.gravcomp = 1.0
            stack.extend(body.bodies)
    return spec


@lru_cache(maxsize=16)
def _compiled(image_size: int, timestep_s: float, objects: str, arm_gravcomp: bool) -> mujoco.MjModel:
    return scene_spec(image_size, timestep_s, objects, arm_gravcomp).compile()


def load_model(
    image_size: int = 128,
    timestep_s: float = 0.002,
    objects: str = PICK_CUBE_OBJECTS,
    arm_gravcomp: bool = False,
) -> mujoco.MjModel:
    """Compile the scene (cached per arguments) and return a private copy of the ``MjModel``.

    ``arm_gravcomp``: MuJoCo's body gravity compensation (``gravcomp="1"``, a passive force computed inside
    ``mj_step``) on the arm and gripper bodies, for the controller that runs in MuJoCo's actuators
    (:mod:`robot_rl.sim.controller`, ``controller="actuator"``).
    """
    return _compiled(int(image_size), float(timestep_s), objects, bool(arm_gravcomp)).__copy__()
