"""Critic rewards: potential-based shaping and critic-only reward, offline (whole episodes) and online
(a gymnasium wrapper around any environment, so any actor gets it).

Shaping F_t = gamma * Phi(s_{t+1}) - Phi(s_t) with Phi the critic's progress is policy-invariant (Ng,
Harada & Russell 1999, Theorem 1); Robo-Dopamine uses it for the same reason (docs/algorithms.md §9). Progress
itself is never added to the reward: a policy would learn to hover in high-progress states. Ng's two
conditions hold here:

- **gamma is the learner's own discount** (:func:`shaping_gamma`). With another gamma' every step earns an
  extra (gamma' - gamma) * Phi(s'), a reward for hovering near the goal. For the chunked backup of
  Q-chunking (docs/algorithms.md §1, §3) the per-step gamma is still the right one: the chunk reward
  R_t^(h) = sum_{i<h} gamma^i r_{t+i} of shaped steps carries sum_{i<h} gamma^i F_{t+i} =
  gamma^h Phi(s_{t+h}) - Phi(s_t), exactly potential-based shaping of the h-step problem whose discount is
  the gamma^h of the backup. So no h-step correction is needed, only the same gamma.
- **Phi of the absorbing state is 0**: on a true termination F = -Phi(s_t), so the shaped return telescopes
  to G - Phi(s_0) and no terminal bonus gamma^(T-1) Phi(s_{T-1}) is paid. A time-limit truncation is not
  a termination: the learner bootstraps from the next state there, and F keeps its gamma Phi(s') term.
"""

from __future__ import annotations

import warnings
from typing import get_args

import gymnasium as gym
import numpy as np

from robot_rl.config import PipelineConfig, RewardConfig, RewardMode
from robot_rl.rewards.base import CriticScoreError, ProgressCritic
from robot_rl.rewards.progress import vlac_step

REWARD_MODES: tuple[str, ...] = get_args(RewardMode)


def check_mode(cfg: RewardConfig) -> None:
    """Raises ValueError naming ``reward.mode`` when it is not one of REWARD_MODES."""
    if cfg.mode not in REWARD_MODES:
        raise ValueError(f"reward.mode={cfg.mode!r}; expected one of {REWARD_MODES}")


def shaping_gamma(cfg: PipelineConfig, stage: str = "online") -> float:
    """The discount potential-based shaping must use: the learner's own (Ng et al. 1999; module docstring).

    ``stage`` 'offline' (``robot-rl label``: the labels feed offline RL) gives ``offline.gamma``; 'online'
    gives the online learner's: ``sac.gamma`` for ``online.method=sac``, else ``offline.gamma`` (the QC
    agents and HG-DAgger continue with the offline section's discount).
    """
    return float(cfg.sac.gamma if shaping_gamma_key(cfg, stage) == "sac.gamma" else cfg.offline.gamma)


def shaping_gamma_key(cfg: PipelineConfig, stage: str = "online") -> str:
    """The config key :func:`shaping_gamma` reads: ``'sac.gamma'`` or ``'offline.gamma'``."""
    return "sac.gamma" if stage == "online" and cfg.online.method == "sac" else "offline.gamma"


def shaping_terms(progress: np.ndarray, gamma: float, terminal: np.ndarray | None = None) -> np.ndarray:
    """Ng's potential-based shaping of one episode: (T,) float32 with, for row t (frame t -> t+1),
    ``F_t = gamma * Phi_{t+1} * (1 - terminal_t) - Phi_t`` (Ng, Harada & Russell 1999, eq. 2 with
    Phi(absorbing) = 0).

    Args:
        progress: (T,) Phi of each frame, in [0, 1].
        gamma: the learner's discount (:func:`shaping_gamma`).
        terminal: (T,) bool, True where the step from frame t ends in a true termination (``next.done``);
            None = no termination. A terminal row gets F = -Phi_t.

    The last row's successor frame is not recorded: it gets -Phi_{T-1} when terminal and 0 otherwise. The
    non-terminal case is a time-limit truncation, whose chunks have no recorded next state and are left
    out of the critic loss (``robot_rl.data.training.sampler``), so that value is never bootstrapped from.
    """
    progress = np.asarray(progress, dtype=np.float64)
    n = len(progress)
    ends = np.zeros(n, bool) if terminal is None else np.asarray(terminal, dtype=bool).reshape(-1)
    if len(ends) != n:
        raise ValueError(f"terminal has {len(ends)} rows, progress {n}")
    successor = np.append(progress[1:], 0.0)
    terms = gamma * successor * ~ends - progress
    if not ends[-1]:
        terms[-1] = 0.0
    return terms.astype(np.float32)


