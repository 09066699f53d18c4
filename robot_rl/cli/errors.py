"""Errors a user can fix become one line on stderr and a non-zero exit; anything else keeps its traceback.

:func:`explain` maps a known error type to ``(line, exit code)``: a bad config (exit 2), a corrupt or
mismatched checkpoint, a bad dataset, a critic input, an intervention device, a lost peer, an actor id
already in use, a robot or camera error, no working renderer, a missing optional package, a missing file,
and the disk errors (full, read-only, no permission, file too large) with the path and the fix. With
``--debug`` or ``ROBOT_RL_DEBUG=1`` the traceback is shown instead. A known error in a background thread (a
library's writer thread on a full disk) is kept by :class:`ThreadErrors` and reported when the command
ends, not printed as a traceback. Error classes are looked up only among modules already imported: an
error of a class whose module was never imported cannot have been raised, so this module imports nothing
heavy.
"""

from __future__ import annotations

import errno
import os
import sys
import threading
from collections.abc import Callable

# (module, class name, what the line starts with, exit code), most specific first
KNOWN = (
    ("robot_rl.config", "ConfigError", "config error", 2),
    ("robot_rl.checkpoint", "CheckpointError", "checkpoint error", 1),
    ("robot_rl.policies.encoders", "UnknownTaskError", "policy error", 1),
    ("robot_rl.policies.vla.policy", "InstructionError", "policy error", 1),
    ("robot_rl.executor", "ChunkError", "policy error", 1),
    ("robot_rl.algos.base", "NonFiniteChunkError", "policy error", 1),
    ("robot_rl.policies.vla.backbone", "VLMLoadError", "VLA backbone error", 1),
    ("robot_rl.data.errors", "DatasetError", "dataset error", 1),
    ("robot_rl.rewards.base", "CriticInputError", "critic error", 1),
    ("robot_rl.rewards.base", "CriticScoreError", "critic error", 1),
    ("robot_rl.runtime.intervention", "DeviceError", "intervention device error", 1),
    ("robot_rl.transport", "PeerUnavailableError", "connection error", 1),
    ("robot_rl.transport", "ProtocolError", "connection error", 1),
    ("robot_rl.sim.gl_env", "RendererError", "renderer error", 1),
    ("robot_rl.extras", "MissingExtraError", "missing optional package", 1),
    ("robot_rl.runtime.weights", "NonFiniteWeightsError", "training diverged", 1),
    ("robot_rl.runtime.actor", "PolicyFaultError", "policy fault", 1),
    ("robot_rl.runtime.actor", "RejectedEpisodesError", "episodes rejected", 1),
    ("robot_rl.runtime.local", "ActorFaultError", "actor fault", 1),
    ("robot_rl.runtime.learner", "ActorsFaultedError", "actor fault", 1),
    ("robot_rl.runtime.link", "ActorIdError", "actor id clash", 1),
    ("robot_rl.hardware.errors", "HardwareError", "hardware error", 1),
    ("robot_rl.deploy.policy_protocol", "PolicyInputError", "policy server error", 1),
    ("robot_rl.deploy.policy_protocol", "PolicyTokenError", "policy server error", 1),
)

DISK_FIXES = {
    errno.ENOSPC: "the disk is full: free space or point --run_dir at another disk",
    errno.EDQUOT: "the disk quota is exceeded: free space or point --run_dir at another disk",
    errno.EFBIG: "the file grew past the size limit (ulimit -f or the file system's): raise the limit or "
    "point --run_dir at another disk",
    errno.EROFS: "the file system is read-only: point --run_dir at a writable folder",
    errno.EACCES: "permission denied: make it writable by this user or point --run_dir elsewhere",
    errno.EPERM: "operation not permitted: make it writable by this user or point --run_dir elsewhere",
}


def debug_enabled(flag: bool = False) -> bool:
    """True when tracebacks are wanted: ``--debug`` was given or ``ROBOT_RL_DEBUG`` is set to a true value."""
    return flag or os.environ.get("ROBOT_RL_DEBUG", "").strip().lower() in ("1", "true", "yes", "on")


def _one_line(text: str) -> str:
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())


def explain(err: BaseException, run_dir: str | None = None) -> tuple[str, int] | None:
    """``(one line for stderr, exit code)`` for a known, user-fixable error; None for anything else.
    ``run_dir`` is named for a disk error that does not carry its path."""
    for module, name, label, code in KNOWN:
        cls = getattr(sys.modules.get(module), name, None)
        if cls is not None and isinstance(err, cls):
            return f"robot-rl: {label}: {_one_line(err)}", code
    if isinstance(err, OSError) and err.errno in DISK_FIXES:
        where = err.filename if err.filename is not None else f"a file under run_dir {run_dir}"
        return f"robot-rl: disk error: {where}: {err.strerror}; {DISK_FIXES[err.errno]}", 1
    if isinstance(err, FileNotFoundError):
        return f"robot-rl: file not found: {_one_line(err)}", 1
    return None


def run_server(serve: Callable[[], None], debug: bool = False) -> int:
    """Run a long-lived server command (``serve``, ``gui``) until it returns or Ctrl-C; returns the exit code:
    0, or a known error's code after printing its one line (an unknown error, or ``--debug``, re-raises)."""
    try:
        serve()
    except KeyboardInterrupt:
        pass
    except Exception as err:
        code = report(err, debug=debug)
        if code is None:
            raise
        return code
    return 0


def report(err: BaseException, debug: bool = False, run_dir: str | None = None) -> int | None:
    """Print the one-line form of ``err`` and return its exit code; None (the caller re-raises, for a
    traceback) when ``err`` is unknown or debugging is on."""
    explained = None if debug_enabled(debug) else explain(err, run_dir)
    if explained is None:
        return None
    line, code = explained
    print(line, file=sys.stderr)
    return code


class ThreadErrors:
    """Context manager: while active (and not debugging), a known error that ends a background thread is
    kept in ``errors`` instead of printing a traceback; unknown ones go to the previous hook."""

    def __init__(self, debug: bool = False) -> None:
        self.debug = debug_enabled(debug)
        self.errors: list[BaseException] = []
        self._previous = threading.excepthook

    def _hook(self, args: threading.ExceptHookArgs) -> None:
        if args.exc_value is not None and explain(args.exc_value) is not None:
            self.errors.append(args.exc_value)
        else:
            self._previous(args)

    def __enter__(self) -> ThreadErrors:
        if not self.debug:
            threading.excepthook = self._hook
        return self

    def __exit__(self, *exc) -> None:
        threading.excepthook = self._previous
