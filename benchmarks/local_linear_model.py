"""Research prototype: does a kernel model whose successors move with the action rate policies
better than NOPG's model, and does NOPG-D on it find the swing-up?

Issue 10's pendulum failures are model failures: on ``pendulum-uniform`` NOPG's kernel model
values the noiseless swing-up controller below a policy that only spins the pendulum. This script
measures that (``evaluate``) and fits NOPG-D on four models of the same data (``fit``):

``kernel``
    NOPG's model (paper Eq. 6, sparsified to ``K`` neighbours): from a query ``x`` with action
    ``u = pi(x)`` the successor of neighbour ``j`` is its own next state ``s'_j``.
``shift``
    The successor moves with the action difference, ``y_j = s'_j + B_j (u - a_j)``, and the
    reward with it, ``r_j + b_j (u - a_j)``.
``ll``
    ``shift`` plus the state slope of the *change*, ``+ A_j (x - s_j)`` (not the identity).
``full``
    The local-linear prediction, ``y_j = s'_j + (I + A_j)(x - s_j) + B_j (u - a_j)``.

``A_j``, ``B_j`` (and the reward's slopes) are least-squares fits of ``(s' - s, r)`` on
``(1, s - s_j, a - a_j)`` over the ``FIT_NEIGHBOURS`` data states nearest to ``s_j``. The
value at a successor ``y`` is interpolated from the values at the ``INTERP_NEIGHBOURS`` nearest
data next states (Gaussian weights, the state bandwidths), so every row of the transition
matrix ``T`` is non-negative and sums to ``gamma``: ``J_hat`` stays within the rewards' bounds.
``v = (I - T)^{-1} r_pi`` over the data's next states, ``J_hat`` is its mean at the initial
states. The fit solves ``v`` and the visitation ``mu`` with SciPy's sparse LU and differentiates the surrogate
``e0 + t0 . v + mu . (r + T v)`` (``v``, ``mu`` held fixed), which has the exact gradient; the
neighbour sets are recomputed, without gradient, at every update. No ``n x n`` array is formed.

Options of the same models: ``--draws D`` replaces each transition's next state by ``D`` states
drawn around it with the state kernel, afresh at every update (the library's ``n_mc_next``);
``--adaptive A`` (``evaluate``, ``trace``) gives each sample its own state bandwidths, ``h (r_j /
median r)^A`` with ``r_j`` its distance to its ``ADAPTIVE_K``-th nearest data state (a
sample-point estimator); ``trace`` prints the model's value of the swing-up controller along its
real trajectory against the real value-to-go.

The reference policies (``evaluate``) are the noiseless swing-up controller of
:func:`nopg.experiments.user_data_pendulum.swingup_action`, a policy that always pushes along
the motion (``spin``) and the zero torque, against their real discounted return from the bottom
at rest. Results: ``docs/bandwidths.md``.

    python benchmarks/local_linear_model.py evaluate pendulum-uniform:0 pendulum-controller:0
    python benchmarks/local_linear_model.py fit pendulum-uniform:0 --mode full --updates 1000
    python benchmarks/local_linear_model.py fit pendulum-uniform:0 --mode full --draws 3
    python benchmarks/local_linear_model.py trace pendulum-uniform:0 --mode kernel
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import torch
from scipy import sparse
from scipy.sparse.linalg import spsolve
from scipy.spatial import cKDTree
from torch import nn

from nopg.bandwidth import select_bandwidths
from nopg.bellman import pessimistic_value
from nopg.envs.pendulum import make_pendulum_env, pendulum_bottom_setter
from nopg.evaluation import rollout
from nopg.experiments import get_task
from nopg.experiments.runner import make_policy
from nopg.kernels import thinness

NEIGHBOURS = 10          # responsibilities kept per query (the user-data tasks' top_k)
CANDIDATES = 30          # nearest data states searched for them
ADAPTIVE_K = 10          # neighbour whose distance sets a sample's bandwidth (adaptive kernels)
INTERP_NEIGHBOURS = 8    # data next states interpolating the value at a successor
FIT_NEIGHBOURS = 32      # data states of each local-linear fit
SUPPORT_RADIUS = 2.0     # the library's default (nopg.kernels.thinness)
MODES = ("kernel", "shift", "ll", "full")
REFERENCES = ("swingup", "spin", "zero")


class ReferencePolicy(nn.Module):
    """A fixed pendulum policy on ``(cos, sin, theta_dot)`` observations (see the docstring)."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    def forward(self, s: torch.Tensor) -> torch.Tensor:
        cos, sin, speed = s[..., 0], s[..., 1], s[..., 2]
        along = torch.where(speed >= 0, 1.0, -1.0).to(s.dtype)
        if self.kind == "zero":
            u = torch.zeros_like(cos)
        elif self.kind == "spin":
            u = 2.0 * along
        else:
            theta = torch.atan2(sin, cos)
            pump = (15.0 - (0.5 * speed ** 2 + 15.0 * cos)) * along
            u = torch.where(theta.abs() < 0.5, -(10.0 * theta + 2.0 * speed), pump).clamp(-2, 2)
        return u[..., None]


