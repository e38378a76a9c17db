import sys

import pytest

_fuzz_time = [0.0]


@pytest.fixture
def pyprof_on():
    """pyprof.init() for one test, restore() after it."""
    import pyprof

    pyprof.init()
    yield pyprof
    pyprof.restore()


def pytest_collection_modifyitems(items: list) -> None:
    # The fuzz suite's promise "never a traceback" covers "Exception ignored in ..." too.
    for item in items:
        if "test_fuzz_" in item.nodeid:
            item.add_marker(pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning"))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "test_fuzz_" in report.nodeid:
        _fuzz_time[0] += report.duration


def pytest_terminal_summary(terminalreporter) -> None:
    harness = sys.modules.get("fuzz_harness")
    if harness is not None and harness.CASES[0]:
        terminalreporter.write_line(f"fuzz: {harness.CASES[0]} generated CLI runs in {_fuzz_time[0]:.1f} s "
                                    f"(setup, runs and teardown of the tests/test_fuzz_*.py tests)")
