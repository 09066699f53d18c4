"""Flow chunk policy (docs/algorithms.md §2) and observation encoder."""

import pytest
import torch

from robot_rl.config import PolicyConfig
from robot_rl.keys import ENV_STATE, STATE
from robot_rl.policies import FlowChunkPolicy, ObservationEncoder
from robot_rl_testing.fakes import SIM_ACTION_DIM, SIM_OBS_SHAPES, fake_obs, fake_stats

H, D = 5, SIM_ACTION_DIM


def _policy(normalization="quantile", **kw):
    torch.manual_seed(0)
    cfg = PolicyConfig(horizon=H, hidden_dims=[32, 32], normalization=normalization, **kw)
    return FlowChunkPolicy(cfg, SIM_OBS_SHAPES, D, fake_stats())


def test_sample_shapes_and_clipping_to_the_action_box():
    """Samples are clipped to the normalised image of the action box, not to [-1, 1] (the demos' q01..q99),
    so a policy can act beyond the demos' 1-99% range up to the env's limits."""
    policy = _policy()  # no box configured: the data's min/max (U[-2, 3] actions: just beyond q01/q99)
    with torch.no_grad():  # push the velocity field far out so the ODE leaves the box
        policy.velocity[-1].bias.fill_(50.0)
    out = policy.sample(fake_obs(3), num_samples=7)
    assert out.shape == (3, 7, H, D) and out.dtype == torch.float32
    torch.testing.assert_close(out, policy.action_high_norm.expand_as(out))
    torch.testing.assert_close(
        policy.unnormalize_actions(out[0, 0, 0]), torch.as_tensor(fake_stats()["action"].max)
    )
    box = {"action_low": [-10.0] * D, "action_high": [10.0] * D}
    for normalization in ("quantile", "mean_std"):
        wide = _policy(normalization, **box)
        with torch.no_grad():
            wide.velocity[-1].bias.fill_(-500.0)
        actions = wide.unnormalize_actions(wide.sample(fake_obs(2), num_samples=3))
        torch.testing.assert_close(actions, torch.full_like(actions, -10.0))  # far below the demos' q01
    with pytest.raises(ValueError, match="policy.action_low/high must have"):
        _policy(action_low=[0.0], action_high=[1.0])
    with pytest.raises(ValueError, match="action_low > policy.action_high in action dimension 1"):
        _policy(action_low=[0.0] * D, action_high=[1.0, -1.0] + [1.0] * (D - 2))
    with pytest.raises(ValueError, match="cannot represent the action box in dimension 0"):
        _policy(action_low=[float("-inf")] * D, action_high=[1.0] * D)


def test_sample_deterministic_under_fixed_noise():
    policy = _policy()
    obs = fake_obs(2, seed=1)
    noise = torch.randn(2, 4, H, D)
    torch.testing.assert_close(policy.sample(obs, 4, noise), policy.sample(obs, 4, noise))
    with pytest.raises(ValueError, match="noise must have shape"):
        policy.sample(obs, 4, torch.randn(2, 3, H, D))


@pytest.mark.parametrize("mode", ["quantile", "mean_std"])
def test_normalization_round_trip(mode):
    policy = _policy(mode)
    stats = fake_stats()["action"]
    a = -2.0 + 5.0 * torch.rand(6, H, D)
    n = policy.normalize_actions(a)
    torch.testing.assert_close(policy.unnormalize_actions(n), a, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(n, torch.from_numpy(stats.normalize(a.numpy(), mode)), atol=1e-5, rtol=1e-5)
    if mode == "quantile":
        q = torch.from_numpy(stats.q01), torch.from_numpy(stats.q99)
        torch.testing.assert_close(policy.normalize_actions(q[0]), -torch.ones(D))
        torch.testing.assert_close(policy.normalize_actions(q[1]), torch.ones(D))


def test_bc_loss_decreases_on_fixed_dataset():
    torch.manual_seed(0)
    policy = _policy()
    obs = fake_obs(32, seed=3)
    # a deterministic, learnable map from state to chunk, in normalised space
    target = torch.tanh(obs[STATE][:, :D]).unsqueeze(1).expand(32, H, D).contiguous()
    valid = torch.ones(32, H)
    opt = torch.optim.Adam(policy.parameters(), lr=1e-3)
    noise = torch.randn(32, 1, H, D)
    err0 = (policy.sample(obs, 1, noise)[:, 0] - target).abs().mean().item()
    losses = []
    for _ in range(400):
        loss = policy.bc_loss(obs, target, valid)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    first, last = sum(losses[:20]) / 20, sum(losses[-20:]) / 20
    assert last < 0.7 * first, (first, last)
    # sampled chunks move towards the targets (honest bar for 200 steps on CPU)
    err = (policy.sample(obs, 1, noise)[:, 0] - target).abs().mean().item()
    print(f"first {first:.3f} last {last:.3f} err0 {err0:.3f} err {err:.3f}")
    assert err < 0.6 * err0, (err0, err)


def test_bc_loss_masks_invalid_steps():
    policy = _policy()
    obs = fake_obs(4, seed=0)
    a = torch.zeros(4, H, D)
    valid = torch.ones(4, H)
    valid[0] = 0  # sample 0 entirely padded; samples are independent, so its content must not matter
    torch.manual_seed(5)
    base = policy.bc_loss(obs, a, valid)
    a2 = a.clone()
    a2[0] = 1e3
    torch.manual_seed(5)
    torch.testing.assert_close(policy.bc_loss(obs, a2, valid), base)


def test_mismatched_and_missing_obs_raise_naming_key():
    policy = _policy()
    obs = fake_obs(2)
    obs[ENV_STATE] = torch.zeros(2, 9)
    with pytest.raises(ValueError, match=r"observation\.environment_state.*\(2, 9\).*7"):
        policy.sample(obs)
    obs = fake_obs(2)
    del obs[STATE]
    with pytest.raises(ValueError, match=r"observation\.state.*missing"):
        policy.sample(obs)


def test_nan_observation_raises():
    policy = _policy()
    obs = fake_obs(2)
    obs[STATE][1, 3] = float("nan")
    with pytest.raises(ValueError, match=r"observation\.state.*NaN"):
        policy.sample(obs)


def test_nan_output_raises():
    policy = _policy()
    with torch.no_grad():
        policy.velocity[-1].bias.fill_(float("nan"))
    with pytest.raises(ValueError, match="NaN"):
        policy.sample(fake_obs(2))


def test_image_encoder():
    shapes = {STATE: (5,), "observation.images.front": (32, 32, 3)}
    enc = ObservationEncoder(shapes, fake_stats(shapes), image_features=16, hidden=8)
    obs = fake_obs(3, shapes)
    out = enc(obs)
    assert out.shape == (3, enc.out_dim) == (3, 5 + 16)
    obs["observation.images.front"] = obs["observation.images.front"].float()
    with pytest.raises(ValueError, match="uint8"):
        enc(obs)
    obs = fake_obs(3, {STATE: (5,), "observation.images.front": (32, 30, 3)})
    with pytest.raises(ValueError, match=r"observation\.images\.front.*\(3, 32, 30, 3\).*32, 32, 3"):
        enc(obs)
