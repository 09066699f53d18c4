"""The human-in-the-loop web GUI (``robot-rl gui``; ``robot-rl online --intervention.device=gui``).

- :mod:`~robot_rl.teleop.gui.app`: the FastAPI app (:func:`create_app`): the live page, the browsers'
  websocket ``/ws/ui`` and the actors' websocket ``/ws/actor/{k}``;
- :mod:`~robot_rl.teleop.gui.hub`: the server-side state every browser tab shares (actors' latest status
  and frames, who drives, the latched e-stop);
- :mod:`~robot_rl.teleop.gui.device`: the actor-side intervention device ``gui`` that streams the actor's
  cameras and status to the server and applies the operator's commands;
- :mod:`~robot_rl.teleop.gui.server`: serving the app with uvicorn, standalone or as a child process of
  ``robot-rl online``;
- :mod:`~robot_rl.teleop.gui.history`: the episode browser (``/episodes``), the learner view (``/learner``)
  and their JSON routes under ``/api/history`` (recorded edits: relabel, note, exclude);
- :mod:`~robot_rl.teleop.gui.auth`: the token check every route and websocket uses;
- :mod:`~robot_rl.teleop.gui.bind`: where the server may listen (off loopback only with a token).

Nothing here is imported by the core runtime; the actor reaches the device through
``robot_rl.teleop.make_device``.
"""
