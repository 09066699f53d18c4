"""Teleop devices: the shared action mapping, the SpaceMouse HID parser, the factory's errors, a gamepad on
SDL's own virtual joystick, and the keyboard on a real Xvfb display driven by xdotool."""

from __future__ import annotations

import ctypes
import glob
import importlib.util
import os
import struct
import subprocess
import sys
import time

import numpy as np
import pytest

from robot_rl.config import InterventionConfig
from robot_rl.runtime.intervention import DeviceError, HumanInput
from robot_rl.teleop import DEVICES, make_device
from robot_rl.teleop.command import ActionMapper, DeviceCommand, apply_deadzone
from robot_rl.teleop.spacemouse import SpaceMouseDevice, SpaceMouseReport, is_spacemouse, parse_report

LOW = np.array([-0.03, -0.03, -0.03, 0.0], dtype=np.float32)
HIGH = np.array([0.03, 0.03, 0.03, 1.0], dtype=np.float32)
OBS: dict[str, np.ndarray] = {}


def wait_for(poll, cond, timeout_s: float = 5.0) -> HumanInput:
    """Poll until ``cond(input)`` holds (device threads and X need a moment); the last input otherwise."""
    deadline = time.monotonic() + timeout_s
    while True:
        inp = poll(OBS)
        if cond(inp) or time.monotonic() > deadline:
            return inp
        time.sleep(0.02)


# --- shared mapping -------------------------------------------------------------------------------------


def test_mapping_clips_scales_and_maps_gripper():
    mapper = ActionMapper(LOW, HIGH, scale=0.5)
    inp = mapper(DeviceCommand(np.array([2.0, -0.5, 1.0]), gripper=1.0, intervene=True))
    np.testing.assert_allclose(inp.action, [0.015, -0.0075, 0.015, 1.0], atol=1e-7)
    assert inp.action.dtype == np.float32 and inp.label is None
    full = ActionMapper(LOW, HIGH).action(DeviceCommand(np.array([-9.0, 0.0, 0.0]), gripper=0.3))
    np.testing.assert_allclose(full, [-0.03, 0.0, 0.0, 0.3], atol=1e-7)
    idle = mapper(DeviceCommand(np.ones(3), gripper=1.0, intervene=False, label="failure"))
    assert idle.action is None and idle.label == "failure"


def test_mapping_generic_box():
    # [dx, dy, dz, droll, dpitch, dyaw, grip] with the gripper in [-1, 1]: rotation dims stay 0
    low = np.array([-0.05] * 3 + [-0.1] * 3 + [-1.0])
    high = np.array([0.05] * 3 + [0.1] * 3 + [1.0])
    action = ActionMapper(low, high).action(DeviceCommand(np.array([1.0, 0.0, -1.0]), gripper=1.0))
    np.testing.assert_allclose(action, [0.05, 0.0, -0.05, 0, 0, 0, 1.0], atol=1e-7)
    assert ActionMapper(low, high).action(DeviceCommand(gripper=0.0))[-1] == -1.0


@pytest.mark.parametrize(
    ("low", "high", "scale", "match"),
    [
        (np.zeros(2), np.ones(2), 1.0, "d >= 3"),
        (LOW, HIGH, 0.0, "intervention.scale"),
        (LOW, np.array([0.03, 0.0, 0.03, 1.0]), 1.0, "action_high"),
        (LOW, np.array([0.03, 0.03, 0.03, np.inf]), 1.0, "finite"),
    ],
)
def test_mapping_rejects_bad_boxes(low, high, scale, match):
    with pytest.raises(ValueError, match=match):
        ActionMapper(low, high, scale)


def test_a_box_without_a_gripper_maps_to_xyz_steps_only():
    """A gripper-less robot (a UR, env.robot.gripper=none) has a (3,) box; before, every device refused it."""
    low, high = np.full(3, -0.03), np.full(3, 0.03)
    action = ActionMapper(low, high).action(DeviceCommand(np.array([1.0, 0.0, -1.0]), gripper=1.0))
    assert action.shape == (3,) and np.allclose(action, [0.03, 0.0, -0.03])


