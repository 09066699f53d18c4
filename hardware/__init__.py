"""Hardware: the ``Robot`` and ``Camera`` interfaces, drivers (behind extras, imported lazily), the safety
layer, the MuJoCo-backed robot server, ``RobotEnv`` and the policy server."""
