"""Online RL runtime: actors, a learner, weight sync, interventions and durable replay (docs/design.md §4)."""
