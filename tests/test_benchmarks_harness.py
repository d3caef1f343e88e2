"""benchmarks/_harness.py (the benchmarks' shared timing, output and flags) and the READMEs of
benchmarks/ and scripts/ naming every script there."""

import argparse
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("_harness", ROOT / "benchmarks" / "_harness.py")
harness = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("_harness", harness)       # dataclasses look their module up by name
_spec.loader.exec_module(harness)


def test_timing_helpers():
    with harness.Stopwatch() as watch:
        sum(range(10_000))
    assert watch.wall_s >= 0 and watch.cpu_s >= 0
    out, watch = harness.timed(lambda a, b=0: a + b, 1, b=2)
    assert out == 3 and watch.wall_s >= 0
    best, out = harness.best_of(lambda: "x", 3)
    assert out == "x" and best >= 0

    class Thing:
        def f(self, x):
            if x < 0:
                raise ValueError
            return 2 * x

    thing, log = Thing(), []
    harness.time_calls(thing, "f", log)
    assert thing.f(2) == 4 and len(log) == 1
    try:
        thing.f(-1)
    except ValueError:
        pass
    assert len(log) == 2                      # a call that raised is logged too
    assert harness.peak_rss_mb() > 0


def test_numbers_and_output(tmp_path):
    assert harness.median([3.0, 1.0, 2.0, 10.0]) == 2.5
    assert harness.ratio(2.0, 4.0) == 0.5
    assert str(harness.ratio(1.0, 0.0)) == "nan" and str(harness.ratio(None, 1.0)) == "nan"
    assert harness.ratios_to([{"t": 2.0}, {"t": 6.0}], "t", 2.0) == [1.0, 3.0]
    path = tmp_path / "sub" / "r.jsonl"
    harness.append_jsonl(path, {"a": 1})
    harness.append_jsonl(path, {"a": 2.5})
    assert harness.read_jsonl(path) == [{"a": 1}, {"a": 2.5}]
    csv_path = harness.write_csv(tmp_path / "r.csv", [{"n": 1, "t": 1 / 3}], float_format=".3g")
    assert csv_path.read_text().splitlines() == ["n,t", "1,0.333"]
    table = harness.format_table([{"n": 10, "ms": 1.25}, {"n": 1000}],
                                 [("n", "n", "6d"), ("time ms", "ms", ".1f")])
    assert table.splitlines() == ["     n time ms", "    10     1.2", "  1000       -"]


def test_flags_keep_the_old_spellings():
    parser = argparse.ArgumentParser()
    harness.add_out_arg(parser, "--json")
    harness.add_seeds_arg(parser)
    assert parser.parse_args(["--json", "x.json"]).out == "x.json"
    args = parser.parse_args(["--out", "y.json", "--seeds", "3", "4"])
    assert args.out == "y.json" and args.seeds == [3, 4]
    assert parser.parse_args([]).seeds == [0]


def test_the_readmes_name_every_script():
    readme = (ROOT / "benchmarks" / "README.md").read_text()
    for path in (ROOT / "benchmarks").glob("*.py"):
        if path.name != "_harness.py":
            assert f"`{path.name}`" in readme, path.name
    readme = (ROOT / "scripts" / "README.md").read_text()
    for path in [*(ROOT / "scripts").glob("*.py"), *(ROOT / "scripts" / "device").glob("*.sh")]:
        assert path.name in readme, path.name
