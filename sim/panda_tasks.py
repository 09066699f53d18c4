"""The task suite beyond pick-cube (issue 19): five tasks on the shared Panda scene
(:class:`robot_rl.sim.panda_base.PandaTaskEnv`: same robot, action, ``observation.state``, cameras, success
hold and truncation). Objects are primitive boxes: free 4 cm cubes and mocap (static, placed per episode)
fixtures, so batched and GPU backends need no meshes. Initial poses and per-episode choices come from the
env's seeded ``np_random``.

- ``robot_rl/PandaPickColour-v0`` (:class:`PandaPickColourEnv`): red, green and blue cubes; the instruction
  names one ("Pick up the green cube and lift it."); success: that cube is lifted ``lift_height_m``.
- ``robot_rl/PandaPlaceInBin-v0`` (:class:`PandaPlaceInBinEnv`): put the cube into a tray; success: the cube
  rests inside the tray and the gripper is open.
- ``robot_rl/PandaStack-v0`` (:class:`PandaStackEnv`): put the red cube on the blue one; success: red rests
  on blue, blue is on the table, the gripper is open.
- ``robot_rl/PandaPushToTarget-v0`` (:class:`PandaPushToTargetEnv`): push the cube onto a marked square
  (the scripted expert pushes with the gripper closed); success: the cube's centre is within
  :data:`TARGET_RADIUS_M` of the target's, on the table.
- ``robot_rl/PandaOpenDrawer-v0`` (:class:`PandaOpenDrawerEnv`): pull a drawer (slide joint) open by its
  handle bar; success: opened by :data:`DRAWER_OPEN_M`.
"""

from __future__ import annotations

import numpy as np

from robot_rl.sim.assets import CUBE_HALF_SIZE_M, cube_xml
from robot_rl.sim.panda_base import OPEN_CLOSURE, PandaTaskEnv

H = CUBE_HALF_SIZE_M
COLOURS = {"red": ".8 .2 .2 1", "green": ".2 .7 .2 1", "blue": ".2 .3 .8 1"}
"""Cube colours (MJCF rgba) of the pick-colour task, in ``observation.environment_state`` order."""


def named_colour(instruction: str) -> int | None:
    """The index into :data:`COLOURS` (pick-colour's cube order) of the one colour ``instruction`` names
    as a word (case-insensitive), or None when it names none or several."""
    words = instruction.lower().split()
    found = [i for i, colour in enumerate(COLOURS) if colour in words]
    return found[0] if len(found) == 1 else None


SPAWN_X = (0.38, 0.55)
SPAWN_Y = (-0.18, 0.18)
"""Default region (m, world) the cubes and fixtures are drawn from (``env.spawn_region`` replaces it)."""
SPREAD_TRIES = 10_000
"""Rejection-sampling draws :func:`spread_xy` makes before it calls the region too small."""
ON_TABLE_Z = H + 0.01
"""Highest centre height (m) of a cube that counts as resting on the table."""
BIN_HALF_M = 0.06
BIN_FLOOR_M = 0.008
BIN_WALL_M = 0.03
"""Tray: outer half side, floor thickness and wall height (m)."""
BIN_INNER_M = 0.045
"""Largest per-axis offset (m) of the cube's centre from the tray's centre that counts as inside."""
STACK_XY_M = 0.02
STACK_Z_M = 0.01
"""Largest xy offset and height error (m) of the top cube's centre over the bottom cube's top face."""
TARGET_HALF_M = 0.03
TARGET_RADIUS_M = 0.03
"""Push target: half side of the marked square and the largest cube-to-target distance (m) of success."""


def _bin_xml() -> str:
    w, f, h, t = BIN_HALF_M, BIN_FLOOR_M / 2, BIN_WALL_M / 2, 0.004
    rgba = 'rgba=".55 .4 .25 1"'
    walls = "".join(
        f'      <geom name="bin_wall{i}" type="box" size="{sx} {sy} {h}" pos="{px} {py} {h}" {rgba}/>\n'
        for i, (sx, sy, px, py) in enumerate(
            [(t, w, w - t, 0), (t, w, -w + t, 0), (w, t, 0, w - t), (w, t, 0, -w + t)]
        )
    )
    return (
        '    <body name="bin" mocap="true" pos="0.45 0.15 0">\n'
        f'      <geom name="bin_floor" type="box" size="{w} {w} {f}" pos="0 0 {f}" {rgba}/>\n'
        f"{walls}    </body>\n"
    )


