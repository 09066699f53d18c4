"""Recorded edits of online episodes: relabel success/failure, a note, exclude from training.

Recorded frames are never rewritten. An operator's after-the-fact decision about an episode is appended
to the actor's edit log ``<run_dir>/online/<name>_seed<k>/actor<i>/edits.jsonl``, next to the episode
log it edits (``actor<i>/episodes``), one JSON object per line::

    {"time": "2025-01-01T12:00:00.000+00:00", "episode": 3, "set": "label", "value": "success"}

``set`` is ``label`` (``"success"``, ``"failure"`` or ``null``: back to what was recorded), ``note`` (a
string) or ``exclude`` (a bool); ``episode`` is the actor's episode number (its index in the actor's log
and ``runtime.actor_episode`` in the learner's replay). The log is append-only; the newest line per
episode and field wins, so the whole history stays readable.

Reading rules (the commit point is the newline, as ``committed`` is for a zarr buffer): a final line
without its newline is a write still in progress (or cut short by a crash) and is not read; the next
append refuses to write behind it (:class:`EditLogError` names the file), so it is never silently glued
to or lost. Any complete line that is not a valid edit raises :class:`EditLogError` naming the file and
line: a relabel must never be dropped silently, so the learner refuses to start on such a log (and, while
running, keeps the edits it last read and logs the error).

The learner applies the edits (:class:`RunEdits`, :mod:`robot_rl.runtime.replay`): a label sets the last
step's ``next.success``, ``next.done`` and ``next.reward`` exactly as a live label from the intervention
device does (:func:`label_values`); an excluded episode is never sampled. The success and intervention
rates (the learner's metrics and ``summary.json``, the GUI's live panels) count episodes as edited
(:func:`edited_frames`): with their label, excluded ones left out.
"""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl import keys
from robot_rl.data.errors import DatasetError
from robot_rl.runtime.intervention import LABELS

EDITS_FILE = "edits.jsonl"
FIELDS = ("label", "note", "exclude")
MAX_NOTE_CHARS = 4000


class EditLogError(DatasetError):
    """An edit log holds a line that is not a valid edit, or an edit to append is invalid (names the file
    and line). A DatasetError: the CLI reports it as one line."""


def label_values(label: str) -> dict[str, Any]:
    """The last step's values for a human label, the rule of the actor's live label path: ``next.success``
    = ``next.done`` = (label == "success") (bool), ``next.reward`` = 1.0 for success else 0.0 (float32).

    Raises ValueError for a label other than ``success`` / ``failure``."""
    if label not in LABELS:
        raise ValueError(f"label must be one of {LABELS}, got {label!r}")
    success = label == "success"
    return {keys.SUCCESS: success, keys.DONE: success, keys.REWARD: np.float32(1.0 if success else 0.0)}


LABEL_KEYS = (keys.SUCCESS, keys.DONE, keys.REWARD)  # what a label sets on an episode's last step


@dataclass
class EpisodeEdits:
    """The effect of an episode's edits: ``label`` (None = as recorded), ``note``, ``exclude`` and every
    edit line applied, oldest first (``history``)."""

    label: str | None = None
    note: str = ""
    exclude: bool = False
    history: list[dict] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"label": self.label, "note": self.note, "exclude": self.exclude, "history": self.history}


def edited_frames(frames: dict[str, np.ndarray], edits: EpisodeEdits | None) -> dict[str, np.ndarray] | None:
    """An episode's per-step columns as its edits make them: None when it is excluded; else ``frames``
    (T rows per key) with, when it is relabelled, copies of :data:`LABEL_KEYS` whose last step holds
    :func:`label_values` (the other keys and the caller's arrays untouched). ``edits`` None = as
    recorded."""
    if edits is None:
        return frames
    if edits.exclude:
        return None
    if edits.label is None:
        return frames
    out = dict(frames)
    for key, value in label_values(edits.label).items():
        column = np.array(frames[key], copy=True)
        column[-1] = value
        out[key] = column
    return out


def check_edit(episode: Any, name: Any, value: Any) -> str | None:
    """Why ``(episode, name, value)`` is not a valid edit, or None when it is."""
    if isinstance(episode, bool) or not isinstance(episode, int) or episode < 0:
        return f"episode must be an int >= 0, got {episode!r}"
    if name not in FIELDS:
        return f"'set' must be one of {FIELDS}, got {name!r}"
    if name == "label" and value is not None and value not in LABELS:
        return f"a label must be one of {LABELS} or null, got {value!r}"
    if name == "note" and (not isinstance(value, str) or len(value) > MAX_NOTE_CHARS):
        return f"a note must be a string of at most {MAX_NOTE_CHARS} characters"
    if name == "exclude" and not isinstance(value, bool):
        return f"exclude must be true or false, got {value!r}"
    return None


