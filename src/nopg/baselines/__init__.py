"""Baselines for the sample-efficiency comparison (``nopg reproduce sample-efficiency``).

* :mod:`nopg.baselines.d3rlpy_bridge` -- d3rlpy's BC, TD3+BC, IQL, CQL, BCQ and BEAR, run in an
  isolated virtual environment through files (:mod:`nopg.baselines.d3rlpy_worker` runs there);
* :mod:`nopg.baselines.model_based` -- MOPO and MOReL, written here on Stable-Baselines3's SAC
  over the dynamics ensemble of :mod:`nopg.baselines.dynamics_ensemble`;
* :mod:`nopg.baselines.pwis` -- gradient ascent on the G(PO)MDP+N importance-sampling gradient;
* :mod:`nopg.baselines.online` -- Stable-Baselines3 DDPG, TD3 and SAC against environment steps.

Nothing is imported here: each module loads its own optional dependency when used.
"""