def reference_return(kind: str, gamma: float = 0.99, steps: int = 500) -> float:
    """Real discounted return of a reference policy from the bottom at rest."""
    episode = rollout(make_pendulum_env(steps), ReferencePolicy(kind), pendulum_bottom_setter,
                      seed=0)
    return float(np.sum(gamma ** np.arange(episode["length"]) * episode["rewards"]))


def local_fits(S: np.ndarray, A: np.ndarray, S2: np.ndarray, R: np.ndarray, hs: np.ndarray
               ) -> np.ndarray:
    """Slopes of ``(s' - s, r)`` in ``(s - s_j, a - a_j)`` per data point, (n, d_s + d_a, d_s + 1)."""
    _, nb = cKDTree(S / hs).query(S / hs, FIT_NEIGHBOURS)
    Y = np.concatenate([S2 - S, R[:, None]], 1)
    coef = np.zeros((len(S), S.shape[1] + A.shape[1], S.shape[1] + 1))
    for j in range(len(S)):
        X = np.concatenate([np.ones((FIT_NEIGHBOURS, 1)), S[nb[j]] - S[j], A[nb[j]] - A[j]], 1)
        coef[j] = np.linalg.solve(X.T @ X + 1e-6 * np.eye(X.shape[1]), X.T @ Y[nb[j]])[1:]
    return coef