class EditLog:
    """One actor's append-only edit log (``actor<i>/edits.jsonl``); the file need not exist yet."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def read(self) -> list[dict]:
        """Every committed edit, in file order: dicts with ``time``, ``episode``, ``set``, ``value``.

        Raises:
            EditLogError: a complete line is not JSON or not a valid edit (names the file and line)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        lines = data.split(b"\n")[:-1]  # the last piece is "" or an uncommitted partial line
        edits = []
        for number, raw in enumerate(lines, 1):
            try:
                edit = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as err:
                raise EditLogError(
                    f"{self.path}:{number}: not a JSON edit ({err}); repair or delete the line"
                ) from err
            why = (
                check_edit(edit.get("episode"), edit.get("set"), edit.get("value"))
                if isinstance(edit, dict) and isinstance(edit.get("time"), str)
                else "expected an object with time, episode, set and value"
            )
            if why is not None:
                raise EditLogError(f"{self.path}:{number}: {why}; repair or delete the line")
            edits.append(edit)
        return edits

    def state(self) -> dict[int, EpisodeEdits]:
        """Episode number -> its folded edits (only episodes with at least one edit).

        Raises EditLogError as :meth:`read`."""
        out: dict[int, EpisodeEdits] = {}
        for edit in self.read():
            ep = out.setdefault(edit["episode"], EpisodeEdits())
            setattr(ep, edit["set"], edit["value"])
            ep.history.append(edit)
        return out

    def append(self, episode: int, name: str, value: Any) -> dict:
        """Append one edit (durable on return: fsynced) and return it. Writers are serialised with an
        exclusive ``flock`` on the file.

        Raises:
            EditLogError: the edit is invalid, or the file ends in an unterminated line (a write cut
                short; repair it first, nothing is written behind it)."""
        why = check_edit(episode, name, value)
        if why is not None:
            raise EditLogError(f"{self.path}: {why}")
        edit = {
            "time": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "episode": episode,
            "set": name,
            "value": value,
        }
        line = (json.dumps(edit) + "\n").encode()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                raise EditLogError(
                    f"{self.path}: the last line has no newline (a write cut short); repair or delete it "
                    "before new edits are appended"
                )
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)
        return edit


def actor_log(seed_dir: str | Path, actor: int) -> EditLog:
    """The edit log of actor ``actor`` of the online run folder ``seed_dir`` (``online/<name>_seed<k>``)."""
    return EditLog(Path(seed_dir) / f"actor{actor}" / EDITS_FILE)


class RunEdits:
    """Every actor's edit log of one online run folder (``online/<name>_seed<k>``), re-read when a file
    changes (size or mtime), as the learner polls between updates.

    Raises EditLogError (from the constructor) when a log holds an invalid line."""

    def __init__(self, seed_dir: str | Path) -> None:
        self.seed_dir = Path(seed_dir)
        self._stamps: dict[int, tuple[int, int]] = {}
        self.edits: dict[tuple[int, int], EpisodeEdits] = {}  # (actor, actor episode) -> edits
        self.refresh()

    def _logs(self) -> dict[int, Path]:
        out = {}
        for path in self.seed_dir.glob(f"actor*/{EDITS_FILE}"):
            suffix = path.parent.name[len("actor") :]
            if suffix.isdigit():
                out[int(suffix)] = path
        return out

    def refresh(self) -> bool:
        """Re-read the logs that changed since the last call. Returns whether any did.

        Raises EditLogError when a changed log holds an invalid line (the edits read before stay)."""
        stamps = {}
        for actor, path in self._logs().items():
            st = path.stat()
            stamps[actor] = (st.st_size, st.st_mtime_ns)
        changed = {a for a in stamps.keys() | self._stamps.keys() if stamps.get(a) != self._stamps.get(a)}
        if not changed:
            return False
        fresh = {a: actor_log(self.seed_dir, a).state() for a in changed if a in stamps}
        edits = {k: v for k, v in self.edits.items() if k[0] not in changed}
        for actor, state in fresh.items():
            edits.update({(actor, ep): e for ep, e in state.items()})
        self.edits, self._stamps = edits, stamps
        return True

    def get(self, actor: int, episode: int) -> EpisodeEdits | None:
        """The edits of actor ``actor``'s episode ``episode`` (None when it has none)."""
        return self.edits.get((actor, episode))
