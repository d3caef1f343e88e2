"""The default method: :class:`AutoNOPG`, its configuration, the recipes, the judge's choice
among fits and snapshots, the fit report, the task knowledge it takes and the bandwidth report.
"""

from .auto import AutoNOPG
from .fit_report import FitReport
from .method_config import MethodConfig

__all__ = ["AutoNOPG", "MethodConfig", "FitReport"]
