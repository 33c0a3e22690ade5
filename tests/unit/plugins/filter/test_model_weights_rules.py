"""Role model_weights' rules for its paths (issue 36, finding 4): a model root of "/" or with a
line break, a manifest name that leads out of the source, each refused naming the variable."""
import pytest

from ansible_collections.pro6000.inference.plugins.filter.model_weights_rules import model_weights_rules

COMMIT = "0123456789abcdef0123456789abcdef01234567"
MODELS = [{"name": "Qwen3.6-27B", "kind": "target", "repo_id": "Qwen/Qwen3.6-27B", "revision": COMMIT}]


def broken(root="/srv/models", manifest_name="manifest.json", path_root="", models=None, source="hub"):
    rules = model_weights_rules(models or MODELS, source, False, False,
                                {"root": root, "path_root": path_root, "manifest_name": manifest_name})
    return {rule["name"]: rule["value"] for rule in rules if not rule["rule"]}


def test_the_defaults_break_no_rule():
    assert broken() == {}
    assert broken(manifest_name="sub/manifest.json", path_root="/mnt/share") == {}


@pytest.mark.parametrize("root", ["/", "/srv/models\n", "/srv/models\n/etc", "srv/models", "/srv/models/",
                                  "/srv/../etc", "/srv/\tm"])
def test_a_model_root_that_is_slash_relative_or_holds_a_line_break_is_refused(root):
    assert broken(root=root) == {"model_weights_root": root}


@pytest.mark.parametrize("name", ["/root/secret.json", "../../root/secret.json", "a/../../x.json", "m.json\n", ""])
def test_a_manifest_name_that_leads_out_of_the_source_is_refused(name):
    assert broken(manifest_name=name) == {"model_weights_manifest_name": name}


def test_a_path_root_or_model_path_with_a_line_break_is_refused():
    assert broken(path_root="/mnt/share\n") == {"model_weights_path_root": "/mnt/share\n"}
    models = [dict(MODELS[0], source="path", path="/mnt/share/m\nx")]
    assert broken(models=models) == {"model_weights_models[Qwen3.6-27B].path": "/mnt/share/m\nx"}
