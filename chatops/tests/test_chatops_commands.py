"""The grammar: what parses, into which extra vars, and what is refused with which reason."""
import pytest

from pro6000_chatops.commands import MAX_COMMAND_LENGTH, Refused, parse

# Bad input: (chat text, a fragment the one-line reason must contain).
BAD_INPUT = [
    ("", "empty command"),
    ("   ", "empty command"),
    ("reboot pro6000-01", "unknown action 'reboot'"),
    ("shell pro6000-01", "unknown action 'shell'"),
    ("rollback pro6000-01", "unknown action 'rollback'"),
    ("deploy", "deploy needs a host"),
    ("deploy ddtree", "deploy needs a host"),
    ("deploy pro6000-01 ddtree draft=0", "draft=0 is out of range"),
    ("deploy pro6000-01 ddtree draft=64", "draft=64 is out of range"),
    ("deploy pro6000-01 ddtree draft=17", "draft=17 is out of range"),
    ("deploy pro6000-01 ddtree draft=", "draft= is out of range"),
    ("deploy pro6000-01 ddtree draft=-1", "draft=-1 is out of range"),
    ("deploy pro6000-01 ddtree draft=1e1", "draft=1e1 is out of range"),
    ("deploy pro6000-01 ddtree draft=0016", "draft=0016 is out of range"),
    ("deploy pro6000-01 ddtree budget=0", "budget=0 is out of range"),
    ("deploy pro6000-01 ddtree budget=1025", "budget=1025 is out of range"),
    ("deploy pro6000-01 ddtree budget=01024", "budget=01024 is out of range"),
    ("deploy pro6000-01 ddtree budget=99999", "budget=99999 is out of range"),
    ("deploy pro6000-01 dflash budget=8", "budget applies to ddtree only"),
    ("deploy pro6000-01 budget=8", "budget applies to ddtree only"),
    ("deploy pro6000-01 none draft=8", "need speculative decoding"),
    ("deploy pro6000-01 medusa", "unexpected 'medusa'"),
    ("deploy pro6000-01 ddtree dflash", "algorithm is given twice"),
    ("deploy pro6000-01 draft=8 draft=9", "draft is given twice"),
    ("deploy pro6000-01 ddtree window=32", "unexpected 'window=32'"),
    ("deploy pro6000-01 ddtree sglang_service_extra_args=x", "unexpected"),
    ("deploy pro6000-01 pro6000-02", "unexpected 'pro6000-02'"),
    ("bench pro6000-01 ddtree", "unexpected 'ddtree'"),
    ("bench pro6000-01 draft=8", "unexpected 'draft=8'"),
    ("tune pro6000-01 budget=8", "unexpected 'budget=8'"),
    ("status pro6000-01 extra", "unexpected 'extra'"),
    ("cancel", "cancel needs a host"),
    ("deploy -pro6000-01", "is not a host name"),
    ("deploy .. ddtree", "is not a host name"),
    ("deploy " + "a" * 64, "is not a host name"),
    # Injection attempts, one per field: action, host, algorithm, value.
    ("deploy pro6000-01; rm -rf /", "U+003B"),
    ("deploy; id", "U+003B"),
    ("deploy pro6000-01 ddtree draft=16;id", "U+003B"),
    ("deploy $(id) ddtree", "U+0024"),
    ("$(reboot) pro6000-01", "U+0024"),
    ("deploy pro6000-01 $(echo ddtree)", "U+0024"),
    ("deploy pro6000-01 ddtree draft=$(id)", "U+0024"),
    ("deploy `id` ddtree", "U+0060"),
    ("bench pro6000-01 `id`", "U+0060"),
    ("deploy pro6000-01 ddtree draft=`id`", "U+0060"),
    ("deploy pro6000-01\nreboot pro6000-02", "U+000A"),
    ("deploy pro6000-01 ddtree\r\ndraft=8", "U+000D"),
    ("deploy\tpro6000-01", "U+0009"),
    ("deploy pro6000-01 -e @/etc/passwd", "U+0040"),
    ("deploy pro6000-01 -e x=1", "unexpected '-e'"),
    ("deploy pro6000-01 --extra-vars=x", "unexpected '--extra-vars=x'"),
    ("deploy pro6000-01 ../../etc/passwd", "U+002F"),
    ("deploy {{ lookup('pipe','id') }}", "U+007B"),
    ("deploy pro6000-01 ddtree draft={{ lookup('pipe','id') }}", "U+007B"),
    ("{{ lookup('pipe','id') }} pro6000-01", "U+007B"),
    ("deploy pro6000-01 'ddtree'", "U+0027"),
    ("deploy pro6000-01 \"ddtree\"", "U+0022"),
    ("deploy pro6000-01 ddtree draft=16 # comment", "U+0023"),
    ("deploy pro6000-01 ddtree draft=1|id", "U+007C"),
    ("deploy pro6000-01 ddtree draft=8 &", "U+0026"),
    ("deploy pro6000-01 > /tmp/x", "U+003E"),
    ("deploy pro6000-01\x00ddtree", "U+0000"),
    ("deploy pro6000-01 ddtree draft=1\\6", "U+005C"),
    ("deploy pro6000-01 ddtree draft=%31%36", "U+0025"),
    # Unicode look-alikes: Cyrillic e, Cyrillic o in the host, fullwidth digits, a minus sign,
    # a non-breaking space, a zero-width space, a right-to-left override.
    ("d\u0435ploy pro6000-01", "U+0435"),
    ("deploy pr\u043e6000-01", "U+043E"),
    ("deploy pro6000-01 ddtree draft=\uff11\uff16", "U+FF11"),
    ("deploy pro6000\u221201", "U+2212"),
    ("deploy\u00a0pro6000-01", "U+00A0"),
    ("deploy pro6000-01\u200b", "U+200B"),
    ("deploy pro6000-01 \u202eeertdd", "U+202E"),
    ("bench pro6000-\u0661", "U+0661"),
    # Overlong input.
    ("deploy " + "pro6000-01 " * 40, f"the limit is {MAX_COMMAND_LENGTH}"),
    ("x" * 100_000, "100000 characters long"),
]


