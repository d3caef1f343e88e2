"""Recipes: several fits per seed, one kept by the judge (one anchored model of the data).

- the judge's score is the model's undiscounted episode return (the true return up to a bound on
  linear dynamics, the last step's reward included); a later candidate is kept where its
  return is higher by more than 1%, or, within 1%, where its ``J_hat`` under the judge is;
- each recipe's fit in a multi-recipe run is the fit that recipe gives alone, the kept one is
  the judge's best, and its log becomes ``log.csv``;
- the run's report: each recipe's mean return and seeds kept, Spearman of the judge and of
  ``J_hat`` with the return over all fits;
- ``auto`` adds ``stabilise`` where the episodes end in failures (terminals that earn less than
  the steps that go on keep earning over ``1 / (1 - gamma)`` steps), up to a data size, a
  number of initial states and one restart, and runs as the explicit list;
- where nothing ends, ``auto`` escalates to ``anchored`` only where the judge forecasts that
  ``given``'s rewards do not rise along its episodes (mean per step no higher than the
  discounted mean): escalated, the run equals the explicit ``given, anchored`` run; not
  escalated, the plain ``given`` run;
- ``stabilise`` resolves its horizon and ``top_k``; bad recipe lists are refused.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import make_arrays
from test_anchored import A_TRUE, B_TRUE, START, _controller, _linear_data
from test_search_horizon import _true_length
from test_terminal_bounds import BW, _pushing

from nopg import ModelConfig, NOPGConfig, TransitionDataset
from nopg.experiments import get_task, run_experiment, run_seed
from nopg.experiments.runner import judge_steps, recipes_report
from nopg.select.policy_selection import (
    FORECAST_RTOL,
    JudgeScore,
    anchored_config,
    best_score,
    judge_model,
    score_policy,
)
from nopg.select.recipes import (
    RECIPES,
    SELECTION_STARTS,
    apply_recipe,
    discount_horizon,
    ends_in_failure,
    escalation,
    gains_nothing,
    resolve_recipes,
    selection_starts,
)

pytestmark = pytest.mark.auto_recipes      # auto keeps the library's limit here (conftest)

BOUND = [[None, None], [1.0, None]]


def _true_episode(start: np.ndarray, force: float, steps: int) -> tuple[float, int]:
    """The double integrator's undiscounted return (reward ``1 + 0.5 x + 0.2 a``) and length
    up to the step whose next state passes ``x = 1``, that step's reward included."""
    s, ret = start.copy(), 0.0
    for t in range(1, steps + 1):
        ret += 1 + 0.5 * s[0] + 0.2 * force
        s = A_TRUE @ s + B_TRUE[:, 0] * force
        if s[0] > 1.0:
            return ret, t
    return ret, steps


def test_the_judge_forecasts_the_true_return_and_length():
    config = NOPGConfig(gamma=0.9,
                        model=ModelConfig(top_k=None, n_mc_next=None, terminal_bounds=BOUND,
                                          state_circles=None))
    anchored = anchored_config(config).model
    assert anchored.successors == "anchored" and anchored.top_k == "auto"
    judge = judge_model(_linear_data(), BW, config)
    pushed = score_policy(judge, _pushing(0.5), START, 60, seed=0)
    still = score_policy(judge, _pushing(0.0), START, 60, seed=0)
    truth = [_true_length(s, 0.5, 1.0, 60) for s in START]
    assert pushed.episode_steps_mean == np.mean(truth) and pushed.episode_steps_min == min(truth)
    assert (still.episode_steps_mean, still.episode_steps_min, still.steps) == (55.0, 50, 60)
    for score, force in ((pushed, 0.5), (still, 0.0)):
        episodes = [_true_episode(s, force, 60) for s in START]
        assert [t for _, t in episodes] == [_true_length(s, force, 1.0, 60) for s in START]
        assert score.episode_return_mean == pytest.approx(np.mean([r for r, _ in episodes]),
                                                          rel=1e-6)
    with torch.no_grad():
        assert pushed.J_hat == pytest.approx(float(judge.solution(_pushing(0.5), START).J),
                                             rel=1e-12)
    with pytest.raises(ValueError, match="steps"):
        judge.episode_returns(_pushing(0.0), START, 0)
    assert still.episode_return_mean > pushed.episode_return_mean
    assert best_score([pushed, still]) == 1              # the clearly higher return wins


