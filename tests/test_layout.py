"""The layout's boundaries: generic modules carry no task code."""

import subprocess
import sys


def test_generic_modules_import_no_task():
    """Evaluation, figures and the fit's plots know no environment (the pendulum's are apart)."""
    code = (
        "import sys\n"
        "import nopg.evaluation, nopg.plots, nopg.figures, nopg.policy_plots, nopg.bandwidth_plots\n"
        "bad = sorted(m for m in sys.modules if m.startswith(('nopg.envs', 'nopg.experiments')))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"generic modules pulled in task modules: {out.stdout.strip()}"
