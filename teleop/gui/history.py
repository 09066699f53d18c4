"""After-the-fact review: the episode browser (``/episodes``), the learner view (``/learner``) and their JSON
routes under ``/api/history``.

Reads a run dir as the online runtime writes it: each actor's episode log
``online/<name>_seed<k>/actor<i>/episodes`` (a :class:`~robot_rl.data.replay.ZarrReplayBuffer`, opened
per request so new episodes show up), the learner's metric CSVs ``logs/online_*.csv`` and each run's
``summary.json``. Relabels, notes and exclusions are appended to the actor's edit log
(:mod:`robot_rl.runtime.episode_edits`); the learner's replay applies them, nothing recorded is rewritten.

Routes (all behind :func:`~robot_rl.teleop.gui.auth.require_token`):

- ``GET /api/history/actors``: ``[{"run", "actor", "episodes", "steps", "cameras"}]``;
- ``GET /api/history/actors/{run}/{actor}/episodes``: one row per episode (``episode``, ``steps``,
  ``recorded_success``, ``success`` (with the label applied), ``intervention_steps``, ``return``, ``label``,
  ``note``, ``exclude``);
- ``GET .../episodes/{episode}``: the row plus per-step ``reward`` and ``success``, ``interventions``
  (``[start, end)`` step spans a human drove), ``cameras`` and the edit ``history``;
- ``GET .../episodes/{episode}/frames/{camera}/{step}.jpg``: one recorded camera frame as JPEG;
- ``POST .../episodes/{episode}/label`` ``{"label": "success" | "failure" | null}``, ``.../note``
  ``{"note": str}``, ``.../exclude`` ``{"exclude": bool}``: append an edit, return the episode row;
- ``GET /api/history/learner``: per metrics CSV ``{"name", "columns": {column: [float | null]},
  "summary": summary.json or null}``.

An unknown run, actor, episode, camera or step is a 404 naming it; a bad edit body a 422.
"""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path
from typing import Literal

import numpy as np
from fastapi import APIRouter, Depends, HTTPException, Request, Response
from fastapi.responses import FileResponse
from pydantic import BaseModel, Field, StrictBool

from robot_rl import keys
from robot_rl.data.errors import DatasetError
from robot_rl.data.replay import ZarrReplayBuffer
from robot_rl.runtime.episode_edits import MAX_NOTE_CHARS, EditLog, EpisodeEdits, actor_log
from robot_rl.teleop.gui.auth import page_response, require_token

STATIC = Path(__file__).parent / "static"
PAGES = {"/episodes": "episodes.html", "/learner": "learner.html"}
ASSETS = ("history.css", "plot.js", "episodes.js", "learner.js")
_RUN = re.compile(r"^online_\w+_seed\d+$")
_ACTOR = re.compile(r"^actor\d+$")
_ROW_KEYS = (keys.SUCCESS, keys.INTERVENTION, keys.REWARD)


class LabelEdit(BaseModel):
    label: Literal["success", "failure"] | None


class NoteEdit(BaseModel):
    note: str = Field(max_length=MAX_NOTE_CHARS)


class ExcludeEdit(BaseModel):
    exclude: StrictBool


def _spans(flags: np.ndarray) -> list[list[int]]:
    """``[start, end)`` runs of True in a bool (T,) array."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], flags.astype(np.int8), [0]])))
    return edges.reshape(-1, 2).tolist()


def _finite(value: str) -> float | None:
    try:
        x = float(value)
    except ValueError:
        return None
    return x if math.isfinite(x) else None


class _Actor:
    """One actor's episode log and edit log, read for one request."""

    def __init__(self, run_dir: Path, run: str, actor: str) -> None:
        seed_dir = run_dir / "online" / run
        path = seed_dir / actor / "episodes"
        if not (_RUN.match(run) and _ACTOR.match(actor) and (path / "zarr.json").is_file()):
            raise HTTPException(404, f"no actor {actor!r} of run {run!r} with an episode log in {run_dir}")
        try:
            self.log = ZarrReplayBuffer(path)
        except DatasetError as err:
            raise HTTPException(500, str(err)) from err
        self.edits: EditLog = actor_log(seed_dir, int(actor[len("actor") :]))
        self.cameras = [k[len(keys.IMAGE_PREFIX) :] for k in self.log.spec if keys.is_image_key(k)]

    def bounds(self, episode: int) -> tuple[int, int]:
        if not 0 <= episode < self.log.num_episodes:
            raise HTTPException(
                404, f"no episode {episode} in {self.log.path} (it has {self.log.num_episodes})"
            )
        ends = self.log.episode_ends
        return (int(ends[episode - 1]) if episode else 0), int(ends[episode])

    def column(self, key: str, start: int = 0, end: int | None = None) -> np.ndarray:
        return np.asarray(self.log.zarr_arrays()[key][start : len(self.log) if end is None else end])

    def state(self) -> dict[int, EpisodeEdits]:
        try:
            return self.edits.state()
        except DatasetError as err:
            raise HTTPException(500, str(err)) from err

    def rows(self) -> list[dict]:
        ends = self.log.episode_ends
        if not len(ends):
            return []
        cols = {k: self.column(k) for k in _ROW_KEYS}
        state = self.state()
        out = []
        for ep, (lo, hi) in enumerate(zip(np.r_[0, ends[:-1]].tolist(), ends.tolist(), strict=True)):
            out.append(
                self.row(ep, hi - lo, *(cols[k][lo:hi] for k in cols), state.get(ep) or EpisodeEdits())
            )
        return out

    @staticmethod
    def row(ep: int, steps: int, success, interv, reward, edits: EpisodeEdits) -> dict:
        recorded = bool(np.any(success))
        return {
            "episode": ep,
            "steps": steps,
            "recorded_success": recorded,
            "success": recorded if edits.label is None else edits.label == "success",
            "intervention_steps": int(np.sum(interv)),
            "return": float(np.sum(reward)),
            "label": edits.label,
            "note": edits.note,
            "exclude": edits.exclude,
        }

    def detail(self, episode: int) -> dict:
        lo, hi = self.bounds(episode)
        success, interv, reward = (self.column(k, lo, hi) for k in _ROW_KEYS)
        edits = self.state().get(episode) or EpisodeEdits()
        return {
            **self.row(episode, hi - lo, success, interv, reward, edits),
            "reward": reward.astype(float).tolist(),
            "step_success": success.astype(bool).tolist(),
            "interventions": _spans(interv.astype(bool)),
            "cameras": self.cameras,
            "history": edits.history,
        }

    def frame(self, episode: int, camera: str, step: int) -> bytes:
        lo, hi = self.bounds(episode)
        if camera not in self.cameras:
            raise HTTPException(404, f"no camera {camera!r} in {self.log.path} (it has {self.cameras})")
        if not 0 <= step < hi - lo:
            raise HTTPException(404, f"no step {step} in episode {episode} ({hi - lo} steps)")
        import cv2

        rgb = np.asarray(self.log.zarr_arrays()[keys.image_key(camera)][lo + step])
        ok, jpeg = cv2.imencode(".jpg", np.ascontiguousarray(rgb[..., ::-1]), [cv2.IMWRITE_JPEG_QUALITY, 90])
        if not ok:
            raise HTTPException(500, f"could not encode step {step} of camera {camera!r} as JPEG")
        return jpeg.tobytes()

    def edit(self, episode: int, name: str, value) -> dict:
        self.bounds(episode)
        try:
            self.edits.append(episode, name, value)
        except DatasetError as err:  # a damaged log: nothing is written behind it
            raise HTTPException(409, str(err)) from err
        return self.detail(episode)