def _forecast(value: float, j_hat: float = 0.0) -> JudgeScore:
    return JudgeScore(value, 10.0, 10, 10, j_hat, 0.0)


def test_forecasts_within_one_percent_tie_and_the_judges_j_hat_breaks_the_tie():
    assert FORECAST_RTOL == 0.01
    # held-out cart-pole seeds 12 and 19: both forecasts at the evaluation's length, the failing
    # policy (131 and 323 steps in the environment) with the lower J_hat under the judge
    assert best_score([_forecast(9999.72, 99.9923), _forecast(9999.97, 99.9911)]) == 0
    assert best_score([_forecast(9995.16, 85.4031), _forecast(9995.27, 99.9368)]) == 1
    assert best_score([_forecast(100.0, 5.0), _forecast(100.99, 4.0)]) == 0     # a tie
    assert best_score([_forecast(100.0, 5.0), _forecast(101.5, 4.0)]) == 1     # clearly better
    assert best_score([_forecast(101.5, 4.0), _forecast(100.0, 5.0)]) == 0     # clearly worse
    assert best_score([_forecast(-400.0, 1.0), _forecast(-397.0, 0.0)]) == 0   # 3 < 4: a tie
    assert best_score([_forecast(-400.0, 1.0), _forecast(-390.0, 0.0)]) == 1
    assert best_score([_forecast(118.1, 70.5), _forecast(9998.6, 99.98)]) == 1
    assert best_score([_forecast(5.0, 1.0), _forecast(5.0, 1.0)]) == 0           # equal: first
    # each later one is compared with the one kept so far
    assert best_score([_forecast(100.0), _forecast(200.0), _forecast(201.0)]) == 1
    assert best_score([_forecast(100.0), _forecast(100.5, 1.0), _forecast(300.0)]) == 2
    assert best_score([_forecast(100.0, 9.0), _forecast(100.5, 1.0)], rtol=0.0) == 1
    with pytest.raises(ValueError, match="no scores"):
        best_score([])
    with pytest.raises(ValueError, match="rtol"):
        best_score([_forecast(1.0)], rtol=-0.1)


def test_gains_nothing_compares_the_forecasts_mean_per_step_with_the_discounted_mean():
    gamma, steps = 0.9, 20
    # a constant reward r earns r a step both ways: no gain, at the boundary
    assert gains_nothing(JudgeScore(-2.0 * steps, steps, steps, steps, -2.0 / (1 - gamma), 0), gamma)
    assert not gains_nothing(JudgeScore(-1.9 * steps, steps, steps, steps, -20.0, 0), gamma)
    assert gains_nothing(JudgeScore(3.0 * steps, steps, steps, steps, 31.0, 0), gamma)
    assert not gains_nothing(JudgeScore(3.2 * steps, steps, steps, steps, 31.0, 0), gamma)
    # the double integrator (reward 1 + 0.5 x + 0.2 a, no end) under a controller that brings
    # it to rest at x = 0: from x < 0 its rewards rise along the episode, from x > 0 they fall
    config = NOPGConfig(gamma=gamma, model=ModelConfig(top_k=None, n_mc_next=None, state_circles=None))
    judge = judge_model(_linear_data(), BW, config)
    below, above = np.array([[-0.6, 0.0], [-0.4, 0.0]]), np.array([[0.6, 0.0], [0.4, 0.0]])
    rising = score_policy(judge, _controller(), below, 60, seed=0)
    falling = score_policy(judge, _controller(), above, 60, seed=0)
    assert not gains_nothing(rising, gamma) and gains_nothing(falling, gamma)


