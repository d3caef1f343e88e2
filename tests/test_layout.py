"""The layout's boundaries: math modules import no gymnasium or matplotlib, generic modules no task."""

import subprocess
import sys


def _imported(modules: str, prefixes: tuple[str, ...]) -> list[str]:
    """The modules starting with ``prefixes`` that ``import <modules>`` loads in a fresh process."""
    code = (
        "import sys\n"
        f"import {modules}\n"
        f"print(','.join(sorted(m for m in sys.modules if m.startswith({prefixes!r}))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [m for m in out.stdout.strip().split(",") if m]


def test_math_modules_do_not_import_gymnasium_or_matplotlib():
    bad = _imported("nopg, nopg.bellman, nopg.gradient, nopg.solvers, nopg.analysis.estimators, "
                    "nopg.analysis.lqg_cases, nopg.analysis.statistics, nopg.analysis.parallel, "
                    "nopg.bandwidth_report", ("gymnasium", "matplotlib"))
    assert bad == [], f"importing the math modules pulled in: {bad}"


def test_generic_modules_import_no_task():
    """Evaluation, figures and the fit's plots know no environment (the pendulum's are apart)."""
    bad = _imported("nopg.evaluation, nopg.plots, nopg.figures, nopg.policy_plots, "
                    "nopg.bandwidth_plots", ("nopg.envs", "nopg.experiments"))
    assert bad == [], f"generic modules pulled in task modules: {bad}"
