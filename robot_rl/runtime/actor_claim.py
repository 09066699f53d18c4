"""One live actor per actor folder: a lock held for the actor's life, and the id its episode log is known by.

``<online dir>/actor<k>/`` holds actor k's episode log. :func:`claim_folder` takes an exclusive ``flock`` on
its ``lock`` file (released by the kernel when the process ends, so an actor killed and restarted takes it
back at once); a second actor process on the same folder is refused before it opens the log. The
:func:`log_id` (``link_id``, written once) is what the learner binds the actor id to
(:mod:`robot_rl.runtime.link`): the same folder on another start is the same actor. It is no secret: what
proves a request comes from the run is the learner's run token (or a CURVE key), not this id.
"""

from __future__ import annotations

import fcntl
import os
import uuid
from pathlib import Path
from typing import IO

from robot_rl.runtime.link import ActorIdError

LOCK_FILE = "lock"
ID_FILE = "link_id"


def claim_folder(folder: Path, actor_id: int) -> IO[str]:
    """Lock ``folder`` (created if absent) for this process; keep the returned file open while acting
    (closing it releases the lock). The file holds this process's pid.

    Raises:
        ActorIdError: another live process holds the folder (names the folder and its pid).
    """
    folder.mkdir(parents=True, exist_ok=True)
    lock = open(folder / LOCK_FILE, "a+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        holder = lock.read().strip() or "unknown"
        lock.close()
        raise ActorIdError(
            f"actor {actor_id}: {folder} is in use by another running actor process (pid {holder}); "
            "start this one with another --actor-id, or stop the other one first"
        ) from None
    lock.truncate(0)
    lock.write(f"{os.getpid()}\n")
    lock.flush()
    return lock


def log_id(folder: Path) -> str:
    """The id of the episode log in ``folder`` (32 hex digits), made on the first call and kept in
    ``folder/link_id`` (written to a temporary file first, so a reader never sees half of it)."""
    path = folder / ID_FILE
    if not path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / (ID_FILE + ".tmp")
        tmp.write_text(uuid.uuid4().hex)
        os.replace(tmp, path)
    return path.read_text().strip()
