"""Teleoperation devices and the intervention GUI (filled by the human-in-the-loop issue)."""
