"""Continuous mountain car: environment factory, initial states and a keyboard demonstration recorder.

The simulator is gymnasium's ``MountainCarContinuous-v0``
(``gymnasium/envs/classic_control/continuous_mountain_car.py``; Moore 1990). Its constants and
dynamics, per step with ``a`` the action::

    force    = clip(a, -1, 1)
    v       <- clip(v + 0.0015 force - 0.0025 cos(3 x), -0.07, 0.07)
    x       <- clip(x + v, -1.2, 0.6);  v <- 0 if x == -1.2 and v < 0
    terminal : x >= 0.45 and v >= 0
    reward   = 100 [terminal] - 0.1 a^2     (a unclipped)
    reset    : x ~ U(-0.6, -0.4), v = 0;  time limit 999 steps (gymnasium's registration)

The observation is ``(x, v)`` (float32 in gymnasium; stored here as float64).

Recording demonstrations (paper §6, "Human Demonstrated Data"; the original recorder mapped 'a'
to -1, 'd' to +1 and anything else to 0): :func:`record_episode` drives the environment from a
:class:`KeySource`. :class:`TerminalKeys` reads raw key presses from a terminal (termios, no
curses); scripted sources (:class:`ScriptedKeys`) make the recorder testable without one. Keys:
left arrow / ``a`` push -1, right arrow / ``d`` push +1, ``s``, down arrow or space push 0, no key
gives 0, ``q`` quits. A terminal reports presses, not releases, so holding a key relies on the
terminal's key repeat; ``hold_steps`` keeps a push alive for that many steps after the last
press to bridge the repeat gaps.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:  # pragma: no cover - typing only
    import gymnasium as gym

    from nopg.data.dataset import TransitionDataset

__all__ = [
    "GOAL_POSITION",
    "KEY_ACTIONS",
    "MAX_EPISODE_STEPS",
    "MOUNTAINCAR_ENV_ID",
    "KeySource",
    "KeyboardController",
    "ScriptedKeys",
    "TerminalKeys",
    "collect_demonstrations",
    "make_mountaincar_env",
    "record_episode",
    "render_ascii",
    "reset_states",
]

MOUNTAINCAR_ENV_ID = "MountainCarContinuous-v0"
"""The gymnasium id of the continuous mountain car."""

MAX_EPISODE_STEPS = 999
"""gymnasium's registered time limit of ``MountainCarContinuous-v0``."""

GOAL_POSITION = 0.45
"""Goal position (``goal_position`` in gymnasium's ``continuous_mountain_car.py``)."""

MIN_POSITION, MAX_POSITION, MAX_SPEED = -1.2, 0.6, 0.07
"""Position bounds and speed limit (gymnasium's ``continuous_mountain_car.py``)."""

KEY_ACTIONS: dict[str, float] = {"left": -1.0, "a": -1.0, "right": 1.0, "d": 1.0,
                                 "s": 0.0, "down": 0.0, "space": 0.0}
"""Key name -> action. ``q`` (quit) is handled separately; unknown keys are ignored."""

QUIT_KEY = "q"


def make_mountaincar_env(max_episode_steps: int = MAX_EPISODE_STEPS,
                         render_mode: str | None = None) -> gym.Env:
    """gymnasium's ``MountainCarContinuous-v0`` with a time limit.

    Parameters
    ----------
    max_episode_steps : int, default=999
        Time limit (gymnasium's registration uses 999).
    render_mode : str or None
        Passed to ``gymnasium.make``.

    Raises
    ------
    ValueError
        If ``max_episode_steps`` is not a positive int.
    """
    if (isinstance(max_episode_steps, bool) or not isinstance(max_episode_steps, (int, np.integer))
            or max_episode_steps < 1):
        raise ValueError(f"The 'max_episode_steps' parameter must be a positive int. "
                         f"Got {max_episode_steps!r}.")
    import gymnasium as gym

    return gym.make(MOUNTAINCAR_ENV_ID, max_episode_steps=int(max_episode_steps),
                    render_mode=render_mode)


