#!/usr/bin/env bash
# Install robot_rl into ./.venv (CPU torch 2.13.0 pinned by constraints.txt) plus the system libraries
# for offscreen rendering and video. Usage: ./setup.sh        (runtime)
#                                           ./setup.sh test   (runtime + test tools)
set -euo pipefail
cd "$(dirname "$0")"
SYSTEM_PACKAGES="libosmesa6 libegl1 libgl1 libglx-mesa0 libegl-mesa0 libgl1-mesa-dri ffmpeg xvfb xdotool chromium libvulkan1 mesa-vulkan-drivers"
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  missing=$(for p in $SYSTEM_PACKAGES; do dpkg -s "$p" >/dev/null 2>&1 || echo "$p"; done)
  if [ -n "$missing" ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
  fi
fi
lavapipe() {  # lavapipe DIR: Mesa >= 23's CPU Vulkan driver (ManiSkill's SAPIEN refuses Debian 12's 22.3) and
  # its ICD file in DIR, unpacked from the backports archive without touching the system's apt sources or
  # Mesa. Debian as root only; elsewhere ManiSkill needs a GPU driver or VK_DRIVER_FILES (its tests skip).
  local dir=$1 tmp codename
  [ -f "$dir/lvp_icd.json" ] && return 0
  { command -v apt-get && [ "$(id -u)" = 0 ] && [ -r /etc/os-release ]; } >/dev/null 2>&1 || return 0
  codename=$(. /etc/os-release && [ "${ID:-}" = debian ] && echo "${VERSION_CODENAME:-}")
  [ -n "$codename" ] || return 0
  tmp=$(mktemp -d)
  mkdir -p "$tmp/lists/partial" "$tmp/cache/archives/partial" "$dir"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $codename-backports main" >"$tmp/sources.list"
  local o=(-o "Dir::Etc::SourceList=$tmp/sources.list" -o Dir::Etc::SourceParts=/dev/null -o APT::Sandbox::User=root
    -o "Dir::State::Lists=$tmp/lists" -o "Dir::Cache=$tmp/cache")
  apt-get "${o[@]}" update -qq && (cd "$tmp" && apt-get "${o[@]}" download -qq "mesa-vulkan-drivers/$codename-backports") &&
    dpkg-deb -x "$tmp"/mesa-vulkan-drivers_*.deb "$tmp/root" &&
    cp "$tmp/root/usr/lib/$(uname -m)-linux-gnu/libvulkan_lvp.so" "$dir/" &&
    sed "s#\"library_path\": \"[^\"]*\"#\"library_path\": \"$(cd "$dir" && pwd)/libvulkan_lvp.so\"#" \
      "$tmp/root/usr/share/vulkan/icd.d/lvp_icd.json" >"$dir/lvp_icd.json" || echo "setup.sh: no Mesa lavapipe from $codename-backports (ManiSkill's tests will skip)" >&2
  rm -rf "$tmp"
}
[ -d .venv ] || python3 -m venv .venv
extra=""
[ "${1:-}" = "test" ] && extra="[test,viz,critic,vla,ray,teleop,gui,ros,rclpy,mjx]"
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -c constraints.txt -e ".${extra}"
if [ "${1:-}" = "test" ]; then
  # the test support (emulators, fakes, the safety audit): its own distribution, not in robot-rl's wheel
  .venv/bin/pip install -q -c constraints.txt --no-deps -e ./testing
  # ManiSkill3 for env.backend=maniskill (the `maniskill` extra) without the opencv-python it pulls in: two
  # OpenCV wheels would share one cv2 folder, and the headless one above (< 5) already provides cv2.
  .venv/bin/pip install -q -c constraints.txt --no-deps "mani-skill>=3.0.1,<3.1" "sapien>=3.0.3,<3.1"
  .venv/bin/pip install -q -c constraints.txt dacite gitpython tabulate transforms3d trimesh "imageio[ffmpeg]" \
    "mplib==0.1.1" ipython "pytorch-kinematics==0.7.6" defusedxml nvidia-ml-py "tyro>=0.8.5" huggingface-hub \
    lxml networkx pyperclip importlib-resources requests
  lavapipe .venv/share/robot_rl/vulkan
fi
