"""local_fact run as Ansible runs it (a process reading an args file), against a fact directory
in a temporary folder."""
import json
import stat

from support import run_module_file

FACTS = {"version": "0.5.23", "options": ["--host", "--port"], "ddtree": None, "gpus": 2}


def run_module(tmp_path, **args):
    return run_module_file("local_fact", args, tmp_path)


def mode(path):
    return stat.S_IMODE(path.stat().st_mode)


def test_records_the_fact_and_loads_every_local_fact_like_setup(tmp_path):
    fact_path = tmp_path / "facts.d"
    fact_path.mkdir(mode=0o700)
    (fact_path / "other.fact").write_text('{"kept": true}\n')
    (fact_path / "legacy.fact").write_text("[section]\nkey = value\n")

    first = run_module(tmp_path, name="sglang", facts=FACTS, fact_path=str(fact_path))

    assert first["changed"] is True, first
    written = fact_path / "sglang.fact"
    assert first["path"] == str(written)
    assert json.loads(written.read_text()) == FACTS
    assert mode(written) == 0o644 and mode(fact_path) == 0o755
    assert first["ansible_facts"]["ansible_local"] == {
        "sglang": FACTS, "other": {"kept": True}, "legacy": {"section": {"key": "value"}}}
    assert sorted(p.name for p in fact_path.iterdir()) == ["legacy.fact", "other.fact", "sglang.fact"]

    again = run_module(tmp_path, name="sglang", facts=FACTS, fact_path=str(fact_path))
    assert again["changed"] is False
    assert again["ansible_facts"] == first["ansible_facts"]


def test_creates_the_directory_and_check_mode_writes_nothing(tmp_path):
    fact_path = tmp_path / "etc" / "ansible" / "facts.d"

    checked = run_module(tmp_path, name="nvidia_driver", facts=FACTS, fact_path=str(fact_path),
                         _ansible_check_mode=True, _ansible_diff=True)
    assert checked["changed"] is True
    assert not fact_path.exists()
    assert checked["ansible_facts"]["ansible_local"] == {}
    assert json.loads(checked["diff"]["after"]) == FACTS and checked["diff"]["before"] == ""

    done = run_module(tmp_path, name="nvidia_driver", facts=FACTS, fact_path=str(fact_path))
    assert done["changed"] is True
    assert mode(fact_path) == 0o755
    assert done["ansible_facts"]["ansible_local"] == {"nvidia_driver": FACTS}


def test_a_changed_fact_replaces_the_file_and_shows_the_difference(tmp_path):
    run_module(tmp_path, name="model_weights", facts=FACTS, fact_path=str(tmp_path))
    changed = dict(FACTS, gpus=4)

    checked = run_module(tmp_path, name="model_weights", facts=changed, fact_path=str(tmp_path),
                         _ansible_check_mode=True)
    assert checked["changed"] is True
    assert checked["ansible_facts"]["ansible_local"]["model_weights"] == FACTS  # what the host has

    result = run_module(tmp_path, name="model_weights", facts=changed, fact_path=str(tmp_path),
                        _ansible_diff=True)
    assert result["changed"] is True
    assert '"gpus": 2' in result["diff"]["before"] and '"gpus": 4' in result["diff"]["after"]
    assert result["ansible_facts"]["ansible_local"]["model_weights"] == changed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["args.json", "model_weights.fact"]


def test_a_wrong_mode_alone_is_a_change(tmp_path):
    run_module(tmp_path, name="cuda_toolkit", facts=FACTS, fact_path=str(tmp_path))
    (tmp_path / "cuda_toolkit.fact").chmod(0o600)

    assert run_module(tmp_path, name="cuda_toolkit", facts=FACTS, fact_path=str(tmp_path),
                      _ansible_check_mode=True)["changed"] is True
    assert mode(tmp_path / "cuda_toolkit.fact") == 0o600
    assert run_module(tmp_path, name="cuda_toolkit", facts=FACTS, fact_path=str(tmp_path))["changed"] is True
    assert mode(tmp_path / "cuda_toolkit.fact") == 0o644


def test_a_name_that_is_not_a_fact_key_is_refused_before_anything_is_written(tmp_path):
    fact_path = tmp_path / "facts.d"
    result = run_module(tmp_path, name="../escape", facts=FACTS, fact_path=str(fact_path))
    assert result["failed"] is True
    assert result["msg"] == ("name '../escape' must be letters, digits and underscores: "
                             "it becomes ansible_local.<name> and <name>.fact")
    assert not fact_path.exists()
