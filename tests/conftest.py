import pytest


@pytest.fixture
def pyprof_on():
    """pyprof.init() for one test, restore() after it."""
    import pyprof

    pyprof.init()
    yield pyprof
    pyprof.restore()