@pytest.mark.parametrize(("text", "reason"), BAD_INPUT, ids=[repr(case[0][:40]) for case in BAD_INPUT])
def test_bad_input_is_refused_with_a_one_line_reason(text, reason):
    with pytest.raises(Refused) as refused:
        parse(text)
    message = str(refused.value)
    assert reason in message
    assert "\n" not in message and len(message) < 250
    # The reason never echoes a character that failed the character check.
    assert message.isascii() and message.isprintable()


def test_non_text_is_refused():
    with pytest.raises(Refused, match="must be text"):
        parse(b"deploy pro6000-01")


GOOD_INPUT = [
    ("deploy pro6000-03 ddtree draft=16", "deploy", "pro6000-03",
     {"sglang_service_speculative_algorithm": "ddtree", "sglang_service_draft_length": 16}),
    ("deploy pro6000-03 ddtree draft=16 budget=64", "deploy", "pro6000-03",
     {"sglang_service_speculative_algorithm": "ddtree", "sglang_service_draft_length": 16,
      "sglang_service_ddtree_budget": 64}),
    ("deploy pro6000-03 ddtree budget=1024", "deploy", "pro6000-03",
     {"sglang_service_speculative_algorithm": "ddtree", "sglang_service_ddtree_budget": 1024}),
    ("deploy pro6000-03 budget=1 ddtree draft=1", "deploy", "pro6000-03",
     {"sglang_service_speculative_algorithm": "ddtree", "sglang_service_draft_length": 1,
      "sglang_service_ddtree_budget": 1}),
    ("deploy pro6000-03 dflash draft=8", "deploy", "pro6000-03",
     {"sglang_service_speculative_algorithm": "dflash", "sglang_service_draft_length": 8}),
    ("deploy pro6000-03 none", "deploy", "pro6000-03", {"sglang_service_speculative_algorithm": "none"}),
    ("deploy pro6000-03", "deploy", "pro6000-03", {}),
    ("deploy pro6000-03 draft=12", "deploy", "pro6000-03", {"sglang_service_draft_length": 12}),
    ("  Deploy   pro6000-03   DDTREE  ", "deploy", "pro6000-03",
     {"sglang_service_speculative_algorithm": "ddtree"}),
    ("bench pro6000-03", "bench", "pro6000-03", {}),
    ("smoke pro6000-03", "bench", "pro6000-03", {}),
    ("status", "status", None, {"smoke_probe_only": True}),
    ("status pro6000-03", "status", "pro6000-03", {"smoke_probe_only": True}),
    ("tune pro6000-03", "tune", "pro6000-03", {"tune_host": "pro6000-03"}),
    ("cancel pro6000-03", "cancel", "pro6000-03", {}),
]


@pytest.mark.parametrize(("text", "action", "host", "extravars"), GOOD_INPUT)
def test_good_input_parses_into_typed_extra_vars(text, action, host, extravars):
    command = parse(text)
    assert command.action.name == action
    assert command.host == host
    assert command.extravars() == extravars
    # Values are the types the role's argument spec expects, never strings from chat.
    for name, value in extravars.items():
        assert type(command.extravars()[name]) is type(value)


def test_playbooks_are_the_collections():
    assert {case[0].split()[0].lower(): parse(case[0]).action.playbook for case in GOOD_INPUT} == {
        "deploy": "deploy.yml", "bench": "smoke.yml", "smoke": "smoke.yml", "status": "smoke.yml",
        "tune": "tune.yml", "cancel": None,
    }


def test_describe_gives_the_normal_form():
    assert parse("  DEPLOY pro6000-03 draft=8  DDTREE ").describe() == "deploy pro6000-03 ddtree draft=8"
