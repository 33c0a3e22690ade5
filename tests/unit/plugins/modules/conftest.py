"""The fake SGLang server, one per sglang_* module test, and a server that never answers."""
import socket

import pytest

from sglang_fake_server import FakeSGLang


@pytest.fixture
def server():
    with FakeSGLang() as fake:
        yield fake


@pytest.fixture
def silent_url():
    """A server that takes connections (the kernel accepts them) and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    yield "http://127.0.0.1:%d" % listener.getsockname()[1]
    listener.close()