def test_escalation_where_nothing_ends_with_auto_alone_at_any_size():
    endless = TransitionDataset(**make_arrays(terminals=()))         # 40 transitions
    ending = TransitionDataset(**make_arrays())                       # 2 terminal
    large = TransitionDataset(**make_arrays(n=6000, terminals=()))    # no size gate
    assert escalation(("auto",), endless) == "anchored"
    assert escalation(("auto",), large) == "anchored"
    assert escalation(("auto",), endless, restarts=2) is None
    assert escalation(("auto",), ending) is None
    assert escalation(("given",), endless) is None
    assert escalation(("given", "anchored"), endless) is None
    with pytest.raises(ValueError, match="unknown recipe 'anchord'"):
        escalation(("anchord",), endless)


@pytest.mark.parametrize("fires", [True, False])
def test_auto_escalates_to_anchored_as_the_explicit_list_or_runs_given_alone(
        tmp_path, monkeypatch, fires):
    task, config = _config()                        # pendulum-grid, 50 transitions, no end
    assert config.recipes == ("auto",)
    monkeypatch.setattr("nopg.select.auto.gains_nothing", lambda score, gamma: fires)
    auto = run_seed(task, config, 0, tmp_path / "auto", progress=False).to_dict()
    escalated = auto["escalation"]
    assert escalated["recipe"] == "anchored" and escalated["fitted"] is fires
    judged = auto["recipes"][[r["recipe"] for r in auto["recipes"]].index("given")]["judge"]
    assert escalated["reward_per_step"] == pytest.approx(
        judged["episode_return_mean"] / judged["steps"], rel=1e-12)
    assert escalated["discounted_reward_per_step"] == pytest.approx(
        (1 - config.nopg.gamma) * judged["J_hat"], rel=1e-12)
    same = ["given", "anchored"] if fires else ["given"]
    assert sorted(r["recipe"] for r in auto["recipes"]) == sorted(same)
    explicit = run_seed(task, config.replace(recipes=same), 0, tmp_path / "explicit",
                        progress=False).to_dict()
    assert auto["J_hat"] == pytest.approx(explicit["J_hat"], rel=1e-12)
    assert auto["return_mean"] == pytest.approx(explicit["return_mean"], rel=1e-12)
    if fires:
        assert auto["recipe"] == explicit["recipe"]
        assert [r["J_hat"] for r in auto["recipes"]] == \
            pytest.approx([r["J_hat"] for r in explicit["recipes"]], rel=1e-12)
    else:
        assert not (tmp_path / "auto" / "log_anchored.csv").exists()


def test_episode_returns_weight_each_reward_by_the_models_survival(monkeypatch):
    """Step t's reward counts with the product of the continuations before it (the model's soft
    ends): a rollout that hovers where half the data end collects a geometric share."""
    judge = judge_model(_linear_data(), BW, NOPGConfig(gamma=0.9, model=ModelConfig(
        top_k=None, n_mc_next=None, terminal_bounds=[[None, None], [None, 1e9]],
        state_circles=None)))
    policy = _pushing(0.1)
    monkeypatch.setattr(judge, "anchor_continuation", lambda s: s.new_ones(s.shape[:-1]))
    cumulative = [judge.episode_returns(policy, START, t)[0] for t in range(1, 6)]
    rewards = np.diff(np.concatenate([[np.zeros(len(START))], cumulative]), axis=0)  # (5, m)
    for going, length in ((0.6, 5), (0.4, 1)):
        monkeypatch.setattr(judge, "anchor_continuation",
                            lambda s, g=going: s.new_full(s.shape[:-1], g))
        returns, lengths = judge.episode_returns(policy, START, 5)
        assert returns == pytest.approx((going ** np.arange(5)[:, None] * rewards).sum(0),
                                        rel=1e-12)
        assert list(lengths) == [length] * len(START)


def _config(**changes):
    task = get_task("pendulum-grid")
    config = task.default_config().replace(
        n_updates=3, eval_every=100,
        task={"n_theta": 5, "n_theta_dot": 5, "n_action": 2, "eval_steps": 50,
              "portrait_resolution": 10}, **changes)
    return task, config


