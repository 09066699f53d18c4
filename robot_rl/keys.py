"""The field's feature keys, one place (LeRobot naming, docs/design.md §3)."""

STATE = "observation.state"
ENV_STATE = "observation.environment_state"
PREV_ACTION = "observation.prev_action"  # derived: the action of the previous frame (data.prev_action)
IMAGE_PREFIX = "observation.images."
ACTION = "action"
REWARD = "next.reward"
DONE = "next.done"
SUCCESS = "next.success"
INTERVENTION = "complementary_info.is_intervention"
TASK = "task"
TIMESTAMP = "timestamp"
FRAME_INDEX = "frame_index"
EPISODE_INDEX = "episode_index"
INDEX = "index"
TASK_INDEX = "task_index"

# The observation after an episode's last step (gymnasium's ``final_obs``), kept once per episode in the
# replay and episode logs as ``final.<observation key>``: a chunk that reaches a time-limit end bootstraps
# from it (docs/algorithms.md §1). LeRobot datasets have no row for it.
FINAL_PREFIX = "final."

# Each episode's origin, stored in the episodes metadata.
SOURCES = ("demo", "online", "intervention", "eval")


def image_key(camera: str) -> str:
    """``front`` -> ``observation.images.front``."""
    return IMAGE_PREFIX + camera


def is_image_key(key: str) -> bool:
    return key.startswith(IMAGE_PREFIX)


def final_key(key: str) -> str:
    """``observation.state`` -> ``final.observation.state``."""
    return FINAL_PREFIX + key
