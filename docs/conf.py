"""Sphinx configuration of the nopg documentation site.

Build it (warnings are errors) from the repository root::

    sphinx-build -W -b html docs docs/_build/html
"""

import os
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "src")))

import nopg  # noqa: E402

project = "nopg"
author = "the nopg authors"
copyright = "2026, the nopg authors"
release = nopg.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "numpydoc",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]

# MyST: GitHub-style heading anchors, so that the journals' `page.md#heading` links resolve.
myst_enable_extensions = ["colon_fence", "deflist", "dollarmath"]
myst_heading_anchors = 4

# API reference: autodoc + autosummary, numpy-style docstrings through numpydoc.
autosummary_generate = True
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "none"
# Methods that override gymnasium's (Env.step) would otherwise show its docstring, which is not
# valid reStructuredText.
autodoc_inherit_docstrings = False
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_validation_checks = set()

html_theme = "furo"
html_title = f"nopg {release}"
html_static_path = []
templates_path = ["_templates"]
