"""MJX (MuJoCo's JAX port) physics of the built-in Panda pick-cube scene on an accelerator, against bare
``mj_step`` on the same machine's CPU (issue 19's GPU path, measured before it becomes an ``env.backend``).

What runs: the pick-cube scene with the arm in MuJoCo position actuators + ``gravcomp``
(``env.kwargs.controller=actuator``, the ``mujoco_cpu`` backend's fast mode), so one control step is
``substeps`` (50 at 500 Hz / 10 Hz) physics steps with a fixed ``ctrl``, no Python in between. Each control
step draws new joint targets (home + N(0, 0.05) rad) and a random gripper command per env, so contacts
(cube on floor, pads on cube) and the arm move. Not included: the differential IK, observations and
success checks the env does between control steps (numpy on the host today).

Scene variants (each also timed on the CPU, so every ratio compares like with like):

- ``full``: the scene as the env compiles it: 21 convex-mesh collision geoms (arm, gripper), pad, cube and
  floor primitives; Newton solver, 100 iterations, elliptic cones.
- ``primitive``: the same scene with the mesh geoms' collisions turned off (pads, cube and floor still
  collide): what MJX's guidance asks for (mesh-mesh pairs are its slowest path). The arm can then pass
  through the cube; pick-cube's contacts are pad-cube and cube-floor.
- ``primitive-fast``: ``primitive`` with the solver capped as MuJoCo Playground's MJX tasks do
  (``iterations=5``, ``ls_iterations=8``).

Rows: env (control) steps/s and physics steps/s per N; the first compiled call's time; the CPU's bare
``mj_step`` in 1 thread and in a thread pool of ``os.cpu_count()`` threads over 64 ``MjData`` (MuJoCo
releases the GIL); the ratio of MJX to each; and the largest joint-position difference between MJX (float32)
and CPU (float64) after 10 control steps of env 0 with the same controls (a correctness check, not a
speed figure).

Full env (``--env``, issue 37): ``env.backend=mjx`` (:mod:`robot_rl.sim.batched_mjx`: IK, actuators,
observations, reward, success and autoreset all in the jitted step) at each N, random actions, beside the
``mujoco_cpu`` batched env (same task, ``controller=actuator``, a thread per core, N = 4 per thread) in the
same run: env steps/s, the first step's time (compile) and the ratio. A size that fails (out of memory) is
reported and the larger ones still tried, so the last row that ran is the largest that fits. Needs
robot_rl importable (``gpu_offline.sh`` puts its folders on PYTHONPATH) with gymnasium and gym-hil:
``python benchmarks/bench_mjx.py --env [--task ID] [--num-envs 1 1024 4096 16384] [--seconds S]``.

Bare physics: two steps, because the accelerator machine has no robot_rl install:
``python benchmarks/bench_mjx.py --export DIR`` (here: compiles the scene with robot_rl and writes
``DIR/scene.mjb.gz`` + ``DIR/init.npz``), then ``python benchmarks/bench_mjx.py --models DIR
[--num-envs 1 64 1024 4096] [--json PATH]`` (needs only ``mujoco``, ``mujoco-mjx`` and ``jax``; JAX picks
the GPU when it has one). Results: benchmarks/README.md, "MJX".
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import mujoco
import numpy as np

VARIANTS = ("full", "primitive", "primitive-fast")
SUBSTEPS = 50
SECONDS = 3.0


def physics_model(env) -> mujoco.MjModel:
    """``env``'s scene compiled without its visual-only geoms (mesh geoms that collide with nothing) and
    their meshes, the actuators configured as ``env``'s. Three gripper bodies take their mass from their
    geoms, visual ones included, so every body's mass and inertia are copied from ``env``'s model and the
    derived constants recomputed (``mj_setConst``)."""
    from robot_rl.sim.assets import scene_spec

    spec = scene_spec(timestep_s=env.model.opt.timestep, objects=env.objects, arm_gravcomp=True)
    for g in list(spec.geoms):
        if g.type == mujoco.mjtGeom.mjGEOM_MESH and g.contype == 0 and g.conaffinity == 0:
            spec.delete(g)
    used = {g.meshname for g in spec.geoms if g.type == mujoco.mjtGeom.mjGEOM_MESH}
    for mesh in list(spec.meshes):
        if (mesh.name or Path(mesh.file).stem) not in used:  # an unnamed mesh is named after its file
            spec.delete(mesh)
    m = spec.compile()
    if (m.nbody, m.nq, m.nu) != (env.model.nbody, env.model.nq, env.model.nu):
        raise RuntimeError("removing the visual geoms changed the bodies, joints or actuators")
    for field in ("gainprm", "biasprm", "biastype", "forcelimited", "forcerange", "ctrllimited"):
        getattr(m, f"actuator_{field}")[:] = getattr(env.model, f"actuator_{field}")
    for field in ("mass", "inertia", "ipos", "iquat"):
        getattr(m, f"body_{field}")[:] = getattr(env.model, f"body_{field}")
    mujoco.mj_setConst(m, mujoco.MjData(m))
    return m


def export(out: Path) -> None:
    """Write the scene without visual geoms (``scene.mjb.gz``, gains already in the actuators) and its
    initial state."""
    from robot_rl.sim.panda_pick_cube import PandaPickCubeEnv

    env = PandaPickCubeEnv(controller="actuator")
    env.reset(seed=0)
    env.controller.apply(env.data)  # kp, kd into the model; the home joint targets into ctrl
    out.mkdir(parents=True, exist_ok=True)
    m = physics_model(env)
    with tempfile.TemporaryDirectory() as tmp:
        mujoco.mj_saveModel(m, f"{tmp}/scene.mjb", None)
        (out / "scene.mjb.gz").write_bytes(gzip.compress(Path(f"{tmp}/scene.mjb").read_bytes()))
    cube = m.jnt_qposadr[m.body_jntadr[m.geom_bodyid[m.geom("block").id]]]
    np.savez(
        out / "init.npz",
        qpos=env.data.qpos,
        ctrl=env.data.ctrl,
        arm=env.controller.ctrl_adr,
        cube_qpos=cube,
        substeps=env.n_substeps,
    )
    print(f"wrote scene.mjb.gz ({m.ngeom} geoms, {m.nmesh} meshes) and init.npz to {out}")


def load_variant(models: Path, variant: str) -> mujoco.MjModel:
    """The exported scene as ``variant`` (:data:`VARIANTS`, see the module docstring)."""
    with tempfile.TemporaryDirectory() as tmp:
        Path(f"{tmp}/scene.mjb").write_bytes(gzip.decompress((models / "scene.mjb.gz").read_bytes()))
        m = mujoco.MjModel.from_binary_path(f"{tmp}/scene.mjb")
    if variant != "full":
        mesh = m.geom_type == mujoco.mjtGeom.mjGEOM_MESH
        m.geom_contype[mesh], m.geom_conaffinity[mesh] = 0, 0
    if variant == "primitive-fast":
        m.opt.iterations, m.opt.ls_iterations = 5, 8
    return m


def controls(init: dict, steps: int, num: int, seed: int = 0) -> np.ndarray:
    """(steps, num, nu) float64 controls: home joint targets + N(0, 0.05) rad, gripper 0 or 255."""
    rng = np.random.default_rng(seed)
    ctrl = np.broadcast_to(init["ctrl"], (steps, num, init["ctrl"].size)).copy()
    ctrl[..., init["arm"]] += rng.normal(0.0, 0.05, (steps, num, init["arm"].size))
    grip = [i for i in range(ctrl.shape[-1]) if i not in set(init["arm"].tolist())]
    ctrl[..., grip] = 255.0 * rng.integers(0, 2, (steps, num, len(grip)))
    return ctrl


def cpu_rates(m: mujoco.MjModel, init: dict, substeps: int) -> dict[str, float]:
    """Bare ``mj_step`` env steps/s: one MjData in one thread, and 64 in a pool of cpu_count threads."""
    threads = os.cpu_count() or 1
    datas = [mujoco.MjData(m) for _ in range(64)]
    for d in datas:
        d.qpos[:] = init["qpos"]
    ctrl = controls(init, 1000, len(datas))
    out = {}
    for name, num, pool_size in (("cpu_1_thread", 1, 1), ("cpu_pool", len(datas), threads)):
        pool = ThreadPoolExecutor(pool_size)
        shards = np.array_split(np.arange(num), pool_size)

        def run(shard, k):
            for i in shard:
                datas[i].ctrl[:] = ctrl[k % 1000, i]
                mujoco.mj_step(m, datas[i], substeps)

        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < SECONDS or n < 3:
            list(pool.map(run, shards, [n] * len(shards)))
            n += 1
        out[name] = n * num / (time.perf_counter() - start)
        pool.shutdown()
    out["cpu_threads"] = threads
    return out


def mjx_rates(m: mujoco.MjModel, init: dict, substeps: int, sizes: list[int]) -> list[dict]:
    """MJX env steps/s of ``jit(vmap(control_step))`` for each N, and its first call's time."""
    import jax
    from mujoco import mjx

    mx = mjx.put_model(m)

    def control_step(d, ctrl):
        d = d.replace(ctrl=ctrl)
        return jax.lax.fori_loop(0, substeps, lambda _, x: mjx.step(mx, x), d)

    step = jax.jit(jax.vmap(control_step))
    init_fn = jax.jit(jax.vmap(lambda q: mjx.forward(mx, mjx.make_data(mx).replace(qpos=q))))
    rows = []
    for num in sizes:
        row = {"num_envs": num}
        try:
            rng = np.random.default_rng(1)
            qpos = np.broadcast_to(init["qpos"], (num, m.nq)).copy()
            cube = int(init["cube_qpos"])
            qpos[:, cube : cube + 2] += rng.uniform(-0.02, 0.02, (num, 2))  # the cube's x, y (m)
            d = init_fn(jax.numpy.asarray(qpos, dtype=jax.numpy.float32))
            ctrl = jax.numpy.asarray(controls(init, 8, num), dtype=jax.numpy.float32)
            t0 = time.perf_counter()
            d = jax.block_until_ready(step(d, ctrl[0]))
            row["first_call_s"] = time.perf_counter() - t0
            n, start = 0, time.perf_counter()
            while time.perf_counter() - start < SECONDS or n < 3:
                d = step(d, ctrl[n % 8])
                n += 1
            jax.block_until_ready(d)
            row["env_steps_s"] = n * num / (time.perf_counter() - start)
            row["finite"] = bool(np.isfinite(np.asarray(d.qpos)).all())
        except Exception as e:  # one size failing (memory) must not lose the others
            row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def agreement(m: mujoco.MjModel, init: dict, substeps: int, steps: int = 10) -> float:
    """Largest |qpos_mjx - qpos_cpu| (rad or m) of one env after ``steps`` control steps, same controls."""
    import jax
    from mujoco import mjx

    ctrl = controls(init, steps, 1)[:, 0]
    d = mujoco.MjData(m)
    d.qpos[:] = init["qpos"]
    mx = mjx.put_model(m)
    dx = mjx.forward(mx, mjx.make_data(mx).replace(qpos=jax.numpy.asarray(init["qpos"], jax.numpy.float32)))
    step = jax.jit(lambda x: mjx.step(mx, x))
    for k in range(steps):
        d.ctrl[:] = ctrl[k]
        mujoco.mj_step(m, d, substeps)
        dx = dx.replace(ctrl=jax.numpy.asarray(ctrl[k], jax.numpy.float32))
        for _ in range(substeps):
            dx = step(dx)
    return float(np.abs(np.asarray(dx.qpos) - d.qpos).max())


