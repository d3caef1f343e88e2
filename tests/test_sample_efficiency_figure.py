"""The sample-efficiency figure: every algorithm drawn and named, one panel per family on one y
axis, the legend clear of the panels; its summary read back from CSV."""

import math

import pytest

from nopg.experiments.sample_efficiency_report import (
    FAMILIES,
    figure_families,
    plot_sample_efficiency,
    read_summary,
    sample_efficiency_figure,
    write_summary,
)


def _summary(algorithms, sizes=(250, 1000), mean=0.0):
    online = {"DDPG", "TD3", "SAC"}
    rows = []
    for algo in algorithms:
        for size in sizes:
            kind = "online" if algo in online else "offline"
            rows.append({"task": "cartpole-random", "algorithm": algo, "kind": kind,
                         "size": 5 * size if kind == "online" else size,
                         "size_unit": "env steps" if kind == "online" else "transitions", "n": 3,
                         "mean": mean, "ci_lo": mean - 1.0, "ci_hi": mean + 1.0, "std": 1.0,
                         "wall_time_mean_s": 1.0, "J_hat_mean": None})
    return rows


ALL = [a for _, members in FAMILIES for a in members]


def test_every_algorithm_is_drawn_and_named_and_the_legend_covers_no_panel():
    from nopg.viz.figures import pyplot

    summary = _summary([*ALL, "BRAC"])          # an unknown offline algorithm joins a panel
    summary.append({**summary[0], "algorithm": "FAILED", "mean": math.nan, "ci_lo": math.nan,
                    "ci_hi": math.nan})          # every run failed: neither drawn nor named
    paper = [{"algorithm": "NOPG-D", "size": 500, "mean": 5000.0}]
    fig = sample_efficiency_figure(summary, title="t", reference=82.4, paper=paper)
    try:
        fig.canvas.draw()
        panels = [ax for ax in fig.axes if ax.axison]
        assert [ax.get_title() for ax in panels] == [name for name, _ in FAMILIES]
        (legend,) = fig.legends
        labels = [t.get_text() for t in legend.get_texts()]
        for algo in [*ALL, "BRAC"]:
            assert labels.count(algo) == 1, algo
        assert "FAILED" not in labels and "NOPG-D, paper" in labels and "demonstrators" in labels
        # the panels share one y axis
        assert len({ax.get_ylim() for ax in panels}) == 1
        # the legend lies outside every panel's data area
        box = legend.get_window_extent()
        for ax in panels:
            assert not box.overlaps(ax.get_window_extent()), ax.get_title()
        # within a panel every algorithm has its own colour and marker (line styles cycle)
        for ax in panels:
            lines = [container.lines[0] for container in ax.containers]   # the error bars' lines
            for attribute in ("get_color", "get_marker"):
                values = [str(getattr(line, attribute)()) for line in lines]
                assert len(values) == len(set(values)), (ax.get_title(), attribute)
    finally:
        pyplot().close(fig)


def test_equal_values_are_spread_sideways_not_stacked():
    from nopg.viz.figures import pyplot

    fig = sample_efficiency_figure(_summary(["NOPG-D", "NOPG-S"]))
    try:
        (ax,) = [ax for ax in fig.axes if ax.axison]
        xs = [tuple(container.lines[0].get_xdata()) for container in ax.containers]
        assert len(xs) == 2 and xs[0] != xs[1]
        assert all(abs(math.log10(a / b)) < 0.05 for a, b in zip(*xs))   # a few percent apart
    finally:
        pyplot().close(fig)


def test_panels_follow_the_families_present():
    assert figure_families(_summary(["BC", "NOPG-D", "SAC"])) == [
        ("NOPG", ["NOPG-D"]), ("offline: d3rlpy", ["BC"]), ("online", ["SAC"])]
    with pytest.raises(ValueError, match="no algorithm"):
        sample_efficiency_figure(_summary(["NOPG-D"], mean=math.nan))


def test_summary_round_trip_and_the_published_size(tmp_path):
    from PIL import Image

    summary = _summary(["NOPG-D", "BC", "TD3"])
    write_summary(summary, tmp_path / "summary.csv")
    back = read_summary(tmp_path / "summary.csv")
    assert back == summary
    path = plot_sample_efficiency(back, tmp_path / "figure.png", title="cartpole-random")
    assert Image.open(path).size == (900, 576)