def test_mapping_rejects_unknown_label():
    with pytest.raises(ValueError, match="label"):
        ActionMapper(LOW, HIGH)(DeviceCommand(label="maybe"))


def test_deadzone():
    np.testing.assert_allclose(
        apply_deadzone(np.array([0.05, -0.1, 0.55, -1.0, 3.0]), 0.1), [0, 0, 0.5, -1, 1]
    )


# --- SpaceMouse HID reports -----------------------------------------------------------------------------


def test_parse_translation_rotation_buttons():
    assert parse_report(b"\x01" + struct.pack("<hhh", 100, -200, 350)) == SpaceMouseReport((100, -200, 350))
    six = bytes([1]) + struct.pack("<hhhhhh", -350, 0, 12, 7, -8, 300)
    assert parse_report(six) == SpaceMouseReport((-350, 0, 12), (7, -8, 300))
    assert parse_report([2, 0x5E, 0x01, 0xA2, 0xFE, 0, 0]) == SpaceMouseReport(rotation=(350, -350, 0))
    assert parse_report(b"\x03\x02\x00") == SpaceMouseReport(buttons=2)
    assert parse_report(b"\x03\x00\x01") == SpaceMouseReport(buttons=256)
    # hidapi pads reads to the report size: trailing bytes after the fields are ignored
    assert parse_report(b"\x01" + struct.pack("<hhh", 1, 2, 3) + b"\x00").translation == (1, 2, 3)
    assert parse_report(b"") == SpaceMouseReport() == parse_report(b"\x17\x64")  # battery report


def test_parse_truncated_report():
    with pytest.raises(ValueError, match="report 1 truncated"):
        parse_report(b"\x01\x10\x00")


def test_is_spacemouse():
    assert is_spacemouse({"vendor_id": 0x256F, "product_id": 0xC635})
    assert is_spacemouse({"vendor_id": 0x046D, "product_id": 0xC626})
    assert not is_spacemouse({"vendor_id": 0x046D, "product_id": 0xC52B})  # a Logitech mouse receiver


class FakeHid:
    """Stands in for hidapi's ``hid.device`` (no SpaceMouse can be attached here): same ``read`` / ``close``,
    replaying raw reports and raising ``OSError`` like hidapi once 'unplugged'."""

    def __init__(self) -> None:
        self.reports: list[bytes] = []
        self.unplugged = False
        self.closed = False

    def read(self, max_length: int, timeout_ms: int = 0) -> list[int]:
        if self.unplugged:
            raise OSError("read error")
        return list(self.reports.pop(0)[:max_length]) if self.reports else []

    def close(self) -> None:
        self.closed = True


def test_spacemouse_device_on_raw_reports():
    hid = FakeHid()
    mouse = SpaceMouseDevice(LOW, HIGH, device=hid)
    mouse.reset(0)
    assert mouse.poll(OBS) == HumanInput()
    hid.reports = [b"\x03\x02", b"\x03\x00"]  # right button press/release: take over
    inp = mouse.poll(OBS)
    np.testing.assert_allclose(inp.action, [0, 0, 0, 0])
    hid.reports = [
        b"\x01" + struct.pack("<hhh", 0, -350, 0),
        b"\x03\x01",
        b"\x03\x00",
    ]  # push away, left button
    np.testing.assert_allclose(mouse.poll(OBS).action, [0.03, 0, 0, 1.0], atol=1e-6)
    hid.reports = [b"\x01" + struct.pack("<hhh", -175, 0, -350), b"\x03\x04", b"\x03\x00"]  # left/up, success
    inp = mouse.poll(OBS)
    np.testing.assert_allclose(inp.action[:3], [0, 0.03 * (0.5 - 0.05) / 0.95, 0.03], atol=1e-6)
    assert inp.label == "success" and mouse.poll(OBS).label is None
    hid.reports = [b"\x01" + struct.pack("<hhh", 0, 0, 0), b"\x03\x02"]  # release the cap, hand back
    assert mouse.poll(OBS).action is None
    hid.reports = [b"\x01" + struct.pack("<hhh", 0, 0, 200)]  # moving the cap takes over again
    assert mouse.poll(OBS).action[2] < 0
    hid.unplugged = True
    with pytest.raises(DeviceError, match="spacemouse: read failed"):
        mouse.poll(OBS)
    mouse.close()
    assert hid.closed