def reset_states(n: int, seed: int) -> np.ndarray:
    """``n`` initial observations from ``env.reset(seed=seed + k)``, ``k = 0..n-1``, shape (n, 2).

    They follow the environment's own start distribution, ``x ~ U(-0.6, -0.4)``, ``v = 0``.
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"The 'n' parameter must be a positive int. Got {n!r}.")
    env = make_mountaincar_env()
    try:
        return np.stack([np.asarray(env.reset(seed=int(seed) + k)[0], dtype=np.float64)
                         for k in range(int(n))])
    finally:
        env.close()


# ----------------------------------------------------------------------------- key sources
class KeySource(Protocol):
    """Something that reports the keys pressed since its last call (non-blocking)."""

    def read(self) -> list[str]: ...


class ScriptedKeys:
    """A key source replaying a script: one entry per environment step.

    Parameters
    ----------
    script : iterable of str, sequence of str, or None
        Entry ``t`` is the keys pressed before step ``t``: a key name (``"right"``), a sequence
        of names, or ``None``/``""`` for no key. After the script ends no key is pressed.
    """

    def __init__(self, script: Iterable[str | Sequence[str] | None]) -> None:
        self._script = iter(script)

    def read(self) -> list[str]:
        entry = next(self._script, None)
        if entry is None or entry == "":
            return []
        return [entry] if isinstance(entry, str) else list(entry)


class TerminalKeys:
    """Raw key presses from a terminal (POSIX termios), as a context manager.

    Inside ``with TerminalKeys() as keys:`` the terminal is in cbreak mode without echo;
    :meth:`read` returns the keys waiting in the input buffer without blocking. Arrow keys
    (ANSI escape sequences) become ``"left"``, ``"right"``, ``"up"``, ``"down"``, the space bar
    ``"space"``, other keys their lower-case character.
    """

    _ARROWS = {"A": "up", "B": "down", "C": "right", "D": "left"}

    def __init__(self, stream: Any = None) -> None:
        self._stream = stream if stream is not None else sys.stdin
        self._saved: Any = None

    def __enter__(self) -> TerminalKeys:
        import termios
        import tty

        if not self._stream.isatty():
            raise ValueError("recording demonstrations needs an interactive terminal (stdin is "
                             "not a TTY)")
        fd = self._stream.fileno()
        self._saved = termios.tcgetattr(fd)
        tty.setcbreak(fd)
        return self

    def __exit__(self, *exc: object) -> None:
        import termios

        if self._saved is not None:
            termios.tcsetattr(self._stream.fileno(), termios.TCSADRAIN, self._saved)
            self._saved = None

    def read(self) -> list[str]:
        import select

        fd = self._stream.fileno()
        raw = b""
        while select.select([fd], [], [], 0.0)[0]:
            chunk = os.read(fd, 64)
            if not chunk:
                break
            raw += chunk
        return self.parse(raw.decode(errors="ignore"))

    @classmethod
    def parse(cls, text: str) -> list[str]:
        """Split terminal input into key names (``"\\x1b[D"`` -> ``"left"``, ``" "`` -> ``"space"``)."""
        keys: list[str] = []
        i = 0
        while i < len(text):
            if text.startswith("\x1b[", i) and i + 2 < len(text) and text[i + 2] in cls._ARROWS:
                keys.append(cls._ARROWS[text[i + 2]])
                i += 3
                continue
            ch = text[i]
            keys.append("space" if ch == " " else ch.lower())
            i += 1
        return keys


# ------------------------------------------------------------------------------ recording
class KeyboardController:
    """Turns the keys of one step into an action (or a quit request).

    Parameters
    ----------
    hold_steps : int, default=0
        After a push key, keep pushing for this many further steps without a key press
        (bridges the gaps of a terminal's key repeat). ``0``: a push lasts one step.

    Notes
    -----
    Of several keys read in one step, the last key that maps to an action wins; ``q`` anywhere
    among them quits. Unknown keys are ignored.
    """

    def __init__(self, hold_steps: int = 0) -> None:
        if isinstance(hold_steps, bool) or not isinstance(hold_steps, (int, np.integer)) or hold_steps < 0:
            raise ValueError(f"The 'hold_steps' parameter must be an int >= 0. Got {hold_steps!r}.")
        self.hold_steps = int(hold_steps)
        self._last = 0.0
        self._left = 0

    def reset(self) -> None:
        """Forget the held push (call at the start of an episode)."""
        self._last, self._left = 0.0, 0

    def action(self, keys: Sequence[str]) -> float | None:
        """The action of this step, or ``None`` if ``q`` was pressed."""
        if QUIT_KEY in keys:
            return None
        pressed = [KEY_ACTIONS[k] for k in keys if k in KEY_ACTIONS]
        if pressed:
            self._last, self._left = pressed[-1], self.hold_steps
            return self._last
        if self._left > 0:
            self._left -= 1
            return self._last
        return 0.0


def record_episode(env: gym.Env, keys: KeySource, controller: KeyboardController | None = None,
                   seed: int | None = None, step_time: float = 0.0,
                   on_step: Callable[[np.ndarray, float, int], None] | None = None
                   ) -> dict[str, Any] | None:
    """Record one episode driven by key presses.

    Parameters
    ----------
    env : gymnasium.Env
        A mountain car from :func:`make_mountaincar_env` (its time limit ends the episode).
    keys : KeySource
        Read once per step.
    controller : KeyboardController, optional
        Key -> action logic (default: ``KeyboardController()``).
    seed : int, optional
        ``env.reset(seed=seed)``.
    step_time : float, default=0
        Seconds per step (a human needs about 1/30 s; scripted runs use 0).
    on_step : callable, optional
        ``on_step(obs, action, t)`` after every step (e.g. :func:`render_ascii`).

    Returns
    -------
    dict or None
        ``observations`` (T + 1, 2), ``actions`` (T, 1), ``rewards`` (T,), ``terminals`` and
        ``truncations`` (T,) with the flag on the last step (goal reached, or time limit), and
        ``seed``. ``None`` if ``q`` was pressed: the unfinished episode is discarded.
    """
    controller = controller if controller is not None else KeyboardController()
    controller.reset()
    obs, _ = env.reset(seed=seed)
    observations = [np.asarray(obs, dtype=np.float64)]
    actions: list[float] = []
    rewards: list[float] = []
    terminated = truncated = False
    while not (terminated or truncated):
        start = time.perf_counter()
        action = controller.action(keys.read())
        if action is None:
            return None
        obs, reward, terminated, truncated, _ = env.step(np.array([action], dtype=np.float32))
        observations.append(np.asarray(obs, dtype=np.float64))
        actions.append(action)
        rewards.append(float(reward))
        if on_step is not None:
            on_step(observations[-1], action, len(actions))
        rest = step_time - (time.perf_counter() - start)
        if rest > 0:
            time.sleep(rest)
    t = len(actions)
    terminals = np.zeros(t, dtype=bool)
    truncations = np.zeros(t, dtype=bool)
    terminals[-1] = bool(terminated)
    truncations[-1] = bool(truncated) and not terminated
    return {"observations": np.stack(observations), "actions": np.asarray(actions)[:, None],
            "rewards": np.asarray(rewards), "terminals": terminals, "truncations": truncations,
            "seed": seed}


def collect_demonstrations(n_episodes: int, keys: KeySource, *, seed: int = 0,
                           max_episode_steps: int = MAX_EPISODE_STEPS, hold_steps: int = 0,
                           step_time: float = 0.0,
                           on_step: Callable[[np.ndarray, float, int], None] | None = None,
                           on_episode: Callable[[int, dict[str, Any]], None] | None = None
                           ) -> TransitionDataset | None:
    """Record up to ``n_episodes`` demonstrations into a :class:`~nopg.data.dataset.TransitionDataset`.

    Episode ``k`` is reset with seed ``seed + k``. Recording stops early when ``q`` is pressed
    (the unfinished episode is dropped). Every episode ends at the goal (terminal) or at the
    time limit (truncation); episode ids are ``0, 1, ...`` in recording order.

    Returns
    -------
    TransitionDataset or None
        ``None`` if no episode was completed.
    """
    from nopg.data.dataset import TransitionDataset

    if isinstance(n_episodes, bool) or not isinstance(n_episodes, (int, np.integer)) or n_episodes < 1:
        raise ValueError(f"The 'n_episodes' parameter must be a positive int. Got {n_episodes!r}.")
    controller = KeyboardController(hold_steps)
    env = make_mountaincar_env(max_episode_steps)
    episodes: list[dict[str, Any]] = []
    try:
        for k in range(int(n_episodes)):
            ep = record_episode(env, keys, controller, seed=int(seed) + k, step_time=step_time,
                                on_step=on_step)
            if ep is None:
                break
            episodes.append(ep)
            if on_episode is not None:
                on_episode(k, ep)
    finally:
        env.close()
    if not episodes:
        return None
    return TransitionDataset.from_episodes(
        [{k: v for k, v in ep.items() if k != "seed"} for ep in episodes])


def render_ascii(obs: np.ndarray, action: float, t: int, width: int = 60) -> str:
    """One status line: the track from -1.2 to 0.6 with the car ``@``, the goal ``|`` and the push."""
    x, v = float(obs[0]), float(obs[1])
    cells = [" "] * width
    pos = lambda p: int(round((p - MIN_POSITION) / (MAX_POSITION - MIN_POSITION) * (width - 1)))  # noqa: E731
    cells[pos(GOAL_POSITION)] = "|"
    cells[pos(min(max(x, MIN_POSITION), MAX_POSITION))] = "@"
    push = {-1.0: "<<", 1.0: ">>"}.get(float(np.sign(action)), "  ")
    return f"[{''.join(cells)}] {push} x={x:+.3f} v={v:+.4f} t={t:4d}"
