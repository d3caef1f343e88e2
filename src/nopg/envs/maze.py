"""U-Maze point maze: environment factory, grid planner, waypoint controller and D4RL-style data.

Simulator: gymnasium-robotics ``PointMaze_UMaze-v3`` (gymnasium-robotics 1.4.2,
``gymnasium_robotics/envs/maze/{point_maze.py, maze_v4.py, point.py, maps.py}``).
A force-actuated MuJoCo ball (timestep 0.01 s, frame skip 1, joint damping 1, motor gear 100,
velocity clipped to ±5 before every step) moves in the 5 x 5 U-shaped maze; actions are the 2-D
force in ``[-1, 1]^2``. Cells are unit squares; cell ``(row, col)`` has its centre at
``x = col - 2``, ``y = 2 - row`` (origin at the maze centre, ``y`` up).

Choices made here (to match D4RL's ``maze2d-umaze-v1``, which the paper used):

* **Fixed goal.** D4RL's maze2d keeps the target at the ``G`` cell ``(1, 1)``. gymnasium-robotics
  draws the goal at every reset (with ±0.25 position noise even in a map with a ``g`` cell), so
  :class:`FixedGoalUMaze` puts it exactly at the centre of cell ``(1, 1)``, i.e. ``(-1, 1)``,
  after each reset. With a fixed goal the 4-D state ``[x, y, vx, vy]`` is Markov, so the goal is
  *not* appended to the observation (the policy gets the D4RL 4-D state).
* **Reward.** Sparse by default (``maze2d-umaze-v1``): 1 when the ball is within 0.45 of the goal
  after the step (gymnasium-robotics' radius; D4RL used 0.5), else 0. ``"dense"`` gives
  ``exp(-distance)``.
* **Episodes.** The task never terminates (``continuing_task=True``, ``reset_target=False``);
  the time limit is 300 steps (``maze2d-umaze-v1`` and ``PointMaze_UMaze-v3``). Resets put the
  ball in a uniformly drawn empty cell other than the goal cell (gymnasium-robotics' rule, as in
  Minari's evaluation environment), with U(-0.25, 0.25) position noise and zero velocity.

The data generator (:func:`collect_umaze_d4rl_style`) follows D4RL's maze2d generation (D4RL's
``scripts/generation/generate_maze2d_datasets.py``), written from that description: a
shortest-path planner over the maze cells gives cell-centre waypoints (intermediate ones shifted by
``-U(0, 0.2)`` per coordinate), a PD law ``a = clip(10 (w - p) - v + N(0, 0.5^2), -1, 1)`` drives
the ball towards the current waypoint, and the target cell is resampled uniformly (plus
U(-0.1, 0.1) noise) each time the ball gets within 0.1 of the target or 300 steps pass. The ball
is never reset: the data are one long stream cut into episodes. Those cuts are **truncations**
(the state carries on), never terminals; rewards are labelled with the fixed evaluation goal
(D4RL's relabelling script).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

if TYPE_CHECKING:  # pragma: no cover - typing only
    from nopg.data.dataset import TransitionDataset

__all__ = [
    "UMAZE_ENV_ID",
    "UMAZE_GOAL",
    "UMAZE_GOAL_CELL",
    "UMAZE_MAP",
    "FixedGoalUMaze",
    "WaypointController",
    "cell_to_xy",
    "collect_umaze_d4rl_style",
    "d4rl_to_gymnasium_states",
    "free_cells",
    "make_umaze_env",
    "shortest_path",
    "umaze_reward",
    "xy_to_cell",
]

UMAZE_ENV_ID = "PointMaze_UMaze-v3"
"""gymnasium-robotics id of the U-Maze (registered with a 300-step time limit)."""

UMAZE_MAP: tuple[tuple[int, ...], ...] = (
    (1, 1, 1, 1, 1),
    (1, 0, 0, 0, 1),
    (1, 1, 1, 0, 1),
    (1, 0, 0, 0, 1),
    (1, 1, 1, 1, 1),
)
"""gymnasium-robotics ``maps.U_MAZE`` (1 = wall, 0 = free); D4RL's ``U_MAZE`` string is the same."""

UMAZE_GOAL_CELL: tuple[int, int] = (1, 1)
"""D4RL's ``G`` cell of the U-Maze (row, column)."""

GOAL_RADIUS = 0.45
"""Success / sparse-reward radius of gymnasium-robotics' ``MazeEnv.compute_reward``."""

_DEFAULT_STEPS = 300