def _target_xml() -> str:
    s = TARGET_HALF_M
    return (
        '    <body name="target" mocap="true" pos="0.45 0.15 0">\n'
        f'      <geom name="target" type="box" size="{s} {s} 0.0005" pos="0 0 0.0005" contype="0" '
        'conaffinity="0" rgba=".2 .8 .2 .5"/>\n'
        "    </body>\n"
    )


def _cube_named(name: str, rgba: str, x: float) -> str:
    return cube_xml(name, rgba, f"{x} -0.3 {H}")


def spread_xy(
    rng: np.random.Generator, n: int, min_dist: float, xs: tuple = SPAWN_X, ys: tuple = SPAWN_Y
) -> np.ndarray:
    """(n, 2) xy positions (m) in the region ``xs`` x ``ys`` (default: the spawn region), pairwise at least
    ``min_dist`` apart (rejection sampling from ``rng``).

    Raises:
        ValueError: no draw of :data:`SPREAD_TRIES` fits (the region is too small for n objects).
    """
    for _ in range(SPREAD_TRIES):
        xy = np.stack([rng.uniform(*xs, size=n), rng.uniform(*ys, size=n)], axis=1)
        gaps = np.linalg.norm(xy[:, None] - xy[None], axis=-1) + np.eye(n) * min_dist
        if (gaps >= min_dist).all():
            return xy
    raise ValueError(
        f"env.spawn_region x {list(xs)}, y {list(ys)} (m): too small to place {n} objects {min_dist} m apart"
    )


class _CubesMixin:
    """Free cubes named in ``cube_names``: qpos addresses, rest pose setting, poses."""

    cube_names: tuple[str, ...]

    def _setup_cubes(self) -> None:
        self._cube_q = [self.model.joint(n).qposadr[0] for n in self.cube_names]

    def _set_cube(self, i: int, xy: np.ndarray) -> None:
        a = self._cube_q[i]
        self.data.qpos[a : a + 7] = [xy[0], xy[1], H, 1.0, 0.0, 0.0, 0.0]

    def _cube_pos(self, i: int) -> np.ndarray:
        return self.data.qpos[self._cube_q[i] : self._cube_q[i] + 3]

    def _cube_poses(self) -> np.ndarray:
        return np.concatenate([self.free_pose(a) for a in self._cube_q])


class PandaPickColourEnv(_CubesMixin, PandaTaskEnv):
    """Pick the cube of the colour the instruction names. ``observation.environment_state`` float32 (21,):
    position (m) and wxyz quaternion of the red, green and blue cubes, in that order. The target colour is
    drawn per episode from the seed; lifting another cube is not success."""

    cube_names = tuple(f"cube_{c}" for c in COLOURS)
    objects = "".join(
        _cube_named(f"cube_{c}", rgba, 0.3 + 0.1 * i) for i, (c, rgba) in enumerate(COLOURS.items())
    )
    env_state_dim = 21
    instructions = tuple(f"Pick up the {c} cube and lift it." for c in COLOURS)
    instruction = instructions[0]
    spawn_default = (*SPAWN_X, *SPAWN_Y)

    def _setup_objects(self) -> None:
        self._setup_cubes()
        self.target = 0

    def _place_objects(self) -> None:
        self.target = int(self.np_random.integers(len(COLOURS)))
        self.task = self.instructions[self.target]
        for i, xy in enumerate(spread_xy(self.np_random, len(COLOURS), 0.1, self.spawn_x, self.spawn_y)):
            self._set_cube(i, xy)

    def _env_state(self) -> np.ndarray:
        return self._cube_poses()

    def _goal_reached(self) -> bool:
        return bool(self._cube_pos(self.target)[2] - H > self.lift_height_m)