class TwoHopModel:
    """The four models of the module docstring on one data set, as a differentiable ``J_hat``."""

    def __init__(self, spec: str, mode: str, task_settings: dict[str, int],
                 absorb: bool = False, scale: float = 1.0, resample: int | None = None,
                 adaptive: float = 0.0, draws: int = 0,
                 initial_states: np.ndarray | None = None, penalty: bool = False) -> None:
        name, seed = spec.split(":")
        self.absorb, self.penalty = absorb, penalty
        self.seed, self.mode, self.task = int(seed), mode, get_task(name)
        cfg = self.task.default_config()
        self.cfg = cfg.replace(**{f"task.{k}": v for k, v in task_settings.items()})
        self.data = self.task.make_dataset(self.cfg, self.seed)
        s0 = np.asarray(self.task.initial_states(self.data, self.cfg, self.seed)
                        if initial_states is None else initial_states, float)
        bw = select_bandwidths(self.data, method=self.cfg.bandwidth_method,
                               state_factor=self.cfg.state_factor,
                               action_factor=self.cfg.action_factor, seed=self.seed)
        d = self.data
        # A bootstrap resample of the transitions (bandwidths from the whole data set).
        rows = np.arange(d.n) if resample is None else \
            np.random.default_rng([self.seed, resample]).integers(0, d.n, d.n)
        S, A, S2, R = (np.asarray(x, float)[rows] for x in (d.states, d.actions, d.next_states,
                                                              d.rewards))
        terminals = np.asarray(d.terminals, float)[rows]
        self.hs, queries = scale * np.asarray(bw.state, float), np.concatenate([S2, s0])
        self.tree, self.next_tree = cKDTree(S / self.hs), cKDTree(S2 / self.hs)
        _, candidates = self.tree.query(queries / self.hs, CANDIDATES)
        t = torch.as_tensor
        self.S, self.A, self.S2, self.R, self.X = t(S), t(A), t(S2), t(R), t(queries)
        self.cand, self.ha, self.n = t(candidates), t(scale * np.asarray(bw.action, float)), len(S)
        self.absorbing_value = pessimistic_value(d, self.cfg.nopg.gamma)
        self.discount = self.cfg.nopg.gamma * (1.0 - t(terminals))
        # The soft penalty's scale: the best reward minus the pessimistic reward per step.
        self.penalty_scale = float(R.max()) - (1.0 - self.cfg.nopg.gamma) * self.absorbing_value
        self.coef = t(local_fits(S, A, S2, R, self.hs)) if mode != "kernel" else None
        self.sample_scale = self.adaptive_scales(adaptive)
        self.state_logw = self.state_log_kernel()
        # Monte-Carlo next states (the library's n_mc_next): ``draws`` queries per transition
        # drawn around its next state with the state kernel, afresh at every call of ``J``.
        self.draws, self.s0 = int(draws), t(s0)
        self.fixed = (self.X, self.cand, self.state_logw)
        self.generator = torch.Generator().manual_seed(self.seed)

    def _queries(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Set this call's queries (drawn afresh when ``draws``); their rows of ``T`` and weights."""
        n, n0 = self.n, len(self.s0)
        if not self.draws:
            self.X, self.cand, self.state_logw = self.fixed
            return torch.arange(n + n0), torch.ones(n + n0)
        D, hs = self.draws, torch.as_tensor(self.hs)
        noise = torch.randn(n * D, len(self.hs), generator=self.generator)
        self.X = torch.cat([self.S2.repeat_interleave(D, 0) + hs * noise, self.s0])
        self.cand = torch.as_tensor(self.tree.query(self.X.numpy() / self.hs, CANDIDATES)[1])
        self.state_logw = self.state_log_kernel()
        rows = torch.cat([torch.arange(n).repeat_interleave(D), n + torch.arange(n0)])
        return rows, torch.cat([torch.full((n * D,), 1.0 / D), torch.ones(n0)])

    def adaptive_scales(self, adaptive: float) -> torch.Tensor | None:
        """Per-sample bandwidth scales of a sample-point estimator (``None`` for ``adaptive`` <=
        0): ``c_j = (r_j / median r) ** adaptive``, ``r_j`` the distance of data state ``j`` to
        its ``ADAPTIVE_K``-th nearest data state in bandwidth units, clipped to [1/4, 4]."""
        if adaptive <= 0:
            return None
        scaled = self.S.numpy() / self.hs
        r = self.tree.query(scaled, ADAPTIVE_K + 1)[0][:, -1]
        return torch.as_tensor(np.clip((r / np.median(r)) ** adaptive, 0.25, 4.0))

    def state_log_kernel(self) -> torch.Tensor:
        """Log state kernel of the current queries ``X`` and their candidates; with adaptive
        scales sample ``j``'s bandwidths are ``h c_j`` and its kernel carries the ``c_j^-d`` of a
        normalised density."""
        z = (self.X[:, None] - self.S[self.cand]) / torch.as_tensor(self.hs)
        if self.sample_scale is None:
            return -0.5 * (z ** 2).sum(-1)
        c = self.sample_scale[self.cand]
        return -0.5 * (z ** 2).sum(-1) / c ** 2 - self.S.shape[1] * torch.log(c)

    def J(self, policy: nn.Module) -> torch.Tensor:
        """``J_hat`` of ``policy``, as a surrogate whose gradient is the exact gradient.

        ``J = t0 . v + e0`` with ``v = (I - T)^{-1} r`` (``t0``, ``e0``: the initial rows' mean
        and reward); the two sparse solves run without gradient and
        ``dJ = de0 + dt0 . v + mu . (dr + dT v)``, ``mu = (I - T)^{-T} t0``.
        """
        qrows, qweight = self._queries()
        U = policy(self.X)
        logw = self.state_logw - 0.5 * (((U[:, None] - self.A[self.cand]) / self.ha) ** 2).sum(-1)
        top = torch.topk(logw.detach(), NEIGHBOURS, 1).indices
        nbk = torch.gather(self.cand, 1, top)
        w = torch.softmax(torch.gather(logw, 1, top), 1)                      # (m, K)
        g = self.discount[nbk]
        if self.mode == "kernel":
            rew, cols, vals = (w * self.R[nbk]).sum(1), nbk, g * w
            if self.penalty:   # the query's own thinness (the library's support gap) costs reward
                rew = rew - self.penalty_scale * thinness(torch.logsumexp(logw, 1), SUPPORT_RADIUS)
        else:
            rew, cols, vals = self._two_hop(U, nbk, w, g)
        n, m = self.n, self.n + len(self.s0)
        rew, vals = rew * qweight, vals * qweight[:, None]
        rows = np.repeat(qrows.numpy(), cols.shape[1])
        T = sparse.csr_matrix((vals.detach().reshape(-1).numpy(), (rows, cols.reshape(-1).numpy())),
                              shape=(m, n))
        rew = torch.zeros(m).index_add(0, qrows, rew)
        system = (sparse.eye(n) - T[:n]).tocsc()
        r = rew.detach().numpy()
        v = spsolve(system, r[:n])
        t0 = np.asarray(T[n:].mean(0)).ravel()
        mu = spsolve(system.T.tocsc(), t0)
        vt, mut = torch.as_tensor(v), torch.as_tensor(mu)
        Tv = torch.zeros(m).index_add(0, qrows, (vals * vt[cols]).sum(1))      # (m,)
        self.initial_values = (rew[n:] + Tv[n:]).detach()        # the model's value per initial state
        value = float(r[n:].mean() + t0 @ v)
        surrogate = (rew[n:] + Tv[n:]).mean() + (mut * (rew[:n] + Tv[:n])).sum()
        return surrogate - surrogate.detach() + value

    def _two_hop(self, U: torch.Tensor, nbk: torch.Tensor, w: torch.Tensor, g: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Rewards (m,), value columns (m, K L) and entries (m, K L) of the moved successors."""
        ds = self.S.shape[1]
        dx = self.X[:, None] - self.S[nbk]
        du = U[:, None] - self.A[nbk]
        inputs = torch.cat([dx if self.mode in ("ll", "full") else 0.0 * dx, du], -1)
        pred = torch.einsum("mkf,mkfo->mko", inputs, self.coef[nbk])
        succ = self.S2[nbk] + pred[..., :ds] + (dx if self.mode == "full" else 0.0)
        rew = (w * (self.R[nbk] + pred[..., ds])).sum(1)
        _, near = self.next_tree.query(succ.detach().reshape(-1, ds).numpy() / self.hs,
                                       INTERP_NEIGHBOURS)
        near = torch.as_tensor(near)
        logm = -0.5 * (((succ.reshape(-1, 1, ds) - self.S2[near]) / torch.as_tensor(self.hs)) ** 2
                       ).sum(-1)
        M = torch.softmax(logm, 1).reshape(len(self.X), -1, INTERP_NEIGHBOURS)
        if self.absorb:   # a successor far from every data next state halts at v_abs
            thin = thinness(torch.logsumexp(logm, 1), SUPPORT_RADIUS).reshape(M.shape[:2])
            M = M * (1.0 - thin)[..., None]
            rew = rew + (w * g * thin).sum(1) * self.absorbing_value
        elif self.penalty:   # a MOPO-like reward penalty for successors off the data, no halt
            thin = thinness(torch.logsumexp(logm, 1), SUPPORT_RADIUS).reshape(M.shape[:2])
            rew = rew - self.penalty_scale * (w * thin).sum(1)
        vals = (g[..., None] * w[..., None] * M).reshape(len(self.X), -1)
        return rew, near.reshape(len(self.X), -1), vals

    def real_return(self, policy: nn.Module, episodes: int) -> float:
        return float(np.mean(self.task.evaluate(policy.float(), self.cfg, self.seed, episodes)))


class Ensemble:
    """Models of one data set at several bandwidth scales, or of bootstrap resamples of it.

    ``J`` is their mean, their minimum, or (``lcb``) their mean minus ``beta`` standard
    deviations, a penalty on policies whose value the resampled models disagree about.
    """

    def __init__(self, spec: str, mode: str, task_settings: dict[str, int], absorb: bool,
                 scales: list[float], aggregate: str, bootstrap: int = 0, beta: float = 1.0,
                 draws: int = 0, penalty: bool = False) -> None:
        if bootstrap:
            self.models = [TwoHopModel(spec, mode, task_settings, absorb, 1.0, b, draws=draws,
                                       penalty=penalty) for b in range(bootstrap)]
        else:
            self.models = [TwoHopModel(spec, mode, task_settings, absorb, c, draws=draws,
                                       penalty=penalty) for c in scales]
        self.aggregate, self.beta = aggregate, beta
        first = self.models[0]
        self.seed, self.task, self.cfg, self.data = first.seed, first.task, first.cfg, first.data

    def J(self, policy: nn.Module) -> torch.Tensor:
        values = torch.stack([m.J(policy) for m in self.models])
        if self.aggregate == "lcb":
            return values.mean() - self.beta * values.std()
        return values.mean() if self.aggregate == "mean" else values.min()

    def real_return(self, policy: nn.Module, episodes: int) -> float:
        return self.models[0].real_return(policy, episodes)


def trace(specs: list[str], mode: str, adaptive: float, times: list[int]) -> None:
    """The model's value of the swing-up controller at states of its real trajectory from the
    bottom at rest, against the real discounted value-to-go there."""
    gamma = 0.99
    episode = rollout(make_pendulum_env(max(times) + 1000), ReferencePolicy("swingup"),
                      pendulum_bottom_setter, seed=0)
    to_go = np.zeros(episode["length"] + 1)
    for k in range(episode["length"] - 1, -1, -1):
        to_go[k] = episode["rewards"][k] + gamma * to_go[k + 1]
    states = episode["states"][times]
    for spec in specs:
        model = TwoHopModel(spec, mode, {}, adaptive=adaptive, initial_states=states)
        with torch.no_grad():
            model.J(ReferencePolicy("swingup"))
        gap = model.tree.query(states / model.hs)[0]
        print(spec, mode, "state bandwidths", np.round(model.hs, 3), flush=True)
        for k, t in enumerate(times):
            theta = np.arctan2(states[k, 1], states[k, 0])
            print(f"  t={t:4d} theta={theta:+.2f} theta_dot={states[k, 2]:+.2f} real value "
                  f"{to_go[t]:8.1f} model value {float(model.initial_values[k]):8.1f} nearest data "
                  f"state {gap[k]:.1f} bandwidths away", flush=True)


def evaluate(specs: list[str], modes: list[str], absorb: bool, adaptive: float = 0.0) -> None:
    print("real discounted return from the bottom:",
          {k: round(reference_return(k), 1) for k in REFERENCES}, flush=True)
    for spec in specs:
        for mode in modes:
            model = TwoHopModel(spec, mode, {}, absorb and mode != "kernel", adaptive=adaptive)
            with torch.no_grad():
                js = {k: round(float(model.J(ReferencePolicy(k))), 1) for k in REFERENCES}
            print(spec, mode, "J_hat:", js, flush=True)


def fit(spec: str, mode: str, updates: int, task_settings: dict[str, int], absorb: bool,
        scales: list[float], aggregate: str, bootstrap: int = 0, beta: float = 1.0,
        draws: int = 0, penalty: bool = False, restart: int = 0) -> None:
    model = Ensemble(spec, mode, task_settings, absorb, scales, aggregate, bootstrap, beta, draws,
                     penalty)
    torch.manual_seed(model.seed if restart == 0 else model.seed + 1000 * restart)
    policy = make_policy(model.task, model.cfg, model.data).double()
    opt = torch.optim.Adam(policy.parameters(), lr=model.cfg.nopg.learning_rate)
    start, curve = time.time(), []
    for it in range(1, updates + 1):
        opt.zero_grad()
        J = model.J(policy)
        (-J).backward()
        opt.step()
        if it in (1, 100, 250, 500, 750, 1000, 1500) or it == updates:
            ret = model.real_return(policy, 1)
            policy.double()
            curve.append((it, round(J.item(), 1), round(ret, 1)))
    ret = model.real_return(policy, model.cfg.final_eval_episodes)
    print(f"FINAL {spec} {task_settings} mode={mode} absorb={absorb} scales={scales} {aggregate} "
          f"bootstrap={bootstrap} beta={beta} draws={draws} penalty={penalty} restart={restart}: "
          f"return {ret:.1f} J {J.item():.1f} "
          f"time {time.time() - start:.0f}s curve (update, J_hat, return) {curve}", flush=True)


def main() -> None:
    warnings.simplefilter("ignore")
    torch.set_default_dtype(torch.float64)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    ev = sub.add_parser("evaluate", help="J_hat of the reference policies under each model")
    ev.add_argument("specs", nargs="+", help="TASK:SEED (pendulum tasks)")
    ev.add_argument("--modes", default=",".join(MODES))
    ev.add_argument("--absorb", action="store_true")
    ev.add_argument("--adaptive", type=float, default=0.0,
                    help="sample-point bandwidths h (r_j / median r) ** ADAPTIVE (0: off)")
    tr = sub.add_parser("trace", help="the model's value along the real swing-up")
    tr.add_argument("specs", nargs="+", help="TASK:SEED (pendulum tasks)")
    tr.add_argument("--mode", choices=MODES, default="kernel")
    tr.add_argument("--adaptive", type=float, default=0.0)
    tr.add_argument("--times", default="0,10,20,30,40,50,60,70,80,100,200")
    ft = sub.add_parser("fit", help="NOPG-D on one model")
    ft.add_argument("spec", help="TASK:SEED")
    ft.add_argument("--mode", choices=MODES, default="full")
    ft.add_argument("--updates", type=int, default=1000)
    ft.add_argument("--absorb", action="store_true",
                    help="successors far from the data's next states halt at a pessimistic value")
    ft.add_argument("--scales", default="1", help="bandwidth scales of an ensemble, e.g. 0.5,1,2")
    ft.add_argument("--aggregate", choices=("mean", "min", "lcb"), default="mean")
    ft.add_argument("--bootstrap", type=int, default=0,
                    help="B models of bootstrap resamples of the data instead of --scales")
    ft.add_argument("--beta", type=float, default=1.0, help="lcb: mean - beta * std")
    ft.add_argument("--penalty", action="store_true",
                    help="successors far from the data's next states (kernel: queries far from "
                         "the data's pairs) cost a reward penalty of (max r - pessimistic reward "
                         "per step) times their thinness")
    ft.add_argument("--restart", type=int, default=0,
                    help="another initialisation of the policy (0: the seed's own)")
    ft.add_argument("--draws", type=int, default=0,
                    help="next states drawn afresh per transition at every update (0: kernel mean)")
    ft.add_argument("--set", action="append", default=[], metavar="KEY=INT",
                    help="task setting, e.g. n_theta=10")
    args = parser.parse_args()
    if args.command == "trace":
        trace(args.specs, args.mode, args.adaptive, [int(t) for t in args.times.split(",")])
    elif args.command == "evaluate":
        evaluate(args.specs, args.modes.split(","), args.absorb, args.adaptive)
    else:
        settings = {k: int(v) for k, v in (item.split("=") for item in args.set)}
        fit(args.spec, args.mode, args.updates, settings, args.absorb,
            [float(c) for c in args.scales.split(",")], args.aggregate, args.bootstrap, args.beta,
            args.draws, args.penalty, args.restart)


if __name__ == "__main__":
    main()
