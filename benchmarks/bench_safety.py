"""The safety layer under attack, and what it costs per command.

Part 1 drives each adversary of :data:`robot_rl_testing.safety_audit.ADVERSARIES` for ``--steps`` steps
through ``SafeRobot -> LimitAudit -> MujocoRobot`` (lock-step, the box and 0.5 speed/acceleration scales of
tests/hardware/test_safety.py) and prints what the layer did and how many unsafe commands reached the robot,
plus how far the measured end effector went beyond the box (``ee``; ``ee@sw`` within 10 steps after a
``joint_position`` -> ``ee_delta`` switch) and the joints beyond their limits, and ``contacts``: the steps
at which an arm link touched the table or another link, by the arm's MuJoCo collision model
(:class:`~robot_rl.hardware.sim_robot.LinkCollisions`) at the measured joints; then the same for three
adversaries restricted to one mode (``/ee``, ``/joint``). ``tracking``: joint targets restarted because
the arm could not follow.

Part 2 times ``command()`` on a bare ``MujocoRobot`` and on ``SafeRobot(MujocoRobot)`` in the same run,
alternating blocks, with a benign stream (small sinusoidal moves, never clipped), in each mode: without
physics (``lockstep=False``: the layer's cost against the robot's own command handling, IK for ee_delta)
and with physics (one 10 Hz control step of 50 physics steps per command): ``--timing-commands`` (5000)
commands per mode without physics in 10 blocks, a hundredth of them with physics in 8 blocks.
Run: ``python benchmarks/bench_safety.py [--steps 2000] [--timing-commands 5000]`` (a few minutes on 2
cores). With
``--server-hz 50`` part 1 runs instead in real time through the MuJoCo-backed robot server process
(``SimServerRobot``, whose forward kinematics and collision model run on the client's own copy of the
scene): the mixed adversaries, then the three restricted to each mode. In both, the simulated Panda
enforces the robot-side TCP boundary (:mod:`robot_rl.hardware.tcp_boundary`, set by the layer at connect)
and ``brakes`` counts the physics steps at which it braked; ``--robot-boundary off`` leaves it unset (the
client-side layer alone).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from robot_rl.config import SafetyConfig
from robot_rl.hardware.drivers.sim_server import SimServerRobot
from robot_rl.hardware.robot import Command, CommandMode, Robot
from robot_rl.hardware.safety import SafeRobot
from robot_rl.hardware.sim_robot import LinkCollisions, MujocoRobot
from robot_rl.hardware.sim_server import serve_in_subprocess
from robot_rl.sim.assets import load_model
from robot_rl_testing.safety_audit import ADVERSARIES, LimitAudit, attack, single_mode

HEADER = (
    f"{'policy':<17}{'commands':>9}{'clipped':>9}{'rejected':>9}{'holds':>7}{'tracking':>9}{'unsafe':>8}"
    f"{'ee mm':>10}{'ee@sw mm':>10}{'q_out rad':>11}{'contacts':>9}"
)
SWITCH_STEPS = 10
"""Steps after a joint_position -> ee_delta switch whose excursion is reported apart (``ee@sw``)."""
CFG = SafetyConfig(
    workspace_low=[0.35, -0.2, 0.05],
    workspace_high=[0.6, 0.2, 0.35],
    velocity_scale=0.5,
    acceleration_scale=0.5,
    watchdog_ms=0,
    estop_signal="",
)


class ClientSideOnly(SimServerRobot):
    """A server client without the robot-side boundary (as a driver without one: the safety layer's
    checks alone)."""

    def set_tcp_boundary(self, low: np.ndarray, high: np.ndarray) -> bool:
        return False


class InProcessClientSideOnly(MujocoRobot):
    """The in-process sim without the robot-side boundary (as a driver without one: the safety layer's
    checks alone)."""

    def set_tcp_boundary(self, low: np.ndarray | None, high: np.ndarray | None) -> bool:
        return False


def run_adversary(
    name: str, steps: int, mode: CommandMode | None = None, server: str = "", boundary: bool = True
) -> str:
    adversary = ADVERSARIES[name] if mode is None else single_mode(ADVERSARIES[name], mode)
    client, sim = None, None
    if server:  # each run from the home pose, as the lock-step robot's
        client = (SimServerRobot if boundary else ClientSideOnly)(server)
        client.connect()
        client.reset_scene(0)
        before = client.ping()["stats"]["boundary_brakes"]
        robot: Robot = client
    else:
        robot = sim = (MujocoRobot if boundary else InProcessClientSideOnly)(seed=0)
    audit = LimitAudit(robot, CFG)
    safe = SafeRobot(audit, CFG)
    ee_out = {"switch": 0.0, "other": 0.0}  # within SWITCH_STEPS of a joint -> ee_delta switch, or not
    q_out, last_switch, sent, contacts = 0.0, -SWITCH_STEPS - 1, None, 0
    links = LinkCollisions(load_model())  # the arm's collision model, at the measured joints
    with safe:
        lim, enforced = audit.robot.limits, safe.limits
        for step in attack(safe, audit, adversary, steps):
            if sent == CommandMode.JOINT_POSITION and audit.last_mode == CommandMode.EE_DELTA:
                last_switch = step
            sent = audit.last_mode
            s = audit.robot.read()
            key = "switch" if step - last_switch <= SWITCH_STEPS else "other"
            beyond = np.maximum(enforced.ee_low - s.ee_pos, s.ee_pos - enforced.ee_high)
            ee_out[key] = max(ee_out[key], float(np.max(beyond)))
            q_out = max(
                q_out, float(np.max(np.maximum(lim.joint_low - s.joint_pos, s.joint_pos - lim.joint_high)))
            )
            contacts += links(s.joint_pos) < 0.0
        c = safe.counters
        brakes = (
            client.ping()["stats"]["boundary_brakes"] - before if client is not None else sim.brake.brakes
        )
    label = name if mode is None else f"{name}/{'ee' if mode == CommandMode.EE_DELTA else 'joint'}"
    return (
        f"{label:<17}{c.commands:>9}{c.clipped:>9}{c.rejected:>9}{c.holds:>7}{c.tracking_resets:>9}"
        f"{len(audit.violations):>8}{1000 * ee_out['other']:>10.1f}{1000 * ee_out['switch']:>10.1f}"
        f"{q_out:>11.4f}{contacts:>9}{brakes:>8}"
    )


def benign(mode: CommandMode, home: np.ndarray, k: int) -> Command:
    if mode == CommandMode.EE_DELTA:
        return Command(mode, 0.005 * np.array([np.sin(0.1 * k), np.cos(0.1 * k), 0.0]))
    return Command(mode, home + 0.05 * np.sin(0.05 * k))


def per_command_us(robot: Robot, mode: CommandMode, n: int, start: int) -> list[float]:
    home = robot.read().joint_pos
    out = []
    for k in range(start, start + n):
        cmd = benign(mode, home, k)
        t = time.perf_counter()
        robot.command(cmd)
        out.append(1e6 * (time.perf_counter() - t))
    return out


def overhead(mode: CommandMode, lockstep: bool, blocks: int, n: int) -> str:
    bare = MujocoRobot(seed=0, lockstep=lockstep)
    safe = SafeRobot(MujocoRobot(seed=0, lockstep=lockstep), CFG)
    times: dict[str, list[float]] = {"bare": [], "safe": []}
    with bare, safe:
        for b in range(blocks):
            times["bare"] += per_command_us(bare, mode, n, b * n)
            times["safe"] += per_command_us(safe, mode, n, b * n)
        clipped = safe.counters.clipped
    med = {k: float(np.median(v)) for k, v in times.items()}
    label = f"{mode!s} ({'with 10 Hz physics' if lockstep else 'no physics'})"
    return (
        f"{label:<36} bare {med['bare']:8.1f} us  safe {med['safe']:8.1f} us  "
        f"+{med['safe'] - med['bare']:7.1f} us  x{med['safe'] / med['bare']:.2f}  (clipped {clipped})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument(
        "--timing-commands",
        type=int,
        default=5000,
        help="part 2: commands timed per mode without physics (10 blocks); 1/100 with physics (8 blocks)",
    )
    parser.add_argument(
        "--server-hz",
        type=float,
        default=0.0,
        help="instead, run the adversaries in real time through the robot server at this rate (Hz)",
    )
    parser.add_argument(
        "--robot-boundary",
        choices=("on", "off"),
        default="on",
        help="whether the layer sets the robot-side TCP boundary (the sim's, in process or in the server)",
    )
    args = parser.parse_args()
    boundary = args.robot_boundary == "on"
    if args.server_hz:
        with serve_in_subprocess(extra_args=(f"--control-hz={args.server_hz}",)) as srv:
            print(
                f"through the robot server at {args.server_hz} Hz (client-side kinematics and collisions), "
                f"{args.steps} steps each, robot-side boundary {args.robot_boundary}"
            )
            print(f"{HEADER}{'brakes':>8}")
            for name in ADVERSARIES:
                print(run_adversary(name, args.steps, server=srv.address, boundary=boundary), flush=True)
            for name in ("random", "huge", "out_of_box"):
                for mode in (CommandMode.EE_DELTA, CommandMode.JOINT_POSITION):
                    print(run_adversary(name, args.steps, mode, srv.address, boundary), flush=True)
        return
    print(
        f"adversaries, {args.steps} steps each (ee/joint excursions: measured, beyond box/limits), "
        f"robot-side boundary {args.robot_boundary}"
    )
    print(f"{HEADER}{'brakes':>8}")
    for name in ADVERSARIES:
        print(run_adversary(name, args.steps, boundary=boundary), flush=True)
    for name in ("random", "huge", "out_of_box"):
        for mode in (CommandMode.EE_DELTA, CommandMode.JOINT_POSITION):
            print(run_adversary(name, args.steps, mode, boundary=boundary), flush=True)
    print("per-command time, median (same run, alternating blocks)")
    total = max(10, args.timing_commands)
    for lockstep, blocks, n in ((False, 10, total // 10), (True, 8, max(1, total // 100))):
        for mode in (CommandMode.EE_DELTA, CommandMode.JOINT_POSITION):
            print(overhead(mode, lockstep, blocks, n), flush=True)


if __name__ == "__main__":
    main()
