"""sglang_server_options run as Ansible runs it (a process reading an args file) against the
SGLang test double laid out at each profile (its ServerArgs.add_cli_args). (tests/integration/test_argv_real_parser.py runs it
against the real releases.)"""
import pathlib
import sys

import pytest
from support import run_module_file

REPO = pathlib.Path(__file__).resolve().parents[4]
sys.path.insert(0, str(REPO / "tests" / "oracle"))
import double  # noqa: E402


def run_module(tmp_path, args, pythonpath=()):
    return run_module_file("sglang_server_options", args, tmp_path, pythonpath)


@pytest.mark.parametrize("profile, version, ddtree, algorithm", [
    ("v0.5.13", "0.5.13", None, "DFLASH"),
    ("v0.5.23", "0.5.23", None, "DFLASH"),
    ("ddtree-pr29907", "0.5.23", "algorithm", "DDTREE"),
    ("fork-ddtree-flag", "0.5.23", "dflash_flag", "DFLASH"),
])
def test_reports_what_each_build_accepts(tmp_path, profile, version, ddtree, algorithm):
    site = double.install(profile, tmp_path)
    result = run_module(tmp_path, {"python": sys.executable}, [site])
    assert result.get("failed") is not True, result
    assert result["changed"] is False
    assert result["version"] == version
    assert result["ddtree"] == ddtree
    assert algorithm in result["speculative_algorithms"]
    assert "--model-path" in result["options"] and result["options"] == sorted(result["options"])
    assert "flashinfer" in result["choices"]["--attention-backend"]


def test_check_mode_reads_the_same(tmp_path):
    site = double.install("ddtree-pr29907", tmp_path)
    normal = run_module(tmp_path, {"python": sys.executable}, [site])
    checked = run_module(tmp_path, {"python": sys.executable, "_ansible_check_mode": True}, [site])
    assert checked["changed"] is False
    assert {k: checked[k] for k in ("options", "choices", "ddtree", "version")} == {
        k: normal[k] for k in ("options", "choices", "ddtree", "version")}


def test_interpreter_without_sglang(tmp_path):
    result = run_module(tmp_path, {"python": sys.executable})
    assert result["failed"] is True
    assert "reading the SGLang argument parser with %s failed" % sys.executable in result["msg"]
    assert "No module named 'sglang'" in result["msg"]


def test_missing_interpreter(tmp_path):
    result = run_module(tmp_path, {"python": str(tmp_path / "venv" / "bin" / "python")})
    assert result["failed"] is True
    assert "is not an executable interpreter" in result["msg"]


def misbehaving_sglang(site, server_args):
    """An installed-looking sglang 0.5.23 whose sglang.srt.server_args runs the given code."""
    (site / "sglang" / "srt").mkdir(parents=True)
    (site / "sglang" / "__init__.py").write_text("")
    (site / "sglang" / "srt" / "__init__.py").write_text("")
    (site / "sglang" / "srt" / "server_args.py").write_text(server_args)
    info = site / "sglang-0.5.23.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.23\n")
    return site


@pytest.mark.parametrize("server_args, timeout, message", [
    ("import time\ntime.sleep(60)\n", 2, "took longer than 2 s"),
    ("raise SystemExit('No module named torch')\n", 300, "failed with exit code 1: No module named torch"),
    # argparse's own --help is all such a parser holds.
    ("class ServerArgs:\n    @staticmethod\n    def add_cli_args(parser):\n        pass\n", 300,
     "could not read what SGLang accepts: the parser has no --model-path"),
    ("import os\nprint('Segmentation fault')\nos._exit(0)\n", 300, "printed no report: Segmentation fault"),
], ids=["import-hangs", "import-fails", "not-sglangs-parser", "no-report"])
def test_a_misbehaving_build_fails_clearly(tmp_path, server_args, timeout, message):
    site = misbehaving_sglang(tmp_path / "site", server_args)
    result = run_module(tmp_path, {"python": sys.executable, "timeout": timeout}, [site])
    assert result["failed"] is True
    assert message in result["msg"]
