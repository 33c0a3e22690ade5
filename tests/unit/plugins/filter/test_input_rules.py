"""Filter input_rules, the one definition of what a unit's words, a defaults file's ARGS, a port,
a unit name, a Prometheus duration, GPUs and counts may be (issue 36, finding 4): the roles
sglang_service, monitoring and metrics_exporters check their variables with it before any change
(tests/integration/test_sglang_service_preflight.py, test_monitoring_preflight.py)."""
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.pro6000.inference.plugins.filter.input_rules import FilterModule, input_rules


def holds(kind, value):
    [rule] = input_rules({kind: {"v": value}})
    assert rule["name"] == "v" and rule["value"] == value and rule["why"]
    return rule["rule"]


@pytest.mark.parametrize("kind, good, bad", [
    # A newline in a unit's word or value is a line of its own: ExecStartPre=, User=root...
    ("single_line", ["/srv/models/Qwen3.6-27B", ["--log-level", "info"], "a b", {"NCCL_P2P_DISABLE": "1"}, 30000],
     ["/srv/a\nUser=root", ["--x", "a\nb"], "127.0.0.1\r", "tab\there", "nul\x00", {"A": "1\nB=2"}, {"A\nB": "1"}]),
    # A quote closes the quoted ARGS= of a defaults file; whitespace splits a word in two.
    ("args_words", ["127.0.0.1", ["--collector.filesystem.fs-types-exclude=^(proc|sysfs)$"], "/var/lib/x", []],
     ['127.0.0.1" --web.enable-admin-api "', ["--a b"], ["--a\\"], "x\ny", ""]),
    ("port", [1, 9090, 65535, "30000"], [0, -1, 65536, 99999, True, False, "", "90 90", 1.5, None]),
    ("unit_name", ["sglang-qwen", "sglang_qwen.a", "x1"], ["../../etc/x", "a/b", "", ".hidden", "-a", "a b", "x\ny", 1]),
    ("duration", ["30d", "15s", "1h30m", "500ms", "0", "2w"],
     ["30d --web.enable-admin-api --web.enable-lifecycle", "", "30", "1.5h", "30m1h", "d", 30]),
    ("gpus", [[], [0, 3], ["0", "GPU-5f0b-11aa"], ["MIG-1a2b"]], [[-1], [True], [False], ["-1"], [1.0], [None], "0"]),
    ("positive", [1, 2, "4"], [0, -1, True, "0", "", "two", None]),
])
def test_each_kind_accepts_what_the_renderers_take_and_refuses_the_rest(kind, good, bad):
    assert [value for value in good if not holds(kind, value)] == []
    assert [value for value in bad if holds(kind, value)] == []


def test_every_variable_gets_its_own_rule_named_after_it():
    rules = input_rules({"port": {"monitoring_prometheus_port": 9090, "monitoring_alertmanager_port": 99999},
                         "duration": {"monitoring_retention": "30d --web.enable-admin-api"}})
    assert [(rule["name"], rule["rule"]) for rule in rules] == [
        ("monitoring_prometheus_port", True), ("monitoring_alertmanager_port", False), ("monitoring_retention", False)]


@pytest.mark.parametrize("inputs", [{"colour": {"a": 1}}, {"port": [1]}, ["port"]])
def test_unknown_kinds_and_shapes_are_refused(inputs):
    with pytest.raises(AnsibleFilterError, match="input_rules: takes kinds"):
        input_rules(inputs)


def test_the_filter_is_registered():
    assert FilterModule().filters()["input_rules"] is input_rules