# --- factory --------------------------------------------------------------------------------------------


def test_factory_none_and_unknown():
    assert make_device(InterventionConfig(device="none"), LOW, HIGH) is None
    with pytest.raises(ValueError, match="intervention.device") as err:
        make_device(InterventionConfig(device="joystick"), LOW, HIGH)
    assert all(name in str(err.value) for name in DEVICES)


@pytest.mark.parametrize(
    ("device", "module"), [("gamepad", "pygame"), ("spacemouse", "hid"), ("keyboard", "pynput")]
)
def test_factory_names_missing_extra(monkeypatch, device, module):
    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` fail like a missing package
    with pytest.raises(DeviceError, match=r"robot-rl\[teleop\]") as err:
        make_device(InterventionConfig(device=device), LOW, HIGH)
    assert str(err.value).startswith(device)


def test_factory_spacemouse_not_attached():
    hid = pytest.importorskip("hid")
    if any(is_spacemouse(d) for d in hid.enumerate(0, 0)):
        pytest.skip("a real SpaceMouse is attached")
    with pytest.raises(DeviceError, match="spacemouse: no 3Dconnexion HID device found"):
        make_device(InterventionConfig(device="spacemouse"), LOW, HIGH)


# --- gamepad on SDL's virtual joystick ------------------------------------------------------------------


@pytest.fixture
def pygame_headless(monkeypatch):
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    monkeypatch.setenv("SDL_AUDIODRIVER", "dummy")
    pygame = pytest.importorskip("pygame")
    from robot_rl.teleop.gamepad import init_pygame_joystick

    init_pygame_joystick()
    return pygame


def test_factory_gamepad_not_attached(pygame_headless):
    if pygame_headless.joystick.get_count():
        pytest.skip("a real joystick is attached")
    with pytest.raises(DeviceError, match=r"gamepad: no joystick 0 \(SDL sees 0 joystick\(s\)\); plug in"):
        make_device(InterventionConfig(device="gamepad"), LOW, HIGH)


class VirtualJoystick:
    """A joystick made by SDL itself (``SDL_JoystickAttachVirtual``, SDL >= 2.0.14) in the SDL library that
    pygame loaded; SDL reports it to pygame exactly like a plugged-in pad."""

    def __init__(self, pygame, naxes: int = 6, nbuttons: int = 11) -> None:
        libs = glob.glob(
            os.path.join(os.path.dirname(pygame.__file__), os.pardir, "pygame.libs", "libSDL2-2*")
        )
        if not libs or pygame.get_sdl_version() < (2, 0, 14):
            pytest.skip("needs the SDL2 (>= 2.0.14) bundled with the pygame wheel for virtual joysticks")
        sdl = ctypes.CDLL(libs[0])
        sdl.SDL_JoystickOpen.restype = ctypes.c_void_p
        sdl.SDL_JoystickSetVirtualAxis.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int16]
        sdl.SDL_JoystickSetVirtualButton.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint8]
        self.sdl, self.index = sdl, sdl.SDL_JoystickAttachVirtual(0, naxes, nbuttons, 0)
        assert self.index >= 0, "SDL_JoystickAttachVirtual failed"
        self.handle = sdl.SDL_JoystickOpen(self.index)
        self.attached = True

    def axis(self, axis: int, value: int) -> None:
        assert self.sdl.SDL_JoystickSetVirtualAxis(self.handle, axis, value) == 0

    def button(self, button: int, down: bool) -> None:
        assert self.sdl.SDL_JoystickSetVirtualButton(self.handle, button, int(down)) == 0

    def detach(self) -> None:
        if self.attached:
            self.sdl.SDL_JoystickClose(ctypes.c_void_p(self.handle))
            self.sdl.SDL_JoystickDetachVirtual(self.index)
            self.attached = False


def test_gamepad_on_virtual_joystick(pygame_headless):
    if pygame_headless.joystick.get_count():
        pytest.skip("a real joystick is attached (the default index would pick it)")
    pad = VirtualJoystick(pygame_headless)
    try:
        device = make_device(InterventionConfig(device="gamepad", scale=0.5), LOW, HIGH)
        device.reset(0)
        assert device.poll(OBS) == HumanInput()
        pad.axis(1, -32768)  # left stick fully up
        assert device.poll(OBS).action is None  # dead-man not held: the policy drives
        pad.button(5, True)  # hold RB
        inp = device.poll(OBS)
        np.testing.assert_allclose(inp.action, [0.015, 0, 0, 0], atol=1e-6)
        pad.axis(4, -16384)  # right stick half up: +z past the dead zone
        pad.button(0, True)  # A: close the gripper
        inp = device.poll(OBS)
        assert inp.action[2] > 0 and inp.action[3] == 1.0
        pad.button(0, False)
        pad.button(3, True)  # Y: success
        assert device.poll(OBS).label == "success"
        assert device.poll(OBS).label is None
        pad.button(5, False)
        assert device.poll(OBS).action is None
        pad.detach()
        with pytest.raises(DeviceError, match="gamepad: .* was disconnected"):
            device.poll(OBS)
        device.close()
    finally:
        pad.detach()


# --- keyboard on a real X display -----------------------------------------------------------------------


def test_keyboard_on_xvfb(xvfb_display):
    """Keys sent with xdotool reach the device through a real X server. No fixed sleeps: X delivers one
    client's events in order, so each step waits (with a deadline) for the state its last key produces,
    which also proves every key before it was seen; transient states (X auto-repeat of a held key) are
    polled through."""

    def xdotool(*args: str) -> None:
        subprocess.run(["xdotool", *args], check=True, env={**os.environ, "DISPLAY": xvfb_display})

    def until(cond, what: str) -> HumanInput:
        inp = wait_for(device.poll, cond)
        assert cond(inp), f"{what}: still {inp} after 5 s"
        return inp

    def action_is(expected):
        return lambda i: i.action is not None and np.allclose(i.action, expected, atol=1e-7)

    device = make_device(InterventionConfig(device="keyboard"), LOW, HIGH)
    try:
        device.reset(0)
        assert device.poll(OBS) == HumanInput()
        xdotool("key", "f")  # the listener may start recording a moment after it reports ready
        until(lambda i: i.label == "failure", "the first key reaches the listener")
        device.reset(0)
        xdotool("keydown", "Up", "key", "s")
        inp = until(lambda i: i.label == "success", "Up then s")
        assert inp.action is None  # Up is held, but the policy drives until space
        xdotool("key", "space")
        until(action_is([0.03, 0, 0, 0]), "space takes over while Up is held")
        xdotool("keyup", "Up")
        xdotool("keydown", "Left", "keydown", "Page_Up", "key", "c")
        until(action_is([0, 0.03, 0.03, 1.0]), "Left + Page_Up, gripper closed")
        xdotool("keyup", "Left", "keyup", "Page_Up", "key", "s")
        inp = until(lambda i: i.label is not None, "the success key")
        assert inp.label == "success"
        np.testing.assert_allclose(device.poll(OBS).action, [0, 0, 0, 1.0])  # keys up: hold, gripper closed
        xdotool("key", "o", "key", "f", "key", "space")
        inp = until(lambda i: i.label is not None, "the failure key")
        assert inp.label == "failure"
        until(lambda i: i.action is None and i.label is None, "space hands back to the policy")
    finally:
        device.close()


def test_keyboard_without_display_names_fix():
    if importlib.util.find_spec("pynput") is None:
        pytest.skip("pynput is not installed (pip install 'robot-rl[teleop]')")
    code = (
        "from robot_rl.config import InterventionConfig\n"
        "from robot_rl.teleop import make_device\n"
        "from robot_rl.runtime.intervention import DeviceError\n"
        "try:\n"
        "    make_device(InterventionConfig(device='keyboard'), [-1, -1, -1, 0], [1, 1, 1, 1])\n"
        "except DeviceError as e:\n"
        "    print(e)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.startswith("keyboard: pynput has no keyboard backend") and "DISPLAY" in out.stdout, out
