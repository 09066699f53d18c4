"""The policy server's spec tells its clients how many past commands ``observation.prev_action`` holds
(``prev_action_steps``, issue 38 item 4); a spec from a server that predates the field means one."""

from __future__ import annotations

from robot_rl.deploy.policy_protocol import PolicySpec


def test_the_spec_carries_the_command_history_length():
    spec = PolicySpec({"observation.prev_action": (52,)}, (), 15, 26, "ckpt@0", "observation.state", False, 2)
    again = PolicySpec.from_dict(spec.as_dict())
    assert again == spec and again.prev_action_steps == 2
    older = spec.as_dict()
    del older["prev_action_steps"]  # what a server before data.prev_action_steps sends
    assert PolicySpec.from_dict(older).prev_action_steps == 1