def bench(models: Path, sizes: list[int], variants: list[str], check: bool = True) -> dict:
    import jax

    init = dict(np.load(models / "init.npz"))
    substeps = int(init["substeps"])
    print(f"jax {jax.__version__} on {jax.devices()}, mujoco {mujoco.__version__}", flush=True)
    results = {"device": str(jax.devices()[0]), "substeps": substeps, "variants": {}}
    for variant in variants:
        m = load_variant(models, variant)
        print(f"== {variant}", flush=True)
        res = cpu_rates(m, init, substeps)
        print(json.dumps(res), flush=True)
        if check:
            res["max_qpos_diff"] = agreement(m, init, substeps)
            print(f"max |qpos MJX - CPU| after 10 control steps: {res['max_qpos_diff']:.2e}", flush=True)
        res["mjx"] = mjx_rates(m, init, substeps, sizes)
        results["variants"][variant] = res
    return results


def table(results: dict) -> None:
    s = results["substeps"]
    print(f"MJX on {results['device']}; env step = {s} physics steps")
    head = "{:<15} | {:>6} | {:>13} | {:>15} | {:>11} | {:>9} | {:>11}"
    cols = ("scene", "N", "env steps/s", "physics steps/s", "1st call s", "x CPU 1 th", "x CPU pool")
    print(head.format(*cols))
    for variant, res in results["variants"].items():
        pool = f"CPU {res['cpu_threads']} threads"
        for name, rate in (("CPU 1 thread", res["cpu_1_thread"]), (pool, res["cpu_pool"])):
            print(head.format(variant, name, f"{rate:.0f}", f"{rate * s:.0f}", "-", "-", "-"))
        for r in res["mjx"]:
            if "error" in r:
                print(head.format(variant, r["num_envs"], "error", r["error"][:40], "-", "-", "-"))
                continue
            rate = r["env_steps_s"]
            cells = (f"{rate:.0f}", f"{rate * s:.0f}", f"{r['first_call_s']:.1f}")
            ratios = (f"x{rate / res['cpu_1_thread']:.1f}", f"x{rate / res['cpu_pool']:.2f}")
            print(head.format(variant, r["num_envs"], *cells, *ratios))
        if "max_qpos_diff" in res:
            print(f"{variant}: max |qpos MJX - CPU| after 10 control steps {res['max_qpos_diff']:.2e}")


