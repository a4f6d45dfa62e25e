"""MkDocs hook: MathJax ships with the site, so every formula renders without the network.

MathJax 2.7 comes from the ``jupyter-server-mathjax`` package (the docs extra installs it); after the build its static
files are copied to ``site/javascripts/mathjax/``.  Notebook pages load it through mkdocs-jupyter's
``custom_mathjax_url`` (``mkdocs.yml``), the site's own pages through ``docs/javascripts/mathjax.js``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from mkdocs.exceptions import PluginError

TARGET = Path("javascripts") / "mathjax"


def mathjax_static() -> Path:
    """The folder holding ``MathJax.js`` in the installed ``jupyter_server_mathjax`` package."""
    try:
        import jupyter_server_mathjax
    except ImportError:
        raise PluginError("the site ships MathJax from jupyter-server-mathjax: pip install -e '.[docs]'") from None
    static = Path(jupyter_server_mathjax.__file__).resolve().parent / "static"
    if not (static / "MathJax.js").is_file():
        raise PluginError(f"no MathJax.js in {static}")
    return static


def on_config(config):
    mathjax_static()  # fail early, before the notebooks are executed
    return config


def on_post_build(config) -> None:
    dest = Path(config.site_dir) / TARGET
    shutil.copytree(mathjax_static(), dest, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__", "*.py"))
