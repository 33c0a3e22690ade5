"""Role sglang against the local repository: what each profile's build records, the environment
in use, and what the failed builds left behind (records written by side_effect.yml)."""
import json

import pytest

STEPS = "/root/sglang-steps"
REPO = "/srv/mirrors/sglang.git"
FACT = "/etc/ansible/facts.d/sglang.fact"


def read_json(host, path):
    return json.loads(host.file(path).content_string)


def commit_of(host, ref):
    return host.check_output(f"git -C {REPO} rev-parse '{ref}^{{commit}}'")


@pytest.fixture(name="facts")
def fixture_facts(host):
    names = {"v0.5.23": "v0.5.23", "v0.5.13": "v0.5.13", "ddtree": "refs_pull_29907_head"}
    return {key: read_json(host, f"{STEPS}/{name}.json") for key, name in names.items()}


def test_each_build_records_its_commit_and_version(host, facts):
    refs = {"v0.5.23": "v0.5.23", "v0.5.13": "v0.5.13", "ddtree": "refs/pull/29907/head"}
    for key, ref in refs.items():
        fact = facts[key]
        assert fact["source"] == "git"
        assert fact["repo"] == REPO
        assert fact["ref"] == ref
        assert fact["commit"] == commit_of(host, ref)
        assert fact["version"] == ("0.5.13" if key == "v0.5.13" else "0.5.23")
        assert fact["python"] == fact["venv"] + "/bin/python"
        assert fact["options"] == sorted(fact["options"])
    assert len({fact["venv"] for fact in facts.values()}) == 3


def test_release_0_5_23_offers_dflash_with_the_new_flag_names(facts):
    fact = facts["v0.5.23"]
    assert "DFLASH" in fact["speculative_algorithms"]
    assert "DDTREE" not in fact["speculative_algorithms"]
    assert fact["ddtree"] is None
    assert "--speculative-draft-window-size" in fact["options"]
    assert "--mamba-radix-cache-strategy" in fact["options"]
    assert sorted(fact["choices"]["--mamba-radix-cache-strategy"]) == sorted([
        "auto", "no_buffer", "extra_buffer", "extra_buffer_lazy"])
    for gone in ("--speculative-dflash-draft-window-size", "--mamba-scheduler-strategy",
                 "--speculative-ddtree-budget"):
        assert gone not in fact["options"]
    assert "fa3" in fact["choices"]["--attention-backend"]


def test_the_pull_request_build_offers_ddtree_as_an_algorithm(facts):
    fact = facts["ddtree"]
    assert {"DFLASH", "DDTREE"} <= set(fact["speculative_algorithms"])
    assert fact["ddtree"] == "algorithm"
    assert "--speculative-ddtree-budget" in fact["options"]
    assert "--speculative-dflash-enable-ddtree" not in fact["options"]


def test_release_0_5_13_has_the_old_mamba_flag(facts):
    fact = facts["v0.5.13"]
    assert "DFLASH" in fact["speculative_algorithms"]
    assert fact["ddtree"] is None
    assert "--mamba-scheduler-strategy" in fact["options"]
    assert "--mamba-radix-cache-strategy" not in fact["options"]
    assert "--speculative-draft-window-size" in fact["options"]


def test_the_environment_in_use_is_the_last_good_build(host, facts):
    fact = read_json(host, FACT)
    assert fact == facts["v0.5.23"]
    current = host.file("/opt/sglang/current")
    assert current.is_symlink
    assert current.linked_to == fact["venv"]
    marker = read_json(host, fact["venv"] + "/.pro6000-build.json")
    assert marker["commit"] == fact["commit"]
    assert marker["built_at"] == fact["built_at"]
    assert host.run(f"{fact['python']} -m sglang.launch_server --help").rc == 0


def test_pytorch_comes_from_the_configured_index(host):
    version = host.check_output(
        "/opt/sglang/current/bin/python -c 'import torch; print(torch.__version__)'")
    assert version == "2.14.1+cu130"


def test_each_pip_step_kept_the_log_its_progress_lines_were_read_from(host, facts):
    # build.yml runs each pip step in the background with --log; the progress lines quote the
    # log's last line, and the log stays in the build for later reading.
    venv = facts["v0.5.23"]["venv"]
    torch = host.file(f"{venv}/pip-torch.log")
    sglang = host.file(f"{venv}/pip-sglang.log")
    assert "torch" in torch.content_string and torch.user == "root"
    assert "Successfully installed" in sglang.content_string


def test_environments_belong_to_root_and_the_user_is_a_system_user(host):
    assert host.file("/opt/sglang/venvs").user == "root"
    user = host.user("sglang")
    assert user.shell == "/usr/sbin/nologin"
    assert user.uid < 1000
    home = host.file("/var/lib/sglang")
    assert home.user == "sglang"
    assert home.mode == 0o750


def test_a_failed_build_leaves_no_environment_and_says_why(host):
    broken = commit_of(host, "broken-build")[:12]
    leftovers = host.check_output("ls /opt/sglang/venvs").split()
    assert not [name for name in leftovers if name.startswith(broken)]
    message = host.file(f"{STEPS}/failure-broken-build.txt").content_string
    assert "broken-build" in message
    assert "Install SGLang from the checkout" in message
    assert "unchanged" in message


@pytest.mark.parametrize("case, words", [
    ("missing-ref", ["sglang_git_ref", "no-such-ref", "does not exist"]),
    ("kernel-without-cuda", ["sglang_kernel_source_build", "nvcc"]),
    ("bad-commit", ["sglang_git_commit", "40"]),
    ("unpinned-ref", ["sglang_git_ref", "refs/pull/29907/head", "sglang_git_commit", "sglang_git_ref_floating"]),
    ("index-range", ["sglang_version", ">=0.5.23", "exact release"]),
])
def test_bad_input_stops_with_a_message_naming_the_variable(host, case, words):
    message = host.file(f"{STEPS}/failure-{case}.txt").content_string
    for word in words:
        assert word in message


def test_a_release_from_the_index_is_recorded_without_a_commit(host):
    fact = read_json(host, f"{STEPS}/index-0.5.23.json")
    assert (fact["source"], fact["version"], fact["commit"], fact["ref"]) == ("index", "0.5.23", None, None)
    assert "/venvs/release-0.5.23-" in fact["venv"]
    assert "--mamba-radix-cache-strategy" in fact["options"]


def test_each_build_records_its_ddtree_budget_and_lazy_verdict(facts):
    # Read by sglang_server_options from the build's parser and its mamba validator source.
    assert facts["v0.5.23"]["ddtree_budget"] is None
    assert facts["ddtree"]["ddtree_budget"] == {"default": None, "minimum": 1, "maximum": None}
    # The double's v0.5.13 asserts against extra_buffer_lazy with speculation (before PR 34763).
    assert facts["v0.5.13"]["mamba_lazy_with_speculation"] is False
    assert facts["v0.5.23"]["mamba_lazy_with_speculation"] is True
    assert facts["ddtree"]["mamba_lazy_with_speculation"] is True


def test_a_pin_the_ref_moved_away_from_stops_naming_both_commits(host):
    message = host.file(f"{STEPS}/failure-moved-pin.txt").content_string
    assert "sglang_git_commit" in message
    assert commit_of(host, "fork-ddtree-flag") in message
    assert commit_of(host, "refs/pull/29907/head") in message
