"""Role model_weights refuses bad models before anything changes, naming the variable and why:
its own first check (tasks/state.yml, module host_state: the rules fail before it reads anything)
run by real ansible-playbook on localhost,
one playbook run for every case (a few seconds). The hub and git rules themselves are unit
tests of model_stage's checks and the test plugin git_ref_name (tests/unit/plugins/test)."""
import pytest
from support import run_cases

COMMIT = "0123456789abcdef0123456789abcdef01234567"
OTHER = "f" * 40


def target(**extra):
    return dict({"name": "Qwen3.6-27B", "kind": "target", "repo_id": "Qwen/Qwen3.6-27B", "revision": COMMIT}, **extra)


def drafter(**extra):
    return dict({"name": "Qwen3.6-27B-DFlash", "kind": "drafter", "repo_id": "z-lab/Qwen3.6-27B-DFlash",
                 "revision": COMMIT}, **extra)


# (case, role variables, None when accepted, else what the failure message must contain)
CASES = [
    ("target and drafter", {"model_weights_models": [target(), drafter()]}, None),
    ("no models", {"model_weights_models": []}, "model_weights_models = []: must list at least one model"),
    ("two targets", {"model_weights_models": [target(), target(name="b")]}, "at most one of kind target"),
    ("two drafters", {"model_weights_models": [drafter(), drafter(name="b")]}, "at most one of kind target"),
    ("one name twice", {"model_weights_models": [target(), drafter(name="Qwen3.6-27B")]}, "with distinct names"),
    ("bad name", {"model_weights_models": [target(name="../x")]}, "model_weights_models[../x].name"),
    ("repo id climbing", {"model_weights_models": [target(repo_id="Qwen/../etc")]},
     "model_weights_models[Qwen3.6-27B].repo_id = \"Qwen/../etc\": must be a hub repository id"),
    ("repo id with --", {"model_weights_models": [target(repo_id="Qwen--x/y")]}, "].repo_id = \"Qwen--x/y\""),
    ("repo id .git", {"model_weights_models": [target(repo_id="Qwen/x.git")]}, "].repo_id = \"Qwen/x.git\""),
    ("path model without repo id", {"model_weights_models": [target(source="path", repo_id="", path="/srv/x")]},
     None),
    ("floating revision refused", {"model_weights_models": [target(revision="main")]},
     "].revision = \"main\": must be a 40-hex commit"),
    ("floating revision allowed", {"model_weights_models": [target(revision="main")],
                                   "model_weights_allow_floating_revision": True}, None),
    ("ref with ..", {"model_weights_models": [target(revision="a..b")],
                     "model_weights_allow_floating_revision": True}, "].revision = \"a..b\""),
    ("ref ending .lock", {"model_weights_models": [target(revision="v1.lock")],
                          "model_weights_allow_floating_revision": True}, "].revision = \"v1.lock\""),
    ("lock of another commit", {"model_weights_models": [target(lock={"commit": OTHER, "files": {}})]},
     "].lock = \"%s\": must be the lock file of the pinned revision (%s)" % (OTHER, COMMIT)),
    ("lock required", {"model_weights_models": [target()], "model_weights_require_lock": True},
     "].lock = \"(none)\": must be the lock file"),
    ("lock of the commit", {"model_weights_models": [target(lock={"commit": COMMIT, "files": {}})],
                            "model_weights_require_lock": True}, None),
]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    return run_cases(tmp_path_factory.mktemp("model-weights-preflight"),
                     [(name, "model_weights", variables) for name, variables, _expected in CASES],
                     {"model_weights_allow_floating_revision": False, "model_weights_require_lock": False},
                     tasks_from="state", check=False)


@pytest.mark.parametrize("name, expected", [(name, expected) for name, _vars, expected in CASES])
def test_preflight_accepts_or_names_the_variable_and_why(outcomes, name, expected):
    if expected is None:
        assert outcomes[name] is None
    else:
        assert outcomes[name] and expected in outcomes[name]["msg"], outcomes[name]
