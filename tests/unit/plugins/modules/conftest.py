"""The fake SGLang server, one per sglang_* module test, and a server that never answers."""
import pytest

from sglang_fake_server import FakeSGLang, SilentServer


@pytest.fixture
def server():
    with FakeSGLang() as fake:
        yield fake


@pytest.fixture
def silent():
    """A server that takes connections and requests and never answers (see SilentServer)."""
    with SilentServer() as server:
        yield server