def test_recipes_fit_each_alone_and_keep_the_judges_best(tmp_path, monkeypatch):
    monkeypatch.setitem(RECIPES["stabilise"], "n_updates", 2)       # 2 CMA-ES generations
    task, config = _config(recipes=["given", "stabilise"])
    summary = run_experiment(task, config.replace(seeds=[0]), tmp_path, progress=False,
                             run_name="run").to_dict()
    res, both = summary["seeds"][0], tmp_path / "run" / "seed_0"
    rows = {r["recipe"]: r for r in res["recipes"]}
    assert set(rows) == {"given", "stabilise"} and res["recipes"][0]["kept"]
    assert sum(r["kept"] for r in rows.values()) == 1
    kept = res["recipe"]
    forecasts = [JudgeScore(**rows[name]["judge"]) for name in ("given", "stabilise")]
    assert kept == ("given", "stabilise")[best_score(forecasts, rule=config.judge_rule)]
    assert rows[kept]["kept"] and config.judge_rule == "sampled"
    assert res["J_hat"] == pytest.approx(rows[kept]["J_hat"], rel=1e-12)
    assert res["return_mean"] == pytest.approx(rows[kept]["return_mean"], rel=1e-12)
    assert (both / "log.csv").read_text() == \
        (both / f"log_{kept}.csv").read_text()
    assert len((both / "log_stabilise.csv").read_text().splitlines()) == 3
    other = "given" if kept == "stabilise" else "stabilise"
    assert (both / f"checkpoint_{other}" / "policy.pt").is_file()
    assert not (both / f"checkpoint_{kept}").exists()
    report = summary["recipes"]
    assert report["per_recipe"][kept]["kept"] == 1 and report["fits"] == 2
    assert report["per_recipe"][kept]["return_mean"] == pytest.approx(res["return_mean"])
    assert "rank correlation with the evaluation return over 2 fits" in \
        (tmp_path / "run" / "run.log").read_text()
    json.dumps(res)
    # each recipe's fit is the one it gives alone (the given one: the plain default run)
    for name in ("given", "stabilise"):
        alone = run_seed(task, config.replace(recipes=[name]), 0, tmp_path / name,
                         progress=False).to_dict()
        assert alone["J_hat"] == pytest.approx(rows[name]["J_hat"], rel=1e-12)
        assert alone["return_mean"] == pytest.approx(rows[name]["return_mean"], rel=1e-12)


def test_stabilise_resolves_its_settings_and_bad_recipes_are_refused():
    task = get_task("cartpole-random")
    config = task.default_config()
    assert config.recipes == ("auto",) and config.nopg.model.top_k is None
    stab = apply_recipe(config, "stabilise")
    assert stab.recipes == ("stabilise",) and stab.hidden == () and stab.normalize_states
    assert (stab.nopg.model.successors, stab.nopg.optimizer.name, stab.nopg.model.top_k) == \
        ("anchored", "cma-es", "auto")
    assert stab.nopg.optimizer.horizon == 1000 and stab.n_updates == 50      # 10 / (1 - 0.99)
    assert apply_recipe(config.replace(**{"nopg.gamma": 0.95}), "stabilise").nopg.optimizer.horizon \
        == 200
    assert apply_recipe(config, "given") == config.replace(recipes=["given"])   # only the list
    assert judge_steps(config) == 10_000                   # the task's evaluation length
    assert judge_steps(config.replace(task={"eval_steps": None})) == 1000 == discount_horizon(0.99)
    anchored = apply_recipe(config, "anchored")
    assert (anchored.nopg.model.successors, anchored.nopg.model.top_k,
            anchored.nopg.optimizer.name) == ("anchored", "auto", "adam") and anchored.hidden == config.hidden
    assert anchored.nopg.starts.data == 7 and config.nopg.starts.data is None
    for bad, match in (([], "non-empty"), (["given", "given"], "twice"),
                       (["given", "stabilize"], "unknown recipe 'stabilize'")):
        with pytest.raises(ValueError, match=match):
            config.replace(recipes=bad)
    with pytest.raises(ValueError, match="'recipes' .* and 'restarts'"):
        config.replace(recipes=["given", "stabilise"], restarts=2)


