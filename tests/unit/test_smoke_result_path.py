"""The smoke result's path has one default: role smoke's smoke_result_path. Role
metrics_exporters reads that variable where the play has it and falls back to the same path in a
play without role smoke (playbooks/monitoring.yml): were the two to differ, the exporters would
read a file the smoke gate never writes, and SmokeGateFailed and the floors would have no series."""
import pathlib
import re

import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]


def defaults(role):
    return yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text())


def test_the_exporters_fall_back_to_the_path_role_smoke_writes():
    path = defaults("smoke")["smoke_result_path"]
    assert path.startswith("/") and path.endswith(".json")
    reader = defaults("metrics_exporters")["metrics_exporters_smoke_result_path"]
    assert re.fullmatch(r"\{\{ smoke_result_path \| default\('([^']+)'\) \}\}", reader), reader
    assert re.fullmatch(r".*default\('([^']+)'\).*", reader).group(1) == path
    specs = yaml.safe_load((REPO / "roles" / "metrics_exporters" / "meta" / "argument_specs.yml").read_text())
    assert specs["argument_specs"]["main"]["options"]["metrics_exporters_smoke_result_path"]["default"] == reader
    smoke_specs = yaml.safe_load((REPO / "roles" / "smoke" / "meta" / "argument_specs.yml").read_text())
    assert smoke_specs["argument_specs"]["main"]["options"]["smoke_result_path"]["default"] == path