def _time_env(env, seconds: float, seed: int = 0) -> tuple[float, float]:
    """(first step's seconds, env steps/s over ``seconds``) of a batched env under uniform random actions."""
    space = env.single_action_space
    rng = np.random.default_rng(seed)
    actions = rng.uniform(space.low, space.high, (8, env.num_envs, *space.shape)).astype(np.float32)
    env.reset(seed=seed)
    t0 = time.perf_counter()
    env.step(actions[0])
    first = time.perf_counter() - t0
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds or n < 2:
        env.step(actions[n % 8])
        n += 1
    return first, n * env.num_envs / (time.perf_counter() - start)


def env_bench(task: str, sizes: list[int], seconds: float) -> dict:
    """Full-env steps/s of ``env.backend=mjx`` per N and of ``mujoco_cpu`` (see the module docstring)."""
    import jax

    from robot_rl.sim.mjx_physics import configure_xla

    configure_xla()
    from robot_rl.config import EnvConfig
    from robot_rl.sim.batched_factory import make_batched_env

    cfg = EnvConfig(id=task, kwargs={"controller": "actuator"})
    threads = os.cpu_count() or 1
    print(f"jax {jax.__version__} on {jax.devices()}, mujoco {mujoco.__version__}, {task}", flush=True)
    with make_batched_env(cfg, 4 * threads, backend="mujoco_cpu") as cpu:
        cpu_first, cpu_rate = _time_env(cpu, seconds)
    results = {
        "device": str(jax.devices()[0]),
        "task": task,
        "cpu_threads": threads,
        "cpu_num_envs": 4 * threads,
    }
    results.update(cpu_env_steps_s=cpu_rate, mjx=[])
    print(json.dumps({"mujoco_cpu": cpu_rate}), flush=True)
    for num in sizes:
        row: dict = {"num_envs": num}
        try:
            with make_batched_env(cfg, num, backend="mjx") as env:
                row["first_step_s"], row["env_steps_s"] = _time_env(env, seconds)
        except Exception as e:  # one size failing (memory) must not lose the others
            row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        print(json.dumps(row), flush=True)
        results["mjx"].append(row)
    return results


