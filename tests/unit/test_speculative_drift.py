"""One source for the speculative algorithms and the ranges of draft length and DDTree budget
(plugins/module_utils/_sglang/speculative.py, issue #27): the plan filter reads it, chatops reads its
copy, the argument specs and the filter's documentation state it. Fails when any differs."""
import pathlib
import re
import sys

import pytest
import yaml

from ansible_collections.pro6000.inference.plugins.filter import sglang_speculative_plan
from ansible_collections.pro6000.inference.plugins.module_utils._sglang import speculative as _speculative

ROOT = pathlib.Path(__file__).resolve().parents[2]
SOURCE = ROOT / "plugins" / "module_utils" / "_sglang" / "speculative.py"
CHATOPS = ROOT / "chatops" / "pro6000_chatops"


def _spec(role):
    path = ROOT / "roles" / role / "meta" / "argument_specs.yml"
    return yaml.safe_load(path.read_text())["argument_specs"]["main"]["options"]


def _text(option):
    description = option["description"]
    return " ".join(description if isinstance(description, list) else [description])


def _chatops_commands():
    """The chatops package of this checkout (requirements.txt installs it editable). The package
    imports ansible-runner, which only the main lane installs (the newest-line lane's controller
    runs the collection's units, not the bot): there the parse check is skipped and the copy
    check still runs."""
    pytest.importorskip("ansible_runner")
    if str(CHATOPS.parent) not in sys.path:
        sys.path.insert(0, str(CHATOPS.parent))
    from pro6000_chatops import commands
    assert pathlib.Path(commands.__file__).resolve().parent == CHATOPS.resolve(), (
        "pro6000_chatops comes from %s, not this checkout: run with PYTHONPATH=chatops" % commands.__file__)
    return commands


def test_the_chatops_copy_is_the_source():
    assert (CHATOPS / "speculative.py").read_text() == SOURCE.read_text(), (
        "chatops/pro6000_chatops/speculative.py differs from plugins/module_utils/_sglang/speculative.py: "
        "copy the source over it (cp plugins/module_utils/_sglang/speculative.py chatops/pro6000_chatops/speculative.py)")


def test_chatops_parses_with_the_source():
    commands = _chatops_commands()
    assert tuple(commands.ALGORITHMS) == _speculative.ALGORITHMS
    assert (commands.DRAFT.low, commands.DRAFT.high) == _speculative.DRAFT_LENGTH_RANGE
    assert (commands.BUDGET.low, commands.BUDGET.high) == _speculative.DDTREE_BUDGET_RANGE
    high = _speculative.DDTREE_BUDGET_RANGE[1]
    assert commands.parse("deploy h ddtree budget=%d" % high).extravars()["sglang_service_ddtree_budget"] == high
    with pytest.raises(commands.Refused, match="out of range"):
        commands.parse("deploy h ddtree budget=%d" % (high + 1))


def test_the_plan_filter_reads_the_source():
    assert sglang_speculative_plan.ALGORITHMS is _speculative.ALGORITHMS
    assert sglang_speculative_plan.DRAFT_LENGTH_RANGE is _speculative.DRAFT_LENGTH_RANGE
    assert sglang_speculative_plan.DDTREE_BUDGET_RANGE is _speculative.DDTREE_BUDGET_RANGE
    documented = yaml.safe_load(sglang_speculative_plan.DOCUMENTATION)["options"]["_input"]["suboptions"]
    assert tuple(documented["algorithm"]["choices"]) == _speculative.ALGORITHMS


def test_the_argument_specs_state_the_source():
    service = _spec("sglang_service")
    assert tuple(service["sglang_service_speculative_algorithm"]["choices"]) == _speculative.ALGORITHMS
    for option, (low, high) in (("sglang_service_draft_length", _speculative.DRAFT_LENGTH_RANGE),
                                ("sglang_service_ddtree_budget", _speculative.DDTREE_BUDGET_RANGE)):
        stated = re.findall(r"\b(\d+) to (\d+)\b", _text(service[option]))
        assert stated == [(str(low), str(high))], "%s says %s, the source %d to %d" % (option, stated, low, high)
    smoke = _text(_spec("smoke")["smoke_speculative_algorithm"])
    assert tuple(re.findall(r"V\((\w+)\)", smoke)) == _speculative.ALGORITHMS
