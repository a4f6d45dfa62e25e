"""The second half of the widget notebooks in a real JupyterLab (``test_widgets_browser.py`` has the first half and
explains the check): a file of its own, so that the test runner's two workers open the two halves side by side."""

import pytest

from test_widgets_browser import CHROMIUM, browser, check_widgets, half, lab  # noqa: F401  (fixtures)

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium browser installed (apt-get install chromium)")


@pytest.mark.parametrize("nb_name", half(1))
def test_widgets_respond_in_the_browser(browser, lab, nb_name):  # noqa: F811
    check_widgets(browser, lab, nb_name)