def test_auto_adds_stabilise_where_episodes_fail_on_small_data_and_runs_as_the_list(tmp_path, monkeypatch):
    arrays = make_arrays()                         # 40 transitions, 2 terminal
    term = arrays["terminals"]

    def with_rewards(going: float, ending: float, **changes) -> TransitionDataset:
        """The steps that go on earn ``going`` on the mean, the terminal ones ``ending``."""
        rewards = arrays["rewards"] - arrays["rewards"][~term].mean() + going
        rewards[term] = ending
        return TransitionDataset(**{**arrays, "rewards": rewards, **changes})

    gamma = 0.9                                    # the steps that go on keep 10 x their mean
    failing = with_rewards(0.1, 0.5)               # an end forfeits 1.0 for 0.5: a failure
    bonus = with_rewards(0.1, 2.0)                 # an end pays 2.0 for 1.0: a goal
    goal = with_rewards(-0.1, 0.5)                 # the steps that go on cost: a goal
    endless = with_rewards(0.1, 0.5, terminals=np.zeros(40, dtype=bool))
    everything_ends = with_rewards(0.1, 0.5, terminals=np.ones(40, dtype=bool))
    assert 0 < (failing.rewards[~term] > 0).mean() < 1      # positive on the mean only
    assert ends_in_failure(failing, gamma) and ends_in_failure(bonus, 0.99)   # keeps 10.0
    for data in (bonus, goal, endless, everything_ends):
        assert not ends_in_failure(data, gamma)
    assert resolve_recipes(("auto",), failing, gamma) == ("given", "stabilise")
    for data in (bonus, goal, endless, everything_ends):
        assert resolve_recipes(("auto",), data, gamma) == ("given",)
    assert resolve_recipes(("auto",), failing, gamma, restarts=2) == ("given",)
    assert resolve_recipes(("anchored", "given"), goal, gamma) == ("anchored", "given")
    large = make_arrays(n=6000)                                  # no size gate
    large["rewards"][large["terminals"]] = large["rewards"].min() - 100.0
    assert resolve_recipes(("auto",), TransitionDataset(**large), gamma) == ("given", "stabilise")
    for bad, match in ((["auto", "given"], "cannot stand beside"), (["atuo"], "or 'auto' alone")):
        with pytest.raises(ValueError, match=match):
            resolve_recipes(tuple(bad), failing, gamma)
    with pytest.raises(ValueError, match="resolve it first"):
        apply_recipe(get_task("cartpole-random").default_config(), "auto")
    monkeypatch.setitem(RECIPES["stabilise"], "n_updates", 2)
    task = get_task("cartpole-random")                        # 40 transitions, 1 pole fallen
    config = task.default_config().replace(
        n_updates=3, eval_every=100, recipes=["auto"],
        task={"n_samples": 40, "n_initial_states": 3, "eval_steps": 50, "plot_steps": 20})
    auto = run_seed(task, config, 0, tmp_path / "auto", progress=False).to_dict()
    explicit = run_seed(task, config.replace(recipes=["given", "stabilise"]), 0,
                        tmp_path / "explicit", progress=False).to_dict()
    assert [r["recipe"] for r in auto["recipes"]] == [r["recipe"] for r in explicit["recipes"]]
    assert auto["J_hat"] == pytest.approx(explicit["J_hat"], rel=1e-12)
    spent = run_seed(task, config.replace(budget=0.0), 0, tmp_path / "spent", progress=False).to_dict()
    given = run_seed(task, config.replace(recipes=["given"]), 0, tmp_path / "given",
                     progress=False).to_dict()
    assert spent["J_hat"] == pytest.approx(given["J_hat"], rel=1e-12)
    report = spent["fit_report"]
    assert [c["name"] for c in report["candidates"]] == ["given"]
    assert any("recipe stabilise is not fitted: the budget" in d for d in report["decisions"])


