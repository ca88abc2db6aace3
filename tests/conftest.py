import pytest

from tests.tools import required_tool


@pytest.fixture(scope="session")
def promtool() -> str:
    return required_tool("promtool")


@pytest.fixture(scope="session")
def hadolint() -> str:
    return required_tool("hadolint", "it comes with the test extras (pip install -e '.[test]'; ./dev test does it)")