def episode_rewards(
    cfg: RewardConfig,
    gamma: float,
    progress: np.ndarray,
    done_prob: np.ndarray,
    env_reward: np.ndarray | None,
    env_done: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Per-frame (next.reward (T,) float32, next.done (T,) bool or None = keep the dataset's) of one episode.

    Row t describes the step from frame t to t+1, so the done head is read on frame t+1 (on the last
    frame for the last row). Shaping uses the rows that end the episode as terminal: the done head's
    when ``critic_done`` sets next.done, else the dataset's ``env_done`` (:func:`shaping_terms`).

    Args:
        cfg: ``mode`` 'shaped' adds ``scale * F_t`` to ``env_reward``; 'critic' ignores ``env_reward``
            and gives ``scale * F_t`` plus 1 where the done head fires; ``critic_done`` then also sets
            next.done from the done head.
        gamma: the learner's discount (:func:`shaping_gamma`).
        progress: (T,) critic progress Phi in [0, 1].
        done_prob: (T,) done probability of each frame.
        env_reward: (T,) the dataset's reward (required for 'shaped').
        env_done: (T,) bool, the dataset's next.done (None = no termination recorded).

    Raises:
        ValueError: unknown mode, 'success' (nothing to label), or 'shaped' without env rewards.
    """
    check_mode(cfg)
    if cfg.mode == "success":
        raise ValueError("reward.mode=success keeps the env's reward; label with mode shaped or critic")
    fired = np.append(done_prob[1:], done_prob[-1:]) >= cfg.done_threshold
    done = fired if cfg.mode == "critic" and cfg.critic_done else None
    terminal = done if done is not None else env_done
    shaping = cfg.scale * shaping_terms(progress, gamma, terminal)
    if cfg.mode == "shaped":
        if env_reward is None:
            raise ValueError("reward.mode=shaped adds shaping to the dataset's next.reward, which it lacks")
        return (np.asarray(env_reward, dtype=np.float32).reshape(-1) + shaping).astype(np.float32), None
    return (shaping + fired).astype(np.float32), done


class CriticRewardWrapper(gym.Wrapper):
    """Replace or shape an environment's reward with a progress critic, online, one control step at a time.

    After each step the critic scores (o_t, o_{t+1}) and Phi is advanced with the VLAC rule; the reward is
    the env's reward plus ``scale * (gamma * Phi' - Phi)`` ('shaped'), or that term plus 1 when the done
    head fires ('critic', no success signal reaches the learner). ``gamma`` must be the learner's discount
    (:func:`shaping_gamma`); on a step that terminates the episode Phi' is the absorbing state's, 0, so the
    term is ``-scale * Phi`` (Ng et al. 1999; on a truncation it keeps ``gamma * Phi'``). With
    ``critic_done`` the done head also terminates the episode. In 'critic' mode the env's own termination
    (a simulator's success check) is passed on as truncation, so the learner bootstraps there instead of
    learning from a success signal a real robot would not have; only the done head terminates. ``info``
    gains ``progress``, ``critic_done`` (and its probability ``critic_done_prob``) and ``env_reward``.

    A non-finite critic score is rejected (``CriticScoreError``): that step gets no critic term, Phi is
    held, a warning is issued and ``info['critic_rejected']`` is True. It is never used as a reward.
    The env's observations must include the critic's keys (single env; wrap each sub-env of a vector env).

    Raises:
        ValueError: ``gamma`` outside (0, 1] or an unknown ``cfg.mode``.
    """

    def __init__(
        self,
        env: gym.Env,
        critic: ProgressCritic,
        cfg: RewardConfig,
        task: str,
        gamma: float,
        rule: str = "scale",
    ):
        super().__init__(env)
        check_mode(cfg)
        if not 0.0 < gamma <= 1.0:
            raise ValueError(f"shaping gamma must be in (0, 1], got {gamma}")
        self.critic, self.cfg, self.task, self.rule, self.gamma = critic, cfg, task, rule, float(gamma)
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
        fired = done >= self.cfg.done_threshold
        ended_by_critic = self.cfg.critic_done and fired
        if self.cfg.mode == "shaped":
            terminated = terminated or ended_by_critic
        else:
            truncated = (truncated or terminated) and not ended_by_critic
            terminated = ended_by_critic
        successor = 0.0 if terminated else new  # Phi(absorbing) = 0
        term = self.cfg.scale * (self.gamma * successor - self.progress)
        reward = term + (float(env_reward) if self.cfg.mode == "shaped" else float(fired))
        self.progress, self._last = new, view
        info.update(
            progress=new,
            critic_done=fired,
            critic_done_prob=done,
            env_reward=float(env_reward),
            critic_rejected=rejected,
        )
        return obs, reward, terminated, truncated, info
