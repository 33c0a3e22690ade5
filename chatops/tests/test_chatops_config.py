"""The configuration file and the authorisation policy it defines."""
import pytest
import yaml

from pro6000_chatops import ConfigError, load_config

from chatops_support import write_config


def test_paths_resolve_against_the_file_and_the_policy_applies(tmp_path, local_inventory):
    config = load_config(write_config(tmp_path, local_inventory))
    assert config.audit_log == tmp_path / "audit.jsonl"
    assert config.runs_dir == tmp_path / "runs"
    policy = config.policy
    assert policy.allows("alice", "deploy", "pro6000-03")
    assert not policy.allows("alice", "deploy", "db-01")
    assert policy.allows("carol", "status", "pro6000-02")
    assert not policy.allows("carol", "status", "pro6000-03")
    assert not policy.allows("carol", "deploy", "pro6000-01")
    assert policy.may_run("dave", "bench") and not policy.may_run("dave", "deploy")
    assert not policy.may_run("mallory", "status")


def _broken(tmp_path, local_inventory, change):
    path = write_config(tmp_path, local_inventory)
    document = yaml.safe_load(path.read_text())
    change(document)
    path.write_text(yaml.safe_dump(document))
    return path


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d.update(extravars={"x": 1}), "unknown keys: extravars"),
    (lambda d: d.pop("inventory"), "inventory is required"),
    (lambda d: d.update(grants=[]), "grants must be a non-empty list"),
    (lambda d: d["grants"][0]["actions"].append("shell"), "unknown action 'shell'"),
    (lambda d: d["grants"][0].update(groups=["admins"]), "'admins', which is not under groups"),
    (lambda d: d["grants"][0].update(playbook="x.yml"), "grants[0] has unknown keys: playbook"),
    (lambda d: d["grants"][1].pop("users"), "grants[1] names no users and no groups"),
    (lambda d: d["grants"][0].update(hosts="pro6000-*"), "grants[0].hosts must be a list"),
    (lambda d: d.update(secrets=["HUB TOKEN"]), "invalid variable name 'HUB TOKEN'"),
    (lambda d: d.update(environment={"A": 1}), "environment.A must be a string"),
    (lambda d: d.update(job_timeout=0), "job_timeout must be a positive whole number"),
])
def test_a_wrong_configuration_stops_with_the_key_named(tmp_path, local_inventory, change, message):
    with pytest.raises(ConfigError) as error:
        load_config(_broken(tmp_path, local_inventory, change))
    assert message in str(error.value)


def test_aliases_are_accepted_in_grants(tmp_path, local_inventory):
    path = _broken(tmp_path, local_inventory, lambda d: d["grants"][2].update(actions=["smoke"]))
    assert load_config(path).policy.allows("dave", "bench", "pro6000-02")