def _actors(run_dir: Path) -> list[dict]:
    out = []
    online = run_dir / "online"
    for seed_dir in sorted(online.iterdir()) if online.is_dir() else []:
        for path in sorted(seed_dir.glob("actor*/episodes/zarr.json")):
            actor = path.parent.parent.name
            if _RUN.match(seed_dir.name) and _ACTOR.match(actor):
                a = _Actor(run_dir, seed_dir.name, actor)
                out.append(
                    {
                        "run": seed_dir.name,
                        "actor": actor,
                        "episodes": a.log.num_episodes,
                        "steps": len(a.log),
                        "cameras": a.cameras,
                    }
                )
    return out


def _learner(run_dir: Path) -> list[dict]:
    out = []
    for path in sorted((run_dir / "logs").glob("online_*.csv")):
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        columns = {k: [_finite(r.get(k) or "") for r in rows] for k in (rows[0] if rows else {})}
        summary_path = run_dir / "online" / path.stem / "summary.json"
        summary = json.loads(summary_path.read_text()) if summary_path.is_file() else None
        out.append({"name": path.stem, "columns": columns, "summary": summary})
    return out


def _page(path: Path):
    """A page route serving ``path`` (:func:`~robot_rl.teleop.gui.auth.page_response`)."""

    def serve(request: Request) -> FileResponse:
        return page_response(request, path)

    return serve


def history_router(run_dir: Path) -> APIRouter:
    """The episode browser, the learner view and their JSON routes for ``run_dir`` (see the module
    docstring), every route behind ``require_token``."""
    run_dir = Path(run_dir)
    router = APIRouter(dependencies=[Depends(require_token)])
    episode_path = "/api/history/actors/{run}/{actor}/episodes/{episode}"

    @router.get("/api/history/actors")
    def actors() -> list[dict]:
        return _actors(run_dir)

    @router.get("/api/history/actors/{run}/{actor}/episodes")
    def episodes(run: str, actor: str) -> list[dict]:
        return _Actor(run_dir, run, actor).rows()

    @router.get(episode_path)
    def episode(run: str, actor: str, episode: int) -> dict:
        return _Actor(run_dir, run, actor).detail(episode)

    @router.get(episode_path + "/frames/{camera}/{step}.jpg")
    def frame(run: str, actor: str, episode: int, camera: str, step: int) -> Response:
        jpeg = _Actor(run_dir, run, actor).frame(episode, camera, step)
        return Response(jpeg, media_type="image/jpeg", headers={"Cache-Control": "private, max-age=3600"})

    @router.post(episode_path + "/label")
    def label(run: str, actor: str, episode: int, body: LabelEdit) -> dict:
        return _Actor(run_dir, run, actor).edit(episode, "label", body.label)

    @router.post(episode_path + "/note")
    def note(run: str, actor: str, episode: int, body: NoteEdit) -> dict:
        return _Actor(run_dir, run, actor).edit(episode, "note", body.note)

    @router.post(episode_path + "/exclude")
    def exclude(run: str, actor: str, episode: int, body: ExcludeEdit) -> dict:
        return _Actor(run_dir, run, actor).edit(episode, "exclude", body.exclude)

    @router.get("/api/history/learner")
    def learner() -> list[dict]:
        return _learner(run_dir)

    for route, page in PAGES.items():
        router.add_api_route(route, _page(STATIC / page), methods=["GET"], include_in_schema=False)

    @router.get("/history/static/{name}")
    def asset(name: str) -> FileResponse:
        if name not in ASSETS:
            raise HTTPException(404, f"no GUI asset {name!r}")
        return FileResponse(STATIC / name)

    return router