class PandaPlaceInBinEnv(_CubesMixin, PandaTaskEnv):
    """Put the cube into the tray. ``observation.environment_state`` float32 (10,): cube position (m) and
    wxyz quaternion, tray centre (m; z = 0)."""

    cube_names = ("block",)
    objects = _cube_named("block", COLOURS["red"], 0.4) + _bin_xml()
    env_state_dim = 10
    instruction = "Put the cube in the bin."
    spawn_default = (*SPAWN_X, *SPAWN_Y)

    def _setup_objects(self) -> None:
        self._setup_cubes()
        self._bin = self.model.body_mocapid[self.model.body("bin").id]

    def _place_objects(self) -> None:
        cube, tray = spread_xy(self.np_random, 2, 0.15, self.spawn_x, self.spawn_y)
        self._set_cube(0, cube)
        self.data.mocap_pos[self._bin] = [tray[0], tray[1], 0.0]

    def _env_state(self) -> np.ndarray:
        return np.concatenate([self._cube_poses(), self.data.mocap_pos[self._bin]])

    def _goal_reached(self) -> bool:
        cube, tray = self._cube_pos(0), self.data.mocap_pos[self._bin]
        inside = bool(np.all(np.abs(cube[:2] - tray[:2]) < BIN_INNER_M))
        resting = cube[2] < BIN_FLOOR_M + H + 0.01
        return inside and resting and self.gripper_closure() < OPEN_CLOSURE


class PandaStackEnv(_CubesMixin, PandaTaskEnv):
    """Stack the red cube on the blue cube. ``observation.environment_state`` float32 (14,): position (m)
    and wxyz quaternion of the red cube, then of the blue cube."""

    cube_names = ("cube_red", "cube_blue")
    objects = _cube_named("cube_red", COLOURS["red"], 0.4) + _cube_named("cube_blue", COLOURS["blue"], 0.5)
    env_state_dim = 14
    instruction = "Stack the red cube on the blue cube."
    spawn_default = (*SPAWN_X, *SPAWN_Y)

    def _setup_objects(self) -> None:
        self._setup_cubes()

    def _place_objects(self) -> None:
        for i, xy in enumerate(spread_xy(self.np_random, 2, 0.1, self.spawn_x, self.spawn_y)):
            self._set_cube(i, xy)

    def _env_state(self) -> np.ndarray:
        return self._cube_poses()

    def _goal_reached(self) -> bool:
        top, bottom = self._cube_pos(0), self._cube_pos(1)
        on = np.linalg.norm(top[:2] - bottom[:2]) < STACK_XY_M and abs(top[2] - bottom[2] - 2 * H) < STACK_Z_M
        return bool(on and bottom[2] < ON_TABLE_Z and self.gripper_closure() < OPEN_CLOSURE)


class PandaPushToTargetEnv(_CubesMixin, PandaTaskEnv):
    """Push the cube onto the green target square. ``observation.environment_state`` float32 (10,): cube
    position (m) and wxyz quaternion, target centre (m; z = 0). The target is 10-18 cm from the cube."""

    cube_names = ("block",)
    objects = _cube_named("block", COLOURS["red"], 0.4) + _target_xml()
    env_state_dim = 10
    instruction = "Push the cube onto the green target."
    spawn_default = (0.40, 0.52, -0.12, 0.12)
    """The cube's region; the target is drawn 10-18 cm from it."""

    def _setup_objects(self) -> None:
        self._setup_cubes()
        self._goal = self.model.body_mocapid[self.model.body("target").id]

    def _place_objects(self) -> None:
        rng = self.np_random
        cube = np.array([rng.uniform(*self.spawn_x), rng.uniform(*self.spawn_y)])
        while True:
            angle, dist = rng.uniform(-np.pi, np.pi), rng.uniform(0.10, 0.18)
            goal = cube + dist * np.array([np.cos(angle), np.sin(angle)])
            if 0.36 <= goal[0] <= 0.60 and abs(goal[1]) <= 0.20:
                break
        self._set_cube(0, cube)
        self.data.mocap_pos[self._goal] = [goal[0], goal[1], 0.0]

    def _env_state(self) -> np.ndarray:
        return np.concatenate([self._cube_poses(), self.data.mocap_pos[self._goal]])

    def _goal_reached(self) -> bool:
        cube, goal = self._cube_pos(0), self.data.mocap_pos[self._goal]
        return bool(np.linalg.norm(cube[:2] - goal[:2]) < TARGET_RADIUS_M and cube[2] < ON_TABLE_Z)


