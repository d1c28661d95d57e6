"""The Zensical build of the site, once per test run, for the tests of what a reader gets (test_site.py,
test_browser.py) to run against both builds; the MkDocs build is conftest.py's `site`."""
import pytest

from tests.helpers import python


@pytest.fixture(scope="session")
def zensical_site(tmp_path_factory):
    """The site built with Zensical (python -m guide.site zensical), once per test run."""
    out = tmp_path_factory.mktemp("zensical") / "site"
    result = python("-m", "guide.site", "zensical", str(out))
    assert result.returncode == 0 and result.stdout == f"built en, zh, pt, hi in {out}\n", result
    return out


@pytest.fixture(params=["mkdocs", "zensical"])
def each_site(request):
    """The MkDocs site, then the Zensical site: a test of what a reader gets runs against both builds."""
    return request.getfixturevalue("site" if request.param == "mkdocs" else "zensical_site")
