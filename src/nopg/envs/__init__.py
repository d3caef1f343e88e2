"""Environments and simulation: the tasks' environments (gymnasium-based: the LQG in closed form,
the pendulum, cart-pole, mountain car, the maze, Hopper) and policy evaluation by simulation
(:mod:`nopg.envs.evaluation`), each imported from its module."""
