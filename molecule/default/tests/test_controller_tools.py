"""What operators run from the controller against the converged lab host: the chat bot's
end-to-end tests through the real ansible-runner (an operator in a Matrix room on a real Synapse
deploys the lab host with the bot among them), and tune.yml picking the double's known-best
configuration (DDTree 16 with budget 15, by the double's timing model)."""
import json
import os
import pathlib
import subprocess
import sys

REPO = pathlib.Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])


def test_chatops_end_to_end_against_the_lab():
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "chatops/tests", "-m", "lab", "-q", "-p", "no:cacheprovider"],
        cwd=REPO, env=dict(os.environ, PRO6000_LAB="1"), capture_output=True, text=True, timeout=900, check=False)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and "skipped" not in run.stdout


# tune.yml's own list less dflash-8: each configuration is a rolling change of the four replicas
# and a benchmark, and these four still rank the baseline, DFLASH and two DDTree budgets. The one
# the converged lab serves (the inventory's) comes first: it needs no rolling change, and the
# last one measured is not the winner, so that putting the server back on the winner is a change.
TUNE_CONFIGS = [
    {"name": "ddtree-16-b15", "algorithm": "ddtree", "draft_length": 16, "ddtree_budget": 15},
    {"name": "none", "algorithm": "none"},
    {"name": "dflash-16", "algorithm": "dflash", "draft_length": 16},
    {"name": "ddtree-16-b31", "algorithm": "ddtree", "draft_length": 16, "ddtree_budget": 31},
]


def test_tune_reports_the_known_best_configuration(tmp_path):
    report = tmp_path / "tune.json"
    run = subprocess.run(
        ["ansible-playbook", "-i", "inventories/lab", "playbooks/tune.yml",
         "-e", "tune_host=pro6000-lab", "-e", f"tune_report_path={report}",
         "-e", "tune_bench_max_tokens=64", "-e", json.dumps({"tune_configs": TUNE_CONFIGS})],
        cwd=REPO, capture_output=True, text=True, timeout=1200, check=False)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    table = json.loads(report.read_text())
    assert table["best"]["name"] == "ddtree-16-b15"
    rows = dict((row["name"], row) for row in table["rows"])
    assert rows["none"]["speedup"] == 1.0
    assert rows["ddtree-16-b15"]["speedup"] > rows["ddtree-16-b31"]["speedup"] > 1
    assert rows["ddtree-16-b15"]["speedup"] > rows["dflash-16"]["speedup"] > 1
    # The server is left on the winner, which is also what the inventory asks for (smg routes
    # /get_server_info to a replica; it has no /server_info of its own).
    info = json.loads(subprocess.run(
        ["docker", "exec", "pro6000-lab", "curl", "-sf", "http://127.0.0.1:30000/get_server_info"],
        capture_output=True, text=True, check=True).stdout)
    assert (info["speculative_algorithm"], info["speculative_num_draft_tokens"]) == ("DDTREE", 16)
