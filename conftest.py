"""pytest's root configuration, for every run from this checkout (``make test``, or ``pytest`` alone): the notebooks'
stray-warning check (``tests/nb_warnings.py``).  A plugin named here rather than with ``-p`` in pyproject.toml: the
root conftest puts the checkout on ``sys.path`` first, so ``pytest`` works as well as ``python -m pytest``."""

pytest_plugins = ["tests.nb_warnings"]