DRAWER_OPEN_M = 0.10
"""Opening (m) of the drawer that counts as open."""
DRAWER_TRAVEL_M = 0.16
HANDLE_Z_M = 0.06
"""Drawer travel (m) and handle height (m)."""
HANDLE_OUT_M = 0.045
"""Distance (m) of the handle bar's centre in front of the drawer's front panel (the gap takes a finger)."""


def _drawer_xml() -> str:
    vis = 'contype="0" conaffinity="0" rgba=".6 .6 .65 1"'
    wood = 'rgba=".55 .4 .25 1"'
    hx, hy, hz = 0.10, 0.10, 0.06
    shell = "".join(
        f'      <geom name="cabinet{i}" type="box" size="{sx} {sy} {sz}" pos="{px} {py} {pz}" {vis}/>\n'
        for i, (sx, sy, sz, px, py, pz) in enumerate(
            [
                (hx, hy, 0.005, 0, 0, 2 * hz + 0.005),
                (hx, 0.005, hz + 0.005, 0, hy + 0.005, hz),
                (hx, 0.005, hz + 0.005, 0, -hy - 0.005, hz),
                (0.005, hy, hz + 0.005, hx + 0.005, 0, hz),
            ]
        )
    )
    out = -hx - 0.005 - HANDLE_OUT_M
    stems = "".join(
        f'        <geom name="stem{i}" type="box" size="{HANDLE_OUT_M / 2} 0.005 0.005" '
        f'pos="{-hx - 0.005 - HANDLE_OUT_M / 2} {y} {HANDLE_Z_M}" {wood}/>\n'
        for i, y in enumerate((0.045, -0.045))
    )
    return (
        '    <body name="cabinet" mocap="true" pos="0.68 0 0">\n'
        f"{shell}"
        '      <body name="drawer">\n'
        f'        <joint name="drawer" type="slide" axis="1 0 0" range="{-DRAWER_TRAVEL_M} 0" damping="20" '
        'frictionloss="2" limited="true"/>\n'
        f'        <geom name="drawer_front" type="box" size="0.005 {hy - 0.005} {hz - 0.005}" '
        f'pos="{-hx} 0 {hz}" mass="0.5" {wood}/>\n'
        f'        <geom name="drawer_bottom" type="box" size="{hx - 0.01} {hy - 0.01} 0.004" pos="0 0 0.006" '
        f'mass="0.5" contype="0" conaffinity="0" {wood}/>\n'
        f"{stems}"
        f'        <geom name="handle" type="box" size="0.006 0.05 0.006" pos="{out} 0 {HANDLE_Z_M}" '
        f"{wood}/>\n"
        "      </body>\n"
        "    </body>\n"
    )


class PandaOpenDrawerEnv(PandaTaskEnv):
    """Open the drawer by its handle bar (an articulated task: a slide joint with damping and friction).
    The cabinet (a mocap body) is placed per episode; the drawer starts closed. ``environment_state``
    float32 (4,): handle bar centre (m, world) and the drawer's opening (m, 0 closed). Success: opened by
    at least :data:`DRAWER_OPEN_M`. The scripted expert hooks the closed fingers behind the bar and pulls."""

    objects = _drawer_xml()
    env_state_dim = 4
    instruction = "Open the drawer."
    spawn_default = (0.66, 0.70, -0.12, 0.12)
    """The cabinet's region."""

    def _setup_objects(self) -> None:
        self._cabinet = self.model.body_mocapid[self.model.body("cabinet").id]
        self._slide = self.model.joint("drawer").qposadr[0]
        self._handle = self.model.geom("handle").id

    def _place_objects(self) -> None:
        self.data.mocap_pos[self._cabinet] = [
            self.np_random.uniform(*self.spawn_x),
            self.np_random.uniform(*self.spawn_y),
            0.0,
        ]
        self.data.qpos[self._slide] = 0.0

    def _env_state(self) -> np.ndarray:
        return np.concatenate([self.data.geom_xpos[self._handle], [-self.data.qpos[self._slide]]])

    def _goal_reached(self) -> bool:
        return bool(-self.data.qpos[self._slide] >= DRAWER_OPEN_M)
