"""Folders the tests read from, the same at every depth of the mirrored test tree (tests/README.md): a test
names these instead of counting ``Path(__file__).parents``, which changes when a test file moves."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
"""``tests/``: the root conftest and the shared helper modules (``online_setup``, ``tiny_vlm``, the peers)."""

ROOT = TESTS.parent
"""The repository's root: ``configs/``, ``launch/``, ``benchmarks/``, ``docs/``, the packages."""

LEROBOT_FIXTURES = ROOT.parent / "shared" / "fixtures" / "lerobot"
"""Datasets LeRobot itself wrote (the G1 episodes as v3.0 and v2.1), in the project's shared folder beside
the checkout."""
