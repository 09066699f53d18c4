"""robot_rl: reinforcement learning on real robots, sim and real on one code path."""