def test_the_tasks_data_end_in_failures_where_a_pole_falls_and_not_at_a_goal(
        tmp_path, monkeypatch, caplog):
    """Small samples of the real tasks' data: the cart-pole's fallen poles and the inverted
    pendulum's end its episodes in failures; mountain car's goal and the pendulum's endless
    episodes do not (an explicit ``stabilise`` there is warned about)."""
    def data(name: str, **settings):
        task = get_task(name)
        return task.make_dataset(task.default_config().replace(task=settings), 0)

    assert ends_in_failure(data("cartpole-random", n_samples=200), 0.99)
    assert ends_in_failure(data("invertedpendulum-random", n_samples=300), 0.99)
    mountain_car = data("mountaincar-uniform", n_samples=3000)    # +100 at the goal
    assert mountain_car.terminals.any() and not ends_in_failure(mountain_car, 0.99)
    human = data("mountaincar-human")                 # -1 a step, the goal's too
    assert human.terminals.any() and not ends_in_failure(human, 0.99)
    assert not ends_in_failure(data("pendulum-grid", n_theta=5, n_theta_dot=5), 0.99)

    def stop(*args, **kwargs):
        raise RuntimeError("the fits are not this test's")

    monkeypatch.setattr("nopg.select.auto.AutoNOPG._fit_recipes", stop)
    task, config = _config(recipes=["given", "stabilise"])
    with caplog.at_level("WARNING", logger="nopg.select.auto"), \
            pytest.raises(RuntimeError, match="not this test's"):
        run_seed(task, config, 0, tmp_path, progress=False).to_dict()
    assert "do not end in failures" in caplog.text


def _row(recipe: str, kept: bool, ret: float | None, j_hat: float, forecast: float) -> dict:
    return {"recipe": recipe, "kept": kept, "return_mean": ret, "J_hat": j_hat,
            "judge": {"episode_return_mean": forecast}}


def test_selection_starts_keep_few_states_spread_over_all():
    """At most SELECTION_STARTS initial states for the judge and the moved-successor recipes:
    all of them up to that many, else a deterministic farthest-point spread that covers them."""
    rng = np.random.default_rng(0)
    few = rng.normal(size=(SELECTION_STARTS, 3))
    assert np.array_equal(selection_starts(few), few)
    many = rng.normal(size=(817, 3))
    picked = selection_starts(many)
    assert picked.shape == (SELECTION_STARTS, 3)
    assert np.array_equal(picked, selection_starts(many))               # deterministic
    assert {tuple(r) for r in picked} <= {tuple(r) for r in many}       # rows of the states
    assert np.array_equal(picked[0], many[0])                           # the first state first

    def cover(subset):          # the farthest any state lies from the subset (k-centre radius)
        return np.linalg.norm(many[:, None] - subset[None], axis=2).min(axis=1).max()

    assert cover(picked) < 0.8 * cover(many[:SELECTION_STARTS])        # spread, not the first
    assert len(selection_starts(many, 4)) == 4


def test_the_recipes_report_counts_kept_seeds_and_ranks_all_fits():
    seeds = [{"recipes": [_row("given", True, 100.0, 5.0, 90.0),
                          _row("stabilise", False, 20.0, 9.0, 30.0)]},
             {"recipes": [_row("stabilise", True, 80.0, 8.0, 70.0),
                          _row("given", False, 10.0, 7.0, 15.0)]},
             {"recipes": [_row("given", True, None, 1.0, 1.0),            # no evaluation
                          _row("stabilise", False, None, 2.0, 0.0)]}]
    report = recipes_report(seeds)
    given, stab = report["per_recipe"]["given"], report["per_recipe"]["stabilise"]
    assert (given["seeds"], given["kept"], stab["seeds"], stab["kept"]) == (3, 2, 3, 1)
    assert given["return_mean"] == pytest.approx(55.0) and stab["return_mean"] == pytest.approx(50.0)
    assert given["return_ci"][0] >= 10.0 and given["return_ci"][1] <= 100.0
    assert report["fits"] == 4
    # returns 100, 20, 80, 10: the forecasts rank them exactly; J_hat 5, 9, 8, 7 ranks 1, 4, 3, 2
    assert report["spearman_judge"] == pytest.approx(1.0)
    assert report["spearman_own_J_hat"] == pytest.approx(1 - 6 * (9 + 4 + 0 + 1) / 60)
    assert recipes_report([{"recipes": []}, {}]) is None
    json.dumps(report)
