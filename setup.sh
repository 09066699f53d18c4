#!/usr/bin/env bash
# Install robot_rl into ./.venv (CPU torch 2.13.0 pinned by constraints.txt) plus the system libraries
# for offscreen rendering and video. Usage: ./setup.sh        (runtime)
#                                           ./setup.sh test   (runtime + test tools)
set -euo pipefail
cd "$(dirname "$0")"
SYSTEM_PACKAGES="libosmesa6 libegl1 libgl1 libglx-mesa0 libegl-mesa0 libgl1-mesa-dri ffmpeg xvfb xdotool chromium"
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  missing=$(for p in $SYSTEM_PACKAGES; do dpkg -s "$p" >/dev/null 2>&1 || echo "$p"; done)
  if [ -n "$missing" ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
  fi
fi
[ -d .venv ] || python3 -m venv .venv
extra=""
[ "${1:-}" = "test" ] && extra="[test,viz,critic,vla,ray,teleop,gui,ros]"
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -c constraints.txt -e ".${extra}"
