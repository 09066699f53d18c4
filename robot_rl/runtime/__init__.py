"""Online RL runtime: actors, a learner, weight sync, interventions and durable replay (DESIGN.md §4)."""
