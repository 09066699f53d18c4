#!/bin/bash
# The GPU benchmarks (bench_vla.py on CUDA, bench_mjx.py) on an accelerator machine without network access
# or a robot_rl install, from a folder made here. Two steps, both from the repository root:
#   bash benchmarks/gpu_offline.sh pack      # here (network to PyPI): .gpu_pack/ with wheels + the MJX scene
#   bash benchmarks/gpu_offline.sh run       # there, with .gpu_pack/ copied beside the checkout; results
#                                            # (logs, JSON) under $OUT (default /tmp/gpu_bench)
# The machine must already have python3 (PYTHON), torch with CUDA, transformers, peft, jax with CUDA, scipy,
# PyYAML, typing-inspect and absl-py; the pack adds MuJoCo, MJX, trimesh, draccus, gymnasium, gym-hil (the Panda
# model of the full-env benchmark) and their small needs
# (wheels for PACK_PY, default 3.12). Every section has its own time limit, so one failure or overrun keeps
# the others' results. Sizes: VLA_SIZES, VLA_B (inference batches), MJX_N (envs), MJX_BIG (envs of the
# slower scene variants), MJX_ENV_N (envs of the full env.backend=mjx benchmark; the last that runs is the largest
# that fits), DEVICE (torch device, default cuda). Results: benchmarks/README.md ("MJX", "VLA").
set -u
cd "$(dirname "$0")/.."
PACK=.gpu_pack
case "${1:-}" in
pack)
  set -e
  rm -rf "$PACK" && mkdir -p "$PACK/whl"
  ver() { .venv/bin/python -c "import importlib.metadata as m; print(m.version('$1'))"; }
  for spec in "mujoco==$(ver mujoco)" "mujoco-mjx==$(ver mujoco)" "draccus==$(ver draccus)" mergedeep toml \
    trimesh pyopengl glfw "gymnasium==$(ver gymnasium)" "gym-hil==$(ver gym-hil)" cloudpickle \
    farama-notifications; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version "${PACK_PY:-3.12}" \
      --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$PACK/whl" "$spec"
  done
  .venv/bin/python benchmarks/bench_mjx.py --export "$PACK/mjx"
  du -sh "$PACK"
  ;;
run)
  export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
  OUT=$(realpath -m "${OUT:-/tmp/gpu_bench}"); PY=${PYTHON:-python3}; mkdir -p "$OUT"
  VLA_SIZES=${VLA_SIZES:-smolvlm256m smolvlm500m}; VLA_B=${VLA_B:-1 8 64}; DEVICE=${DEVICE:-cuda}
  MJX_N=${MJX_N:-1 1024 4096}; MJX_BIG=${MJX_BIG:-4096}; MJX_ENV_N=${MJX_ENV_N:-1 1024 4096 16384 65536}
  T0=$(date +%s); el() { echo "[t=$(($(date +%s) - T0)) s] $*"; }
  nvidia-smi -L 2>&1 | head -2
  SITE=$(mktemp -d)
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE/lib" "$PACK"/whl/*.whl \
    || echo "[gpu] pip install of $PACK/whl failed"
  # robot_rl without installing it: its package folders as pyproject.toml maps them
  mkdir -p "$SITE/src" && cp -r robot_rl "$SITE/src/"
  for d in sim policies hardware teleop; do ln -s "$PWD/$d" "$SITE/src/robot_rl/$d"; done
  export PYTHONPATH="$SITE/lib:$SITE/src"
  quiet() { grep -v -i "warp\|coplanar\|warnings.warn\|UserWarning"; }
  el "VLA, backbone bfloat16"
  (cd benchmarks && timeout 170 $PY bench_vla.py --device $DEVICE --dtype bfloat16 --sizes $VLA_SIZES \
    --batches $VLA_B --train-batch 32 --time-per-case 1 2>&1 | quiet | tee "$OUT/vla_bf16.log")
  el "VLA, backbone float32"
  (cd benchmarks && timeout 80 $PY bench_vla.py --device $DEVICE --dtype float32 --sizes ${VLA_SIZES%% *} \
    --batches $VLA_B --train-batch 32 --time-per-case 1 2>&1 | quiet | tee "$OUT/vla_fp32.log")
  el "MJX primitive-fast"
  timeout 150 $PY benchmarks/bench_mjx.py --models "$PACK/mjx" --variants primitive-fast --num-envs $MJX_N \
    --json "$OUT/mjx_fast.json" 2>&1 | quiet | tee "$OUT/mjx_fast.log"
  for v in primitive full; do
    el "MJX $v"
    timeout 60 $PY benchmarks/bench_mjx.py --models "$PACK/mjx" --variants $v --num-envs $MJX_BIG --no-check \
      --json "$OUT/mjx_$v.json" 2>&1 | quiet | tee "$OUT/mjx_$v.log"
  done
  el "MJX full env (env.backend=mjx: IK, observations, reward, autoreset), beside mujoco_cpu"
  timeout 240 $PY benchmarks/bench_mjx.py --env --num-envs $MJX_ENV_N --seconds 5 --json "$OUT/mjx_env.json" \
    2>&1 | quiet | tee "$OUT/mjx_env.log"
  el "done"
  ;;
*)
  echo "usage: bash benchmarks/gpu_offline.sh pack|run" >&2
  exit 2
  ;;
esac
