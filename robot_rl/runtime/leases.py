"""The run's env-step budget as per-actor leases: ``online.env_steps`` bounds the whole run across every
actor, with the learner up or down (issue 39).

A *lease* is a cumulative allowance of env steps: actor k may hold at most that many steps in its episode
log (``actor<k>/episodes``, every episode it ever logged in this run), less the steps of episodes the
learner rejected (robot_rl.runtime.episode_guard: acknowledged, never stored, so they count for neither
side; without that, rejected steps would use up leases the budget counts as stored-to-come, and the run
would never end). The learner grants leases
(:class:`Leases`) and hands them out in the ``status`` of every reply (``status["leases"]``, actor id as a
string -> steps); an actor keeps its last one on disk (:class:`ActorLease`) and never logs a step past it:
it starts an episode only while it has room, and an episode in flight is cut where the lease ends (logged
as truncated with its final observation, like one at ``max_episode_steps``). With the learner down an actor
acts until its lease is spent, then only delivers.

Size policy (:meth:`Leases.renew`): on every reply, each actor that has said hello (and not bye) is topped
up to ``its stored steps + max(window, ceil(left / (2 N)))``, as far as the budget not yet granted allows;
``window`` = 2 * ``max_episode_steps`` * ``envs_per_actor`` (an episode in flight per env plus one being
delivered), ``left`` = the budget's steps not yet stored, N = max(``online.num_actors``, actors known). So
a lease is renewed as the learner acknowledges steps, no actor holds more than about half of its share of
what is left, and the grants never exceed the budget in sum: the run logs at most ``online.env_steps``
steps over all actors. Grants are written to ``leases.json`` (atomically) before a reply carries them, so a
restarted learner never grants a step twice. An actor's ``bye`` hands back its unspent lease.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path

from robot_rl.config import ConfigError
from robot_rl.run_dir import write_json_atomic

LEASE_FILE = "leases.json"


def _read_json(path: Path, what: str) -> dict:
    """The JSON object in ``path`` ({} when there is no such file).

    Raises:
        ConfigError: the file is not a JSON object (names it and ``what`` to do)."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ConfigError(f"{path}: unreadable lease file ({err}); {what}") from err
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: not a lease file (a JSON object); {what}")
    return data


class Leases:
    """The learner's leases for run folder ``folder`` (``<folder>/leases.json``): actor id -> env steps it
    may log in all, never more than ``budget`` (``online.env_steps``) in sum. Not thread-safe: the learner
    calls it with its lock held.

    Args:
        folder: the learner's run folder (``online/<name>_seed<k>``).
        budget: the run's env steps over all actors.
        num_actors: actors the run expects (``online.num_actors``; more may join).
        window: the smallest lease beyond an actor's stored steps (module docstring).

    Raises:
        ConfigError: ``leases.json`` exists but cannot be read (names the file).
    """

    def __init__(self, folder: Path, budget: int, num_actors: int, window: int) -> None:
        self.path = Path(folder) / LEASE_FILE
        self.budget, self.num_actors, self.window = budget, num_actors, window
        saved = _read_json(self.path, "delete it only together with the run's online folder")
        self.granted: dict[int, int] = {int(k): int(v) for k, v in saved.get("granted", {}).items()}

    def held(self, stored: dict[int, int]) -> dict[int, int]:
        """Steps each known actor holds or may still log: its lease, or its stored steps if more (steps
        logged before leases existed, or sent after a bye)."""
        return {k: max(self.granted.get(k, 0), stored.get(k, 0)) for k in {*self.granted, *stored}}

    def renew(self, active: Iterable[int], stored: dict[int, int]) -> None:
        """Top up the leases of the ``active`` actors (module docstring); ``stored``: env steps the replay
        holds per actor. Writes ``leases.json`` before returning when a lease changed.

        Raises:
            OSError: ``leases.json`` cannot be written (names it)."""
        active = sorted(active)
        held = self.held(stored)
        free = self.budget - sum(held.values())
        left = max(0, self.budget - sum(stored.values()))
        actors = max(self.num_actors, len({*held, *active}))
        quota = max(self.window, math.ceil(left / (2 * actors)))
        changed = False
        for k in active:
            have = held.get(k, 0)
            lease = max(have, min(stored.get(k, 0) + quota, have + max(free, 0)))
            free -= lease - have
            if self.granted.get(k) != lease:
                self.granted[k], changed = lease, True
        if changed:
            self._save()

    def release(self, actor: int, stored: int) -> None:
        """``actor`` said bye: its lease shrinks to the ``stored`` steps the replay holds of it, and the
        rest returns to the budget.

        Raises:
            OSError: ``leases.json`` cannot be written (names it)."""
        if self.granted.get(actor, stored) != stored:
            self.granted[actor] = stored
            self._save()

    def as_status(self) -> dict[str, int]:
        """The leases as they travel in a reply's ``status``: actor id as a string -> steps."""
        return {str(k): v for k, v in sorted(self.granted.items())}

    def _save(self) -> None:
        write_json_atomic(self.path, {"budget": self.budget, "granted": self.as_status()})


class ActorLease:
    """An actor's copy of its lease (``steps``) and of the steps of its episodes the learner rejected
    (``rejected``), kept in ``<actor folder>/lease.json`` so an actor restarted while the learner is down
    goes on with them (0 before the learner granted a lease).

    Raises:
        ConfigError: ``lease.json`` exists but cannot be read (names the file)."""

    def __init__(self, folder: Path) -> None:
        self.path = Path(folder) / "lease.json"
        saved = _read_json(self.path, "delete it: the learner grants the lease again")
        self.steps, self.rejected = int(saved.get("steps", 0)), int(saved.get("rejected", 0))

    def set(self, steps: int) -> None:
        """Keep ``steps`` as the lease (written before it is used).

        Raises:
            OSError: ``lease.json`` cannot be written (names it)."""
        if steps != self.steps:
            self._save(steps, self.rejected)

    def reject(self, steps: int) -> None:
        """Count ``steps`` more steps of episodes the learner rejected (written before it is used).

        Raises:
            OSError: ``lease.json`` cannot be written (names it)."""
        self._save(self.steps, self.rejected + steps)

    def _save(self, steps: int, rejected: int) -> None:
        write_json_atomic(self.path, {"steps": steps, "rejected": rejected})
        self.steps, self.rejected = steps, rejected
