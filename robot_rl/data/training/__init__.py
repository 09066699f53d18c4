"""A LeRobot dataset made ready for chunked training: the training set, frame sources and caches, the
chunked-transition sampler and the worker-process loader."""
