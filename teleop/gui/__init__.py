"""The human-in-the-loop web GUI (FastAPI): live actor panels, the episode browser and the learner view.

``history.history_router(run_dir)`` serves the after-the-fact pages (``/episodes``, ``/learner``) and
their JSON routes under ``/api/history``; ``auth.require_token`` guards every route.
"""
