"""The SGLang test double (tests/fixtures/sglang_double) for the tests of the sglang_* client and
modules: its HTTP server in a thread of the test process, one per test, with the faults of
sglang/srt/double_faults.py to script."""
import contextlib
import json
import sys

import pytest

from support import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "tests" / "fixtures" / "sglang_double" / "python"))
from sglang.srt.double_faults import InProcessDouble  # noqa: E402  (the double is not installed)

MODEL = "Qwen3.6-27B"
# The double's timing model made fast (README, "Timing model"): ready at once, 2 ms prefill and
# verify steps, each DFLASH step committing 4 tokens, so a 25-token answer is the prefill's
# token and 6 chunks of 4.
FAST = {"SGLANG_DOUBLE_STARTUP_S": "0", "SGLANG_DOUBLE_PREFILL_S": "0.002", "SGLANG_DOUBLE_STEP_S": "0.002",
        "SGLANG_DOUBLE_TOKEN_S": "0", "SGLANG_DOUBLE_ACCEPT_DFLASH": "4"}


@pytest.fixture
def models(tmp_path):
    """(target, drafter) checkpoint folders whose config.json the double reads."""
    target, drafter = tmp_path / MODEL, tmp_path / (MODEL + "-DFlash")
    target.mkdir()
    drafter.mkdir()
    (target / "config.json").write_text(json.dumps({
        "architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
        "max_position_embeddings": 262144}))
    (drafter / "config.json").write_text(json.dumps({"dflash_config": {"block_size": 16},
                                                     "max_position_embeddings": 262144}))
    return target, drafter


@pytest.fixture
def start_double(models):
    """start_double(*argv, env=None, profile=None, speculative=True): the double serving the
    target as MODEL with metrics and, unless told otherwise, DFLASH with the drafter; `argv`
    adds or overrides options, `env` SGLANG_DOUBLE_* variables (over FAST)."""
    target, drafter = models
    with contextlib.ExitStack() as stack:
        def start(*argv, env=None, profile=None, speculative=True):
            spec = ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", str(drafter)]
            full = ["--model-path", str(target), "--served-model-name", MODEL, "--enable-metrics",
                    *(spec if speculative else []), *argv]
            return stack.enter_context(InProcessDouble(full, dict(FAST, **(env or {})), profile))
        yield start


@pytest.fixture
def server(start_double):
    return start_double()


@pytest.fixture
def silent(start_double):
    """The double taking every connection and request and answering none (a hung server)."""
    double = start_double()
    double.app.silent_paths = set(double.app.paths)
    return double