def cell_to_xy(cell: Sequence[int], maze_map: Sequence[Sequence[int]] = UMAZE_MAP,
               scale: float = 1.0) -> np.ndarray:
    """Centre ``(x, y)`` of maze cell ``(row, col)`` in gymnasium-robotics' frame.

    ``x = (col + 0.5) s - W s / 2`` and ``y = H s / 2 - (row + 0.5) s`` for a map of ``H`` rows
    and ``W`` columns and cell size ``s`` (``Maze.cell_rowcol_to_xy``).
    """
    rows, cols = len(maze_map), len(maze_map[0])
    row, col = int(cell[0]), int(cell[1])
    if not (0 <= row < rows and 0 <= col < cols):
        raise ValueError(f"cell {tuple(cell)} is outside the {rows} x {cols} maze")
    return np.array([(col + 0.5) * scale - cols * scale / 2, rows * scale / 2 - (row + 0.5) * scale])


def xy_to_cell(xy: Sequence[float], maze_map: Sequence[Sequence[int]] = UMAZE_MAP,
               scale: float = 1.0) -> tuple[int, int]:
    """Cell ``(row, col)`` containing the point ``(x, y)`` (inverse of :func:`cell_to_xy`)."""
    rows, cols = len(maze_map), len(maze_map[0])
    row = int(np.floor((rows * scale / 2 - float(xy[1])) / scale))
    col = int(np.floor((float(xy[0]) + cols * scale / 2) / scale))
    return min(max(row, 0), rows - 1), min(max(col, 0), cols - 1)


UMAZE_GOAL: np.ndarray = cell_to_xy(UMAZE_GOAL_CELL)
"""The fixed evaluation goal, the centre ``(-1, 1)`` of cell ``(1, 1)``."""


def free_cells(maze_map: Sequence[Sequence[Any]] = UMAZE_MAP) -> list[tuple[int, int]]:
    """All cells of ``maze_map`` that are not walls (value 1), in row-major order."""
    return [(i, j) for i, row in enumerate(maze_map) for j, v in enumerate(row) if v != 1]


def shortest_path(maze_map: Sequence[Sequence[Any]], start: tuple[int, int],
                  goal: tuple[int, int]) -> list[tuple[int, int]]:
    """Shortest 4-connected path of free cells from ``start`` to ``goal`` (both included).

    Breadth-first search from ``goal``; the path then descends the distance field greedily
    (ties broken in the order up, down, left, right). On a grid with unit step costs this is the
    path that D4RL's Q-iteration planner follows.

    Raises
    ------
    ValueError
        If ``start`` or ``goal`` is a wall or outside the map, or ``goal`` is unreachable.
    """
    free = set(free_cells(maze_map))
    for name, cell in (("start", start), ("goal", goal)):
        if tuple(cell) not in free:
            raise ValueError(f"{name} cell {tuple(cell)} is a wall or outside the maze")
    moves = ((-1, 0), (1, 0), (0, -1), (0, 1))
    dist = {tuple(goal): 0}
    queue = deque([tuple(goal)])
    while queue:
        cell = queue.popleft()
        for di, dj in moves:
            nxt = (cell[0] + di, cell[1] + dj)
            if nxt in free and nxt not in dist:
                dist[nxt] = dist[cell] + 1
                queue.append(nxt)
    if tuple(start) not in dist:
        raise ValueError(f"goal cell {tuple(goal)} is unreachable from {tuple(start)}")
    path = [tuple(start)]
    while path[-1] != tuple(goal):
        cell = path[-1]
        path.append(min(((cell[0] + di, cell[1] + dj) for di, dj in moves
                         if (cell[0] + di, cell[1] + dj) in dist),
                        key=lambda c: dist[c]))
    return path


