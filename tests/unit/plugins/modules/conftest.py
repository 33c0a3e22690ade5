"""The fake SGLang server, one per sglang_* module test."""
import pytest

from sglang_fake_server import FakeSGLang


@pytest.fixture
def server():
    with FakeSGLang() as fake:
        yield fake
