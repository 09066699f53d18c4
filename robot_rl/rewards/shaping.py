"""Critic rewards: potential-based shaping and critic-only reward, offline (whole episodes) and online
(a gymnasium wrapper around any environment, so any actor gets it).

Shaping F_t = gamma * Phi(s_{t+1}) - Phi(s_t) with Phi the critic's progress is policy-invariant (Ng,
Harada & Russell 1999); Robo-Dopamine uses it for the same reason (ALGORITHMS.md §9). Progress itself is
never added to the reward: a policy would learn to hover in high-progress states.
"""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np

from robot_rl.config import RewardConfig
from robot_rl.rewards.base import CriticScoreError, ProgressCritic
from robot_rl.rewards.progress import vlac_step

REWARD_MODES = ("success", "shaped", "critic")


def check_mode(cfg: RewardConfig) -> None:
    """Raises ValueError naming ``reward.mode`` when it is not one of REWARD_MODES."""
    if cfg.mode not in REWARD_MODES:
        raise ValueError(f"reward.mode={cfg.mode!r}; expected one of {REWARD_MODES}")


def shaping_terms(progress: np.ndarray, gamma: float) -> np.ndarray:
    """F_t = gamma * Phi_{t+1} - Phi_t for an episode's progress (T,); (T,) float32.

    The last frame's successor is not recorded, so F_{T-1} = 0 (Phi is taken as constant across the final
    step rather than dropping to 0 at the terminal state, which would punish every success).
    """
    progress = np.asarray(progress, dtype=np.float64)
    terms = np.zeros(len(progress), dtype=np.float32)
    terms[:-1] = gamma * progress[1:] - progress[:-1]
    return terms


def episode_rewards(
    cfg: RewardConfig, progress: np.ndarray, done_prob: np.ndarray, env_reward: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray | None]:
    """Per-frame (next.reward (T,) float32, next.done (T,) bool or None = keep the dataset's) of one episode.

    Row t describes the step from frame t to t+1, so the done head is read on frame t+1 (on the last
    frame for the last row).

    Args:
        cfg: ``mode`` 'shaped' adds ``scale * F_t`` to ``env_reward``; 'critic' ignores ``env_reward``
            and gives ``scale * F_t`` plus 1 where the done head fires; ``critic_done`` then also sets
            next.done from the done head.
        progress: (T,) critic progress Phi in [0, 1].
        done_prob: (T,) done probability of each frame.
        env_reward: (T,) the dataset's reward (required for 'shaped').

    Raises:
        ValueError: unknown mode, 'success' (nothing to label), or 'shaped' without env rewards.
    """
    check_mode(cfg)
    shaping = cfg.scale * shaping_terms(progress, cfg.gamma)
    if cfg.mode == "shaped":
        if env_reward is None:
            raise ValueError("reward.mode=shaped adds shaping to the dataset's next.reward, which it lacks")
        return (np.asarray(env_reward, dtype=np.float32).reshape(-1) + shaping).astype(np.float32), None
    if cfg.mode != "critic":
        raise ValueError("reward.mode=success keeps the env's reward; label with mode shaped or critic")
    fired = np.append(done_prob[1:], done_prob[-1:]) >= cfg.done_threshold
    reward = (shaping + fired).astype(np.float32)
    return reward, (fired if cfg.critic_done else None)


class CriticRewardWrapper(gym.Wrapper):
    """Replace or shape an environment's reward with a progress critic, online, one control step at a time.

    After each step the critic scores (o_t, o_{t+1}) and Phi is advanced with the VLAC rule; the reward is
    the env's reward plus ``scale * (gamma * Phi' - Phi)`` ('shaped'), or that term plus 1 when the done
    head fires ('critic', no success signal reaches the learner). With ``critic_done`` the done head also
    terminates the episode. In 'critic' mode the env's own termination (a simulator's success check) is
    passed on as truncation, so the learner bootstraps there instead of learning from a success signal a
    real robot would not have; only the done head terminates. ``info`` gains ``progress``, ``critic_done``
    and ``env_reward``.

    A non-finite critic score is rejected (``CriticScoreError``): that step gets no critic term, Phi is
    held, a warning is issued and ``info['critic_rejected']`` is True. It is never used as a reward.
    The env's observations must include the critic's keys (single env; wrap each sub-env of a vector env).
    """

    def __init__(
        self, env: gym.Env, critic: ProgressCritic, cfg: RewardConfig, task: str, rule: str = "scale"
    ):
        super().__init__(env)
        check_mode(cfg)
        self.critic, self.cfg, self.task, self.rule = critic, cfg, task, rule
        self.progress = 0.0
        self._last: dict[str, np.ndarray] | None = None
        self.rejected = 0

    def _view(self, obs: dict) -> dict[str, np.ndarray]:
        return {k: np.asarray(obs[k])[None] for k in self.critic.input_keys}

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.progress, self._last = 0.0, self._view(obs)
        info["progress"] = 0.0
        return obs, info

    def step(self, action):
        obs, env_reward, terminated, truncated, info = self.env.step(action)
        if self.cfg.mode == "success":
            return obs, env_reward, terminated, truncated, info
        view = self._view(obs)
        try:
            out = self.critic.predict(self._last, view, self.task)
            delta, done = float(out.delta[0]), float(out.done[0])
            rejected = False
        except CriticScoreError as err:
            warnings.warn(f"critic score rejected, no critic reward this step: {err}", stacklevel=2)
            delta, done, rejected = 0.0, 0.0, True
            self.rejected += 1
        new = vlac_step(self.progress, delta, self.rule)
        term = self.cfg.scale * (self.cfg.gamma * new - self.progress)
        fired = done >= self.cfg.done_threshold
        if self.cfg.mode == "shaped":
            reward = float(env_reward) + term
            terminated = terminated or (self.cfg.critic_done and fired)
        else:
            reward = term + float(fired)
            ended_by_critic = self.cfg.critic_done and fired
            truncated = (truncated or terminated) and not ended_by_critic
            terminated = ended_by_critic
        self.progress, self._last = new, view
        info.update(progress=new, critic_done=fired, env_reward=float(env_reward), critic_rejected=rejected)
        return obs, reward, terminated, truncated, info