class WaypointController:
    """D4RL-style noisy waypoint controller for a point mass in a grid maze.

    A target point is reached through the centres of the cells on the shortest path (see
    :func:`shortest_path`); intermediate waypoints are shifted by ``-U(0, jitter)`` per
    coordinate. The action is ``clip(p_gain (w - pos) - d_gain vel + N(0, noise^2), -1, 1)``
    towards the current waypoint ``w``, which advances once the ball is within ``solve_thresh``
    of it. If noise pushes the ball off the planned cells, the path is re-planned.

    Parameters
    ----------
    maze_map : sequence of sequences
        The maze (1 = wall).
    p_gain, d_gain : float, default 10 and 1
        PD gains (D4RL ``WaypointController``: ``p_gain = 10``, ``d_gain = -1`` on velocity).
    solve_thresh : float, default 0.1
        Distance at which a waypoint, or the target, counts as reached.
    noise : float, default 0.0
        Standard deviation of the Gaussian action noise (D4RL ``--noisy``: 0.5).
    jitter : float, default 0.2
        Size of the uniform shift of intermediate waypoints.
    seed : int or numpy.random.Generator, optional
        Source of waypoint jitter and action noise (a Generator is used as it is; formerly
        ``rng``); ``None`` draws fresh entropy.
    """

    def __init__(self, maze_map: Sequence[Sequence[Any]] = UMAZE_MAP, p_gain: float = 10.0,
                 d_gain: float = 1.0, solve_thresh: float = 0.1, noise: float = 0.0,
                 jitter: float = 0.2, seed: int | np.random.Generator | None = None) -> None:
        for name, value in (("p_gain", p_gain), ("d_gain", d_gain), ("solve_thresh", solve_thresh),
                            ("noise", noise), ("jitter", jitter)):
            if not np.isfinite(value) or value < 0 or (name == "solve_thresh" and value == 0):
                raise ValueError(f"The '{name}' parameter must be a finite non-negative float "
                                 f"(solve_thresh positive). Got {value!r}.")
        self.maze_map = [list(r) for r in maze_map]
        self.p_gain, self.d_gain = float(p_gain), float(d_gain)
        self.solve_thresh, self.noise, self.jitter = float(solve_thresh), float(noise), float(jitter)
        self.rng = np.random.default_rng(seed)
        self.target: np.ndarray | None = None
        self._path: list[tuple[int, int]] = []
        self._waypoints: list[np.ndarray] = []
        self._index = 0

    def set_target(self, target: Sequence[float], position: Sequence[float]) -> None:
        """Plan the waypoints from ``position`` to the point ``target``."""
        target = np.asarray(target, dtype=np.float64).reshape(2)
        start = xy_to_cell(position, self.maze_map)
        goal = xy_to_cell(target, self.maze_map)
        path = shortest_path(self.maze_map, start, goal)
        waypoints = [cell_to_xy(c, self.maze_map) - self.rng.uniform(0.0, self.jitter, 2)
                     for c in path[1:-1]]
        self.target = target
        self._path = path  # waypoint k lies in path[k + 1]; the ball starts in path[0]
        self._waypoints = [*waypoints, target.copy()]
        self._index = 0

    @property
    def waypoints(self) -> list[np.ndarray]:
        """The remaining waypoints, the last one being the target."""
        return [w.copy() for w in self._waypoints[self._index:]]

    def reached(self, position: Sequence[float]) -> bool:
        """Whether ``position`` is within ``solve_thresh`` of the target."""
        if self.target is None:
            raise ValueError("no target set; call set_target first")
        return bool(np.linalg.norm(np.asarray(position, float)[:2] - self.target) < self.solve_thresh)

    def act(self, position: Sequence[float], velocity: Sequence[float]) -> np.ndarray:
        """The (noisy, clipped) action at ``position`` with ``velocity``."""
        if self.target is None:
            raise ValueError("no target set; call set_target first")
        pos = np.asarray(position, dtype=np.float64)[:2]
        vel = np.asarray(velocity, dtype=np.float64)[:2]
        if xy_to_cell(pos, self.maze_map) not in self._path[self._index:]:
            self.set_target(self.target, pos)  # knocked off the path: re-plan from here
        last = len(self._waypoints) - 1
        while self._index < last and \
                np.linalg.norm(pos - self._waypoints[self._index]) < self.solve_thresh:
            self._index += 1
        action = self.p_gain * (self._waypoints[self._index] - pos) - self.d_gain * vel
        if self.noise > 0:
            action = action + self.rng.normal(0.0, self.noise, 2)
        return np.clip(action, -1.0, 1.0)


def umaze_reward(next_positions: np.ndarray, reward_type: str = "sparse",
                 goal: np.ndarray = UMAZE_GOAL) -> np.ndarray:
    """U-Maze reward of arriving at ``next_positions`` (shape (n, 2) or (n, >=2)).

    ``sparse``: ``1[||p - goal|| <= 0.45]``; ``dense``: ``exp(-||p - goal||)``
    (gymnasium-robotics ``MazeEnv.compute_reward``).
    """
    p = np.asarray(next_positions, dtype=np.float64)
    if p.ndim != 2 or p.shape[1] < 2:
        raise ValueError(f"next_positions must have shape (n, >=2); got {p.shape}")
    dist = np.linalg.norm(p[:, :2] - np.asarray(goal, float)[None, :2], axis=1)
    if reward_type == "sparse":
        return (dist <= GOAL_RADIUS).astype(np.float64)
    if reward_type == "dense":
        return np.exp(-dist)
    raise ValueError(f"The 'reward_type' parameter must be 'sparse' or 'dense'. Got {reward_type!r}.")


