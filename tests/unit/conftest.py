import pytest


@pytest.fixture
def anyio_backend():
    """The unit tests' async tests (pytest.mark.anyio) run on asyncio, as uvicorn runs the shim."""
    return "asyncio"
