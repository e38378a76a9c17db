import os
import sys

import pytest

# Tests are grouped by stage (nvtx/, parse/, prof/, views/, fuzz/) and import helpers from one
# another's modules (test_prof_helpers, test_views_common, test_parse_attribution's parse_all, ...)
# and from this folder (captures, fuzz_harness, nsys_synth): every folder is importable, whichever
# test is collected first and whichever subset runs.
_HERE = os.path.dirname(os.path.abspath(__file__))
for _stage in ("nvtx", "parse", "prof", "views", "fuzz"):
    sys.path.insert(0, os.path.join(_HERE, _stage))

_fuzz_time = [0.0]


@pytest.fixture
def pyprof_on():
    """pyprof.init() for one test, restore() after it."""
    import pyprof

    pyprof.init()
    yield pyprof
    pyprof.restore()


def pytest_collection_modifyitems(items: list) -> None:
    for item in items:
        if "test_fuzz_" in item.nodeid:
            item.add_marker(pytest.mark.fuzz)  # tests/fuzz/: `-m "not fuzz"` leaves them out
            # The fuzz suite's promise "never a traceback" covers "Exception ignored in ..." too.
            item.add_marker(pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning"))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "test_fuzz_" in report.nodeid:
        _fuzz_time[0] += report.duration


def pytest_terminal_summary(terminalreporter) -> None:
    harness = sys.modules.get("fuzz_harness")
    if harness is not None and harness.CASES[0]:
        terminalreporter.write_line(f"fuzz: {harness.CASES[0]} generated CLI runs in {_fuzz_time[0]:.1f} s "
                                    f"(setup, runs and teardown of the tests/fuzz/ tests)")
