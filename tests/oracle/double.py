"""Lays out the SGLang test double (tests/fixtures/sglang_double) at one behaviour profile as an
installed package would look to Python: the package plus its dist-info, in a directory to put
on PYTHONPATH. No pip, no git repository needed."""
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile

SOURCE = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "sglang_double" / "python"
sys.path.insert(0, str(SOURCE))
from sglang.srt.double_profiles import PROFILES  # noqa: E402  (the profiles live in the package)

sys.path.remove(str(SOURCE))
for _name in [name for name in sys.modules if name == "sglang" or name.startswith("sglang.")]:
    del sys.modules[_name]  # the double's modules must not shadow anything in this process


def install(profile, dest):
    """Writes the double at ``profile`` under ``dest``; returns the directory for PYTHONPATH."""
    site = pathlib.Path(dest) / profile
    shutil.copytree(SOURCE / "sglang", site / "sglang", ignore=shutil.ignore_patterns("__pycache__"))
    (site / "sglang" / "srt" / "build_profile.py").write_text('PROFILE = "%s"\n' % profile)
    version = PROFILES[profile]["version"]
    (site / "sglang" / "version.py").write_text('__version__ = "%s"\n' % version)
    info = site / ("sglang-%s.dist-info" % version)
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: %s\n" % version)
    return site


def parser_fact(site):
    """What the collection reads from the parser object of the double laid out at ``site``
    (``_sglang/options.py``'s ``describe_parser`` run in a process of its own, as on a host), with the
    profile's version."""
    from ansible_collections.pro6000.inference.plugins.module_utils._sglang.options import (  # noqa: E402
        accepted,
        describe_parser_code,
    )

    env = {"PYTHONPATH": str(site), "PYTHONWARNINGS": "ignore"}
    printed = subprocess.run([sys.executable, "-c", describe_parser_code()], env=env,
                             check=True, capture_output=True, text=True).stdout
    return accepted(json.loads(printed))


def parse_args(profile, argv):
    """The double's parser at ``profile`` (its ServerArgs.add_cli_args) applied to ``argv``:
    the namespace as a dict; argparse's refusal raises CalledProcessError (exit 2)."""
    code = ("import argparse, json, sys\n"
            "from sglang.srt.server_args import ServerArgs\n"
            "parser = argparse.ArgumentParser()\n"
            "ServerArgs.add_cli_args(parser)\n"
            "print(json.dumps(vars(parser.parse_args(json.loads(sys.argv[1])))))\n")
    with tempfile.TemporaryDirectory() as scratch:
        env = {"PYTHONPATH": str(install(profile, scratch)), "PYTHONWARNINGS": "ignore"}
        done = subprocess.run([sys.executable, "-c", code, json.dumps(list(argv))], env=env,
                              check=True, capture_output=True, text=True)
    return json.loads(done.stdout)
