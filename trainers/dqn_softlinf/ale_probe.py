"""One ALE emulator with the training envs' preprocessing, whose state can be saved and restored.

``AtariVectorEnv`` (the training envs) does not expose its emulators' state, so the held-out
probe runs its own game through ``ale_py.ALEInterface`` with the same preprocessing, done
here in Python: ``frame_skip`` emulator frames per agent step (rewards summed, stopping at
game over), the grayscale screens of the last two frames max-pooled, resized to
``screen_size`` with OpenCV's area interpolation, a stack of the newest ``frame_stack``
frames (zeros before the episode's first), FIRE then no-ops at reset in ALE's order and
range (``reset``), truncation at ``max_episode_frames``. Tests check that its frames equal
``AtariVectorEnv``'s, step for step, on the same actions, and that its resets reach the same
set of start frames.

Sticky actions (Machado et al.) are drawn here, per emulator frame, as ALE draws them: with
probability ``sticky_action_prob`` the frame repeats the action the previous frame executed,
otherwise it takes the agent's action. They are drawn in Python with this env's own
generator (ALE's emulator is run with stickiness off), so that the K redraws of a step
(``successors``) are independent draws reproduced by the probe's seed. ALE 0.12's default
``cloneState()`` does not save ALE's own generator (redraws from one state differ, as a
continuation of ALE's stream, not of anything the snapshot or the seed fixes), and
``cloneState(include_rng=True)`` restores it, so every redraw would repeat the same draws
(on Breakout at probability 0.5, 12 redraws: 2 distinct end frames and 1; a test).

``clone()`` / ``restore()`` save and restore the emulator, the frame stack and the last
executed action, so that the same (state, action) can be stepped ``K`` times:
``successors`` draws ``K`` successors of a stored state. Without sticky actions the emulator
is deterministic and all ``K`` successors are the same.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Snapshot:
    """An emulator state and the frame stack and lives seen at it."""

    ale_state: object
    stack: np.ndarray
    lives: int
    last_action: int


class ALEProbeEnv:
    """A single Atari game, preprocessed as the training envs are, with clone and restore."""

    def __init__(self, cfg, seed: int):
        import ale_py
        from ale_py import roms

        from trainers.dqn_softlinf.envs import ale_rom_name

        self.ale = ale_py.ALEInterface()
        self.ale.setLoggerMode(ale_py.LoggerMode.Error)
        self.ale.setInt("random_seed", int(seed) % 2**31)
        self.ale.setFloat("repeat_action_probability", 0.0)  # drawn in step() instead
        self.sticky = float(cfg.sticky_action_prob)
        self.last_action = 0  # the action the previous emulator frame executed (NOOP at reset)
        self.ale.setInt("frame_skip", 1)
        self.ale.loadROM(roms.get_rom_path(ale_rom_name(cfg.game)))
        self.actions = self.ale.getLegalActionSet() if cfg.full_action_space else self.ale.getMinimalActionSet()
        names = [a.name for a in self.actions]
        self.fire_action = names.index("FIRE") if cfg.fire_reset and "FIRE" in names else None
        self.frame_skip, self.noop_max = cfg.frame_skip, cfg.noop_max
        self.max_frames = cfg.max_episode_frames
        self.size = cfg.screen_size
        self.stack = np.zeros((cfg.frame_stack, cfg.screen_size, cfg.screen_size), np.uint8)
        self.rng = np.random.default_rng(seed)

    @property
    def num_actions(self) -> int:
        return len(self.actions)

    def _frame(self, screens: list[np.ndarray]) -> np.ndarray:
        import cv2

        pooled = np.maximum(screens[-2], screens[-1]) if len(screens) > 1 else screens[-1]
        return cv2.resize(pooled, (self.size, self.size), interpolation=cv2.INTER_AREA)

    def _push(self, frame: np.ndarray) -> None:
        self.stack = np.concatenate([self.stack[1:], frame[None]])

    def reset(self) -> tuple[np.ndarray, int]:
        """A new game as ``AtariVectorEnv`` starts one: FIRE first where the game needs it, then
        ``n - 1`` no-op frames (``n - 0`` without FIRE), ``n`` uniform in ``0 .. noop_max - 1``
        (the FIRE frame counts as one of them); returns (stack, lives)."""
        self.ale.reset_game()
        self.last_action = 0
        fire = self.fire_action is not None
        if fire:
            self.ale.act(self.actions[self.fire_action])
        for _ in range(int(self.rng.integers(0, max(self.noop_max, 1))) - int(fire)):
            self.ale.act(self.actions[0])
            if self.ale.game_over():
                self.ale.reset_game()
        self.stack = np.zeros_like(self.stack)
        self._push(self._frame([self.ale.getScreenGrayscale()]))
        return self.stack.copy(), int(self.ale.lives())

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, int]:
        """One agent step: (stack, unclipped reward, terminated, truncated, lives)."""
        reward, screens = 0.0, []
        for k in range(self.frame_skip):
            if not (self.sticky and self.rng.random() < self.sticky):
                self.last_action = int(action)
            reward += self.ale.act(self.actions[self.last_action])
            if k >= self.frame_skip - 2:
                screens.append(self.ale.getScreenGrayscale())
            if self.ale.game_over():
                break
        if len(screens) == 0:
            screens.append(self.ale.getScreenGrayscale())
        self._push(self._frame(screens))
        terminated = bool(self.ale.game_over())
        truncated = not terminated and self.ale.getEpisodeFrameNumber() >= self.max_frames
        return self.stack.copy(), float(reward), terminated, truncated, int(self.ale.lives())

    def clone(self) -> Snapshot:
        return Snapshot(self.ale.cloneState(), self.stack.copy(), int(self.ale.lives()), self.last_action)

    def restore(self, snap: Snapshot) -> None:
        self.ale.restoreState(snap.ale_state)
        self.stack = snap.stack.copy()
        self.last_action = snap.last_action

    def successors(
        self, snap: Snapshot, action: int, k: int, episodic_life: bool, reward_clip: bool
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``k`` fresh draws of the step from ``snap`` with ``action``: next stacks
        ``(k, stack, h, w)``, rewards (clipped as for training) and done flags (terminal, or a
        lost life with ``episodic_life``), as the TD target sees them. The env's own state is
        put back afterwards."""
        here = self.clone()
        stacks, rewards, dones = [], [], []
        for _ in range(k):
            self.restore(snap)
            stack, r, term, _, lives = self.step(action)
            stacks.append(stack)
            rewards.append(np.clip(r, -1, 1) if reward_clip else r)
            dones.append(term or (episodic_life and life_lost(snap.lives, lives)))
        self.restore(here)
        return np.stack(stacks), np.asarray(rewards, np.float32), np.asarray(dones, bool)


def life_lost(lives, next_lives):
    """A life was lost and the game is not at its last-life sentinel: ``0 < next < lives``.

    Games such as Q*bert report 0 lives for a few frames before the game really ends; counting
    that drop as a lost life would end the TD bootstrap one step early (the same test as the
    usual ``EpisodicLifeEnv``).
    """
    return (next_lives < lives) & (next_lives > 0)