def d4rl_to_gymnasium_states(states: np.ndarray, maze_map: Sequence[Sequence[int]] = UMAZE_MAP
                             ) -> np.ndarray:
    """Map D4RL maze2d observations ``[qx, qy, vx, vy]`` to gymnasium-robotics' frame.

    D4RL places cell ``(row, col)`` at ``(qx, qy) = (row, col)`` (``maze_model.py``), whereas
    gymnasium-robotics uses ``x = col + 0.5 - W/2``, ``y = H/2 - row - 0.5``. So
    ``x = qy + 0.5 - W/2``, ``y = H/2 - 0.5 - qx``, ``vx = vy_d4rl`` and ``vy = -vx_d4rl``.
    """
    s = np.asarray(states, dtype=np.float64)
    if s.ndim != 2 or s.shape[1] != 4:
        raise ValueError(f"D4RL maze2d states must have shape (n, 4); got {s.shape}")
    rows, cols = len(maze_map), len(maze_map[0])
    return np.stack([s[:, 1] + 0.5 - cols / 2, rows / 2 - 0.5 - s[:, 0], s[:, 3], -s[:, 2]], axis=1)


def _gym_map(maze_map: Sequence[Sequence[Any]], goal_cell: tuple[int, int]) -> list[list[Any]]:
    from gymnasium_robotics.envs.maze.maps import GOAL

    out = [list(r) for r in maze_map]
    if out[goal_cell[0]][goal_cell[1]] == 1:
        raise ValueError(f"goal cell {goal_cell} is a wall")
    out[goal_cell[0]][goal_cell[1]] = GOAL
    return out


