"""The one exception type for bad datasets and replay buffers."""

from __future__ import annotations


class DatasetError(ValueError):
    """A dataset or replay buffer is missing, corrupt or inconsistent, or the caller handed the writer
    bad frames. The message always names the offending file and, where there is one, the feature key."""
