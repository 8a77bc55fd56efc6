"""Sphinx configuration for rlm-kernel's documentation (MyST, myst-nb,
pydata-sphinx-theme). Built by ``./dev docs``; CI builds it with warnings as
errors (``-W --keep-going -n``). The references are generated from the code
by the extensions in ``_ext/``; the examples are executed before the build
against the scripted model (``_ext/rlm_examples.py``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# litellm (imported by autodoc and the examples' kernels) reads its cost map locally, never from the network
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
sys.path.insert(0, str(HERE / "_ext"))

from rlm_kernel import __version__  # noqa: E402

project = "rlm-kernel"
author = "the rlm-kernel authors"
copyright = "the rlm-kernel authors"  # noqa: A001
version = release = __version__

extensions = [
    "myst_nb",  # MyST Markdown pages and notebooks (brings myst_parser)
    "sphinx.ext.autodoc",
    "sphinx_copybutton",
    "sphinx_design",
    # ours: references generated from the code, the examples executed, internal links checked
    "rlm_options",
    "rlm_cli",
    "rlm_magics",
    "rlm_schema",
    "rlm_examples",
    "rlm_links",
]

root_doc = "index"
exclude_patterns = ["_build", "**.ipynb_checkpoints", "Thumbs.db", ".DS_Store", "README.md"]
nitpicky = True
# Types from other libraries in the API's signatures: no intersphinx (the build stays offline).
nitpick_ignore_regex = [
    ("py:class", r"(os|typing|collections\.abc|pathlib|nbformat|argparse|rlm_kernel\.engine)\..*"),
    ("py:class", r"(Any|NotebookNode|RunResult|Sink|Approver|Sequence|PathLike)"),
]

# -- MyST -------------------------------------------------------------------------
myst_enable_extensions = ["colon_fence", "deflist", "fieldlist", "attrs_inline"]
myst_heading_anchors = 4  # [text](page.md#a-heading) links, checked by the build
suppress_warnings: list[str] = []
smartquotes = False  # flags and code-like text stay as written (--model, not an en dash)

# -- myst-nb: the examples are executed by rlm_examples before the build ----------------
nb_execution_mode = "off"
nb_output_stderr = "show"
nb_merge_streams = True
nb_render_markdown_format = "gfm"  # the kernel's markdown outputs hold GitHub tables (a batch of sub-calls)
# the sub-call widgets' views need our labextension; their markdown table is the same record
nb_mime_priority_overrides = [("html", "application/vnd.jupyter.widget-view+json", None)]

# -- autodoc ------------------------------------------------------------------------
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_format = "short"

# -- HTML: the pydata theme, as JupyterLab, ipywidgets and jupyter-ai use ------------------
html_theme = "pydata_sphinx_theme"
html_title = "rlm-kernel"
html_static_path = ["_static"]
html_css_files = ["rlm.css"]
html_theme_options = {
    "navbar_align": "left",
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version", "theme-version"],
}
html_sidebars = {"index": [], "getting-started/index": [], "contributing": []}  # pages without a section to navigate
html_show_sourcelink = False
html_last_updated_fmt = None