class FixedGoalUMaze(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Flatten PointMaze observations to ``[x, y, vx, vy]`` and pin the goal at ``goal``.

    The goal is written into the simulator after every reset, so rewards, ``info["success"]``
    and the target marker all use it; ``info["goal"]`` reports it.
    """

    def __init__(self, env: gym.Env, goal: Sequence[float] = tuple(UMAZE_GOAL)) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, goal=tuple(float(g) for g in goal))
        gym.Wrapper.__init__(self, env)
        base = env.unwrapped
        if not (hasattr(base, "maze") and hasattr(base, "update_target_site_pos")):
            raise ValueError(f"FixedGoalUMaze needs a gymnasium-robotics maze env; got "
                             f"{type(base).__name__}.")
        self.goal = np.asarray(goal, dtype=np.float64).reshape(2).copy()
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(4,), dtype=np.float64)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        base = self.env.unwrapped
        base.goal = self.goal.copy()
        base.update_target_site_pos()
        success = bool(np.linalg.norm(obs["achieved_goal"] - self.goal) <= GOAL_RADIUS)
        return np.asarray(obs["observation"], dtype=np.float64), \
            {**info, "success": success, "goal": self.goal.copy()}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return (np.asarray(obs["observation"], dtype=np.float64), float(reward),
                bool(terminated), bool(truncated), {**info, "goal": self.goal.copy()})


def make_umaze_env(max_episode_steps: int = _DEFAULT_STEPS, reward_type: str = "sparse",
                   render_mode: str | None = None) -> gym.Env:
    """The U-Maze evaluation environment (D4RL ``maze2d-umaze-v1`` conventions, module doc).

    Parameters
    ----------
    max_episode_steps : int, default=300
        Time limit (``maze2d-umaze-v1`` and ``PointMaze_UMaze-v3`` use 300).
    reward_type : {"sparse", "dense"}
        Sparse ``1[dist <= 0.45]`` or dense ``exp(-dist)``.
    render_mode : str, optional
        Passed to ``gymnasium.make``.

    Returns
    -------
    gymnasium.Env
        Observations are float64 ``[x, y, vx, vy]``; the goal is fixed at :data:`UMAZE_GOAL`.
    """
    if isinstance(max_episode_steps, bool) or not isinstance(max_episode_steps, (int, np.integer)) \
            or max_episode_steps < 1:
        raise ValueError(f"The 'max_episode_steps' parameter must be a positive int. "
                         f"Got {max_episode_steps!r}.")
    if reward_type not in ("sparse", "dense"):
        raise ValueError(f"The 'reward_type' parameter must be 'sparse' or 'dense'. Got {reward_type!r}.")
    import gymnasium_robotics

    gym.register_envs(gymnasium_robotics)
    env = gym.make(UMAZE_ENV_ID, maze_map=_gym_map(UMAZE_MAP, UMAZE_GOAL_CELL),
                   continuing_task=True, reset_target=False, reward_type=reward_type,
                   max_episode_steps=int(max_episode_steps), render_mode=render_mode)
    return FixedGoalUMaze(env, UMAZE_GOAL)


def collect_umaze_d4rl_style(n_samples: int, seed: int = 0, action_noise: float = 0.5,
                             max_episode_steps: int = _DEFAULT_STEPS, target_noise: float = 0.1,
                             reward_type: str = "sparse") -> TransitionDataset:
    """Generate U-Maze data the way D4RL generated ``maze2d-umaze`` (see the module docstring).

    Parameters
    ----------
    n_samples : int
        Number of transitions (one continuing stream).
    seed : int, default=0
        Seeds the environment reset and the controller's noise.
    action_noise : float, default=0.5
        Standard deviation of the Gaussian action noise (D4RL ``--noisy``); 0 is noiseless.
    max_episode_steps : int, default=300
        An episode is cut (truncated) after this many steps if the target was not reached.
    target_noise : float, default=0.1
        Targets are a uniformly drawn free cell centre plus ``U(-target_noise, target_noise)``.
    reward_type : {"sparse", "dense"}
        Reward w.r.t. the fixed evaluation goal :data:`UMAZE_GOAL`.

    Returns
    -------
    TransitionDataset
        States and next states ``[x, y, vx, vy]``, the applied (clipped) actions, rewards,
        ``terminals`` all False, ``truncations`` True where an episode was cut (target reached,
        time limit, or the end of the stream) and ``episode_ids``.
    """
    from nopg.data.dataset import TransitionDataset

    if isinstance(n_samples, bool) or not isinstance(n_samples, (int, np.integer)) or n_samples < 1:
        raise ValueError(f"The 'n_samples' parameter must be a positive int. Got {n_samples!r}.")
    if isinstance(max_episode_steps, bool) or not isinstance(max_episode_steps, (int, np.integer)) \
            or max_episode_steps < 1:
        raise ValueError(f"The 'max_episode_steps' parameter must be a positive int. "
                         f"Got {max_episode_steps!r}.")
    if not np.isfinite(target_noise) or not 0 <= target_noise < 0.5:
        raise ValueError(f"The 'target_noise' parameter must be in [0, 0.5). Got {target_noise!r}.")
    rng = np.random.default_rng(seed)
    controller = WaypointController(UMAZE_MAP, noise=action_noise, seed=rng)
    cells = free_cells(UMAZE_MAP)
    env = make_umaze_env(max_episode_steps=int(n_samples) + 1, reward_type=reward_type)
    n = int(n_samples)
    states, next_states = np.empty((n, 4)), np.empty((n, 4))
    actions, rewards = np.empty((n, 2)), np.empty(n)
    truncations = np.zeros(n, dtype=bool)
    episode_ids = np.empty(n, dtype=np.int64)

    def new_target(position: np.ndarray) -> None:
        cell = cells[rng.integers(len(cells))]
        controller.set_target(cell_to_xy(cell) + rng.uniform(-target_noise, target_noise, 2),
                              position)

    try:
        obs, _ = env.reset(seed=int(seed))
        new_target(obs[:2])
        episode, t = 0, 0
        for i in range(n):
            action = controller.act(obs[:2], obs[2:])
            next_obs, reward, _, _, _ = env.step(action)
            states[i], actions[i], rewards[i], next_states[i] = obs, action, reward, next_obs
            episode_ids[i] = episode
            t += 1
            if controller.reached(next_obs[:2]) or t >= max_episode_steps:
                truncations[i] = True
                episode, t = episode + 1, 0
                new_target(next_obs[:2])
            obs = next_obs
    finally:
        env.close()
    truncations[-1] = True
    return TransitionDataset(states=states, actions=actions, rewards=rewards,
                             next_states=next_states, terminals=np.zeros(n, dtype=bool),
                             truncations=truncations, episode_ids=episode_ids)