def env_table(results: dict) -> None:
    print(f"full env {results['task']}: MJX on {results['device']}")
    head = "{:<26} | {:>6} | {:>11} | {:>13} | {:>10}"
    print(head.format("backend", "N", "env steps/s", "1st step s", "x mujoco_cpu"))
    cpu = results["cpu_env_steps_s"]
    name = f"mujoco_cpu {results['cpu_threads']} threads"
    print(head.format(name, results["cpu_num_envs"], f"{cpu:.0f}", "-", "x1"))
    for r in results["mjx"]:
        if "error" in r:
            print(head.format("mjx", r["num_envs"], "error", r["error"][:13], "-"))
            continue
        rate = r["env_steps_s"]
        print(
            head.format("mjx", r["num_envs"], f"{rate:.1f}", f"{r['first_step_s']:.1f}", f"x{rate / cpu:.3g}")
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--export", type=Path, help="write the scene variants to this folder and stop")
    parser.add_argument("--models", type=Path, help="folder written by --export")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[1, 64, 1024, 4096])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--no-check", action="store_true", help="skip the MJX-vs-CPU agreement check")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--env", action="store_true", help="time the full env.backend=mjx env instead")
    parser.add_argument("--task", default="robot_rl/PandaPickCube-v0", help="--env: the built-in task")
    parser.add_argument("--seconds", type=float, default=SECONDS, help="--env: timed seconds per size")
    args = parser.parse_args()
    # XLA CPU fusion emitters make MJX 25-300x slower (robot_rl.sim.mjx_physics.XLA_CPU_FLAG; GPUs ignore it)
    if "xla_cpu_use_fusion_emitters" not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (
            f"{os.environ.get('XLA_FLAGS', '')} --xla_cpu_use_fusion_emitters=false".strip()
        )
    if args.env:
        results = env_bench(args.task, args.num_envs, args.seconds)
        if args.json:
            args.json.write_text(json.dumps(results, indent=1))
        env_table(results)
        return
    if args.export:
        export(args.export)
        return
    if not args.models:
        parser.error("give --export DIR or --models DIR")
    results = bench(args.models, args.num_envs, args.variants, check=not args.no_check)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    table(results)


if __name__ == "__main__":
    main()
