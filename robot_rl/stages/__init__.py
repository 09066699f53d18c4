"""The main job's stages as library functions (docs/design.md §1): ``collect`` (scripted demos), ``train``
(bc, offline), ``online``, ``evaluate`` and ``pipeline``, which chains them and writes the report.

Each stage reads and writes files in the run directory and records a marker when it finishes, so a rerun
skips it. This package wires the core to the simulators, policies and teleop devices, as the CLI does: it
may import them at module level, and nothing outside ``robot_rl.cli`` imports it at module level.
"""
