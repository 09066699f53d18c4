"""Shared fixtures."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_offline_run(tmp_path_factory):
    """A run dir with 6 demos and tiny BC + QC checkpoints (built once per test session)."""
    from online_setup import build_offline_run

    root = tmp_path_factory.mktemp("tiny_offline_run")
    build_offline_run(root)
    return root
