"""Training building blocks shared by the CLI, the online runtime and the benchmarks."""
