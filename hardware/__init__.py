"""Hardware: Robot / Camera interfaces and drivers (filled by the hardware issues)."""
