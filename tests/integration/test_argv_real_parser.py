"""The units role sglang_service RENDERS, checked against the REAL argument parsers of SGLang
0.5.9, 0.5.14, 0.5.19, 0.5.21 and 0.5.23 (release wheels, no GPU needed).

Real Ansible renders them: ansible-playbook runs the role's own plan (tasks/plan.yml: the model
directories, the filter sglang_speculative_plan) and then its unit template, for every release
x configuration (the lab and production inventories' values as Ansible loads their group_vars,
the DDTree opt-in with and without the fallback, and each configuration of playbooks/tune.yml with the
variables playbooks/tasks/tune_config.yml passes). Each unit's ExecStart must be accepted by
the release's parser, or the role must have refused the configuration before anything changed,
exactly where the release cannot serve it (the truth: DFLASH is upstream from 0.5.11, DDTree in
no release, see /work/shared/reference/sglang-dflash-ddtree.md).

The oracle environments are built on first use (minutes, then cached, see
tests/oracle/build_envs.py). A failure to build them fails these tests: they never skip.
"""
import functools
import json
import os
import pathlib
import shlex
import subprocess
import sys
import tempfile
import time

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
# The checkout as ansible_collections.pro6000.inference, the oracle helpers and tests/support.py.
sys.path[:0] = [str(REPO / "collections"), str(REPO / "tests" / "oracle"), str(REPO / "tests")]
import build_envs  # noqa: E402
import double  # noqa: E402
import oracle  # noqa: E402

RELEASES = build_envs.RELEASES
WITHOUT_DFLASH = ("0.5.9",)
# Releases whose mamba validator takes extra_buffer_lazy with DFLASH (SGLang pull request 34763,
# merged 2026-08-13, first in 0.5.18); 0.5.14 asserts against it with any speculation.
LAZY_WITH_DFLASH = ("0.5.19", "0.5.21", "0.5.23")
FORK = "fork-ddtree-flag"  # the double's build that offers DDTree as a DFLASH flag
TUNE_CONFIGS = yaml.safe_load((REPO / "playbooks" / "tune.yml").read_text())[0]["vars"]["tune_configs"]
# The role variables tune_config.yml sets from each configuration, taken from the file itself.
TUNE_ROLE_VARS = next(task for task in yaml.safe_load((REPO / "playbooks" / "tasks" / "tune_config.yml").read_text())
                      if "block" in task)["block"][0]["vars"]
DRAFT_LENGTH = 16  # both inventories and the drafter's block size

# The unit is rendered with the template lookup (the same engine and template as the role's
# template task, without a module run per host) and every outcome written once at the end.
PLAYBOOK = """
- name: Render the unit of every configuration as role sglang_service does
  hosts: pro6000
  gather_facts: false
  tasks:
    # The platform facts, and what roles sglang and model_weights would have recorded on the
    # host (their .fact files, from a directory of each host's own), read as role common reads
    # them on a rerun: one module run a host.
    - name: Gather the platform facts and the recorded ones
      ansible.builtin.setup:
        gather_subset: [min]
        fact_path: "{facts}/{{{{ inventory_hostname }}}}"

    - name: Check the configuration and render the unit, or record why the role refuses it
      block:
        - name: Run the plan of role sglang_service with the inventory's variables
          ansible.builtin.include_role:
            name: pro6000.inference.sglang_service
            tasks_from: plan.yml
            public: true
          when: tune_config is not defined

        - name: Run the plan of role sglang_service as playbooks/tasks/tune_config.yml calls it
          ansible.builtin.include_role:
            name: pro6000.inference.sglang_service
            tasks_from: plan.yml
            public: true
          vars: {tune_vars}
          when: tune_config is defined

        - name: Render the unit of the first replica with the role's template
          ansible.builtin.set_fact:
            test_outcome: ["service", "{{{{ lookup('ansible.builtin.template', '{template}') }}}}"]
          vars:
            __sglang_service_replica: "{{{{ __sglang_service_layout.replicas[0] }}}}"
      rescue:
        - name: Record the refusal
          ansible.builtin.set_fact:
            test_outcome: ["refused", "{{{{ ansible_failed_result.msg }}}}"]

- name: Write what every configuration gave
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Write the outcomes
      ansible.builtin.copy:
        content: "{{{{ dict(groups.pro6000 | zip(groups.pro6000 | map('extract', hostvars, 'test_outcome'))) | to_json }}}}"
        dest: "{out}"
        mode: "0644"
"""


def sglang_fact(release):
    """The sglang fact of a build of ``release`` installed from the package index: what the
    module reports (tests/fixtures/sglang_parser) plus what role sglang adds."""
    venv = "/opt/sglang/venvs/release-%s-0123abcd" % release
    fact = oracle.fact_fixture(release) if release != FORK else double_fact()
    return dict(fact, source="index", repo=None, ref=None, commit=None, venv=venv,
                python=venv + "/bin/python", built_at="2026-12-01T00:00:00Z")


@functools.lru_cache(maxsize=None)
def double_fact():
    with tempfile.TemporaryDirectory() as scratch:
        return double.parser_fact(double.install(FORK, scratch))


# Issue 37: a scraper on another host (role common's common_metrics_scrapers).
REMOTE = "remote-scrapers"
REMOTE_VARS = {"common_metrics_scrapers": ["127.0.0.1", "10.0.0.5"]}
# The DDTree opt-in (one switch), and with the fallback to DFLASH where the build has no DDTree.
DDTREE = {"sglang_service_speculative_algorithm": "ddtree"}
DDTREE_FALLBACK = dict(DDTREE, sglang_service_ddtree_fallback_to_dflash=True)


def inventory_vars(inventory):
    """The variables of group pro6000 as the inventory's group_vars files set them."""
    found = {}
    for path in sorted((REPO / "inventories" / inventory / "group_vars" / "pro6000").glob("*.yml")):
        found.update(yaml.safe_load(path.read_text()) or {})
    return found


def configurations():
    """(inventory, name, host variables, algorithm wanted, fallback allowed) per configuration."""
    found = []
    for inventory in ("lab", "production"):
        found.append((inventory, "inventory", {}, inventory_vars(inventory)["sglang_service_speculative_algorithm"], False))
        found.append((inventory, "fallback", DDTREE_FALLBACK, "ddtree", True))
    # Issue 38 item 1: production switched to DDTree without its build is refused.
    found.append(("production", "ddtree-opt-in", DDTREE, "ddtree", False))
    for config in TUNE_CONFIGS:
        found.append(("lab", "tune-" + config["name"], {"tune_config": config}, config["algorithm"], False))
    # Issue 37: a monitoring host other than this one (common_metrics_scrapers) scrapes the only
    # replica, which then leaves loopback, with the API key the role requires for that (its
    # refusal without one: tests/integration/test_sglang_service_preflight.py).
    found.append(("production", REMOTE, dict(REMOTE_VARS, sglang_service_api_key="k" * 32),
                  inventory_vars("production")["sglang_service_speculative_algorithm"], False))
    return found


def hosts():
    """{inventory: {host: (release, configuration)}} for every release x configuration, and the
    fork of the double with the lab's values and the tune configurations that want DDTree."""
    found = {"lab": {}, "production": {}}
    for inventory, name, variables, algorithm, fallback in configurations():
        builds = RELEASES + ((FORK,) if inventory == "lab" and algorithm == "ddtree" and not fallback else ())
        for release in builds:
            found[inventory]["%s-%s-%s" % (inventory, name, release)] = (release, (name, variables, algorithm, fallback))
    return found


def write_inventory(directory, inventory, members, models, facts):
    """An inventory whose group pro6000 holds ``members`` and whose group_vars are the real ones,
    and each member's facts folder (under ``facts``) with the .fact files roles sglang and
    model_weights would have written (JSON, as module local_fact writes them)."""
    directory.mkdir()
    (directory / "group_vars").symlink_to(REPO / "inventories" / inventory / "group_vars")
    drafter = str(models / "Qwen3.6-27B-DFlash")
    weights = {"models": {"target": {"path": str(models / "Qwen3.6-27B")},
                          "drafter": {"path": drafter, "dflash": {"block_size": DRAFT_LENGTH}}}}
    group = {}
    for host, (release, (name, variables, algorithm, fallback)) in members.items():
        group[host] = dict(variables, ansible_connection="local", ansible_python_interpreter=sys.executable)
        (facts / host).mkdir(parents=True)
        for fact, value in (("sglang", sglang_fact(release)), ("model_weights", weights)):
            (facts / host / (fact + ".fact")).write_text(json.dumps(value, indent=4, sort_keys=True))
    (directory / "hosts.yml").write_text(json.dumps({"pro6000": {"hosts": group}}))


@pytest.fixture(scope="module")
def rendered(request, tmp_path_factory):
    """{host: ("service", unit text) or ("refused", the role's message)} for every host of hosts()."""
    capture = request.config.pluginmanager.get_plugin("capturemanager")

    def report(line):  # timings go to the terminal even under output capture
        with capture.global_and_fixture_disabled():
            print("oracle: " + line, flush=True)

    build_envs.ensure_all(RELEASES, report=report)
    root = tmp_path_factory.mktemp("units")
    models = root / "models"
    for name in ("Qwen3.6-27B", "Qwen3.6-27B-DFlash"):
        (models / name).mkdir(parents=True)
        (models / name / "config.json").write_text("{}")
    playbook = root / "render.yml"
    outcomes = root / "outcomes-%s.json"
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"), ANSIBLE_FORKS="8",
               ANSIBLE_LOCAL_TEMP=str(root / "tmp"), ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    started = time.monotonic()
    found = {}
    for inventory, members in hosts().items():
        write_inventory(root / inventory, inventory, members, models, root / "facts")
        playbook.write_text(PLAYBOOK.format(
            tune_vars=json.dumps(TUNE_ROLE_VARS), out=str(outcomes) % inventory, facts=root / "facts",
            template=REPO / "roles" / "sglang_service" / "templates" / "sglang.service.j2"))
        done = subprocess.run([str(pathlib.Path(sys.executable).parent / "ansible-playbook"), "-i",
                               str(root / inventory), str(playbook)],
                              env=env, capture_output=True, text=True, timeout=900, check=False)
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
        found.update(json.loads(pathlib.Path(str(outcomes) % inventory).read_text()))
    report("%d configurations checked and rendered by ansible-playbook in %.1f s"
           % (len(found), time.monotonic() - started))
    return found


def exec_start(unit):
    """The argv of a unit's ExecStart, as systemd splits it (quotes, then %% and $$)."""
    lines = unit.splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith("ExecStart="))
    text = lines[start][len("ExecStart="):]
    while text.endswith("\\"):
        start += 1
        text = text[:-1] + " " + lines[start].strip()
    return [word.replace("%%", "%").replace("$$", "$") for word in shlex.split(text)]


def expected_refusal(release, algorithm, fallback):
    """Why the role must refuse, or None where the release can serve the configuration."""
    if release == FORK or algorithm == "none":
        return None
    if release in WITHOUT_DFLASH:
        return "has neither DDTree nor DFLASH" if algorithm == "ddtree" else "has no DFLASH"
    if algorithm == "ddtree" and not fallback:
        return "has no DDTree"
    return None


# Control lines: the old flag names (accepted up to 0.5.19, rejected from 0.5.20), the DDTree
# budget flag and an invalid choice (rejected everywhere): the oracle can say no.
OLD_NAMES = ["--model-path", "m", "--speculative-draft-model-path", "d",
             "--speculative-dflash-draft-window-size", "16", "--mamba-scheduler-strategy", "extra_buffer"]
DDTREE_BUDGET = ["--model-path", "m", "--speculative-ddtree-budget", "15"]
BAD_BACKEND = ["--model-path", "m", "--attention-backend", "bogus"]
CONTROL = [OLD_NAMES, DDTREE_BUDGET, BAD_BACKEND]
_EXAMINED = {}


def examined(rendered, sglang_releases, release):
    """One run of the release's real parser for everything asked of it: ({host: (argv, Verdict)}
    for every unit rendered for the release, the control lines' verdicts, the parser report)."""
    if release not in _EXAMINED:
        units = {host: exec_start(text) for host, (kind, text) in rendered.items()
                 if kind == "service" and host.endswith("-" + release)}
        report = sglang_releases.examine(release, [argv[3:] for argv in units.values()] + CONTROL)
        verdicts = report["verdicts"]
        _EXAMINED[release] = ({host: (units[host], verdict) for host, verdict in zip(units, verdicts)},
                              verdicts[len(units):], report)
    return _EXAMINED[release]


def cases(release):
    return [(host, configuration) for members in hosts().values()
            for host, (build, configuration) in members.items() if build == release]


@pytest.mark.parametrize("release", RELEASES)
def test_every_configuration_is_rendered_or_refused_as_the_release_allows(rendered, release):
    for host, (name, variables, algorithm, fallback) in cases(release):
        kind, text = rendered[host]
        refusal = expected_refusal(release, algorithm, fallback)
        if refusal is None:
            assert kind == "service", (host, text)
            continue
        assert kind == "refused", host
        assert refusal in text, (host, text)
        # A build from the package index has no ref: the message says where it came from.
        assert "SGLang %s (from the package index):" % release in text and "()" not in text, text
        if release in WITHOUT_DFLASH and algorithm == "ddtree":
            assert "sglang_service_ddtree_fallback_to_dflash (allow_ddtree_fallback) cannot help" in text
            assert "to dflash" not in text, text
        elif algorithm == "ddtree":
            assert "set sglang_service_ddtree_fallback_to_dflash (allow_ddtree_fallback) to serve DFLASH" in text


@pytest.mark.parametrize("release", RELEASES)
def test_every_rendered_exec_start_is_accepted_by_the_real_parser(rendered, sglang_releases, release):
    units = examined(rendered, sglang_releases, release)[0]
    assert units, "no unit rendered for %s" % release
    for host, (argv, verdict) in units.items():
        assert argv[:3] == [sglang_fact(release)["python"], "-m", "sglang.launch_server"], host
        assert verdict.accepted, (host, verdict.error, argv)
        values = verdict.values
        algorithm = dict(cases(release))[host][2]
        assert values["model_path"].endswith("/Qwen3.6-27B"), host
        # Clients send the target's short name as model, not its directory (issue 37 item 7).
        assert values["served_model_name"] == "Qwen3.6-27B", host
        assert values["max_running_requests"] == 8 and values["enable_metrics"] is True, host
        # Loopback unless a scraper is on another host; then every address, admitting the scrapers.
        name = dict(cases(release))[host][0]
        unit = rendered[host][1]
        if name == REMOTE:
            assert values["host"] == "0.0.0.0" and values["config"].endswith("/sglang-qwen.secrets.yaml"), host
            assert "\nIPAddressAllow=localhost 127.0.0.1 10.0.0.5\n" in unit, host
        else:
            assert values["host"] == "127.0.0.1" and "\nIPAddressAllow=localhost\n" in unit, host
        if algorithm == "none":
            assert values["speculative_algorithm"] is None, host
            continue
        # DFLASH, or DFLASH served in place of DDTree where the fallback is allowed.
        assert values["speculative_algorithm"] == "DFLASH", host
        # The mamba strategy chosen for correctness (SGLang issue 36537), as the release allows.
        if release in LAZY_WITH_DFLASH:
            assert values["mamba_radix_cache_strategy"] == "extra_buffer_lazy", host
            assert values["disable_radix_cache"] is False, host
        else:
            assert values["disable_radix_cache"] is True, host
            assert values["mamba_radix_cache_strategy"] == "auto", host
        # The drafter's declared context is not recorded here: the unit lets SGLang run it at
        # the target's context instead of refusing to start.
        assert "\nEnvironment=SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1\n" in unit, host
        assert values["speculative_draft_model_path"].endswith("/Qwen3.6-27B-DFlash"), host
        config = dict(cases(release))[host][1].get("tune_config", {})
        assert values["speculative_num_draft_tokens"] == config.get("draft_length", DRAFT_LENGTH), host
        assert "--speculative-ddtree-budget" not in argv and "--page-size" not in argv, host


def test_the_production_inventory_serves_dflash_16_on_the_0_5_23_release(rendered, sglang_releases):
    # Issue 38 item 1: production installs the release from the package index and serves DFLASH
    # at draft length 16; the REAL 0.5.23 parser takes the unit the role renders from it.
    production = inventory_vars("production")
    assert (production["sglang_source"], str(production["sglang_version"])) == ("index", "0.5.23")
    host = "production-inventory-0.5.23"
    kind, text = rendered[host]
    assert kind == "service", text
    argv, verdict = examined(rendered, sglang_releases, "0.5.23")[0][host]
    assert verdict.accepted, (verdict.error, argv)
    assert verdict.values["speculative_algorithm"] == "DFLASH"
    assert verdict.values["speculative_num_draft_tokens"] == 16
    assert argv[argv.index("--speculative-algorithm") + 1] == "DFLASH"
    # The opt-in on the same release stops before anything changes, saying how to get DDTree.
    kind, text = rendered["production-ddtree-opt-in-0.5.23"]
    assert kind == "refused" and "SGLang 0.5.23 has no DDTree" in text, text


def test_the_fork_serves_ddtree_with_the_budget_the_inventories_ask_for(rendered):
    # The lab and tune values ask for a budget of draft length - 1 (the rule, or 15 given as
    # such); the fork has no budget option and verifies exactly that, so the unit is rendered.
    # A budget the fork cannot serve (31) is refused before anything changes.
    for host, (name, variables, algorithm, fallback) in cases(FORK):
        kind, text = rendered[host]
        budget = variables.get("tune_config", {}).get("ddtree_budget")
        if budget not in (None, DRAFT_LENGTH - 1):
            assert kind == "refused" and "which has no budget option" in text, (host, text)
            continue
        assert kind == "service", (host, text)
        argv = exec_start(text)[3:]
        args = double.parse_args(FORK, argv)
        assert args["speculative_algorithm"] == "DFLASH" and args["speculative_dflash_enable_ddtree"], host
        assert "--speculative-ddtree-budget" not in argv and args["page_size"] == 1, host


@pytest.mark.parametrize("release", RELEASES)
def test_the_captured_reading_is_what_the_release_holds(rendered, sglang_releases, release):
    # tests/fixtures/sglang_parser feeds the unit tests: its options and choices must stay what
    # the release's parser object holds, as the oracle reads it.
    report = examined(rendered, sglang_releases, release)[2]
    fixture = oracle.fact_fixture(release)
    assert fixture["version"] == release
    assert fixture["options"] == sorted(report["options"] + report["hidden"])
    assert fixture["choices"] == report["choices"]


# What the real validator does with extra_buffer_lazy under DFLASH, run in each release: its
# platform checks (which need a GPU) pass as on a CUDA host, the rest is the release's own code.
LAZY_CHECK = r"""
import json, types
from sglang.srt.server_args import ServerArgs
try:
    from sglang.srt.arg_groups.mamba_hook import validate_mamba_extra_buffer as validator
    method = False
except ImportError:
    validator, method = ServerArgs._validate_mamba_extra_buffer, True
yes = lambda *args, **kwargs: True
for name in ("is_cuda", "supports_mamba_cache_extra_buffer", "_platform_supports_mamba_cache_extra_buffer"):
    if name in validator.__globals__:
        validator.__globals__[name] = yes
if "get_platform" in validator.__globals__:
    validator.__globals__["get_platform"] = lambda: types.SimpleNamespace(
        is_cuda=True, is_musa=False, is_npu=False, is_hip=False, is_xpu=False)
view = types.SimpleNamespace(
    mamba_radix_cache_strategy="extra_buffer_lazy", disable_radix_cache=False, disaggregation_mode="null",
    speculative_algorithm="DFLASH", speculative_num_draft_tokens=16, mamba_track_interval=256,
    page_size=None, chunked_prefill_size=None, _support_mamba_cache_extra_buffer=yes)
arch = types.SimpleNamespace(architectures=["Qwen3_5ForConditionalGeneration"])
try:
    if method:
        view.enable_mamba_extra_buffer_lazy = types.MethodType(ServerArgs.enable_mamba_extra_buffer_lazy, view)
        validator(view, "Qwen3_5ForConditionalGeneration")
    else:
        validator(view, arch, mamba_cache_chunk_size_of=lambda: None)
except AssertionError as error:
    print(json.dumps({"refused": str(error)}))
else:
    print(json.dumps({"refused": None}))
"""


@pytest.mark.parametrize("release", [r for r in RELEASES if r not in WITHOUT_DFLASH])
def test_the_recorded_lazy_verdict_is_what_the_releases_validator_does(sglang_releases, release):
    verdict = sglang_releases.run_code(release, LAZY_CHECK)
    fixture = oracle.fact_fixture(release)
    assert fixture["mamba_lazy_with_speculation"] is (verdict["refused"] is None), verdict
    assert (release in LAZY_WITH_DFLASH) is (verdict["refused"] is None), verdict
    if release not in LAZY_WITH_DFLASH:
        assert "extra_buffer_lazy unsupported with spec" in verdict["refused"]


# What the release's ModelConfig._derive_context_length does with a drafter that declares 32768
# tokens run at a target's 262144, with and without SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN,
# and whether its DFLASH draft worker runs the drafter at the target's context (the source line
# that does it). The module imports quantization kernels the oracle environments lack, so the
# method is compiled alone from the release's file, with the module's own imports of the names
# it uses.
CONTEXT_CHECK = r"""
import ast, inspect, json, logging, os, types
import sglang.srt
path = os.path.join(list(sglang.srt.__path__)[0], "configs", "model_config.py")
tree = ast.parse(open(path).read())
method = next(node for cls in tree.body if isinstance(cls, ast.ClassDef) and cls.name == "ModelConfig"
              for node in cls.body if isinstance(node, ast.FunctionDef) and node.name == "_derive_context_length")
used = {node.id for node in ast.walk(method) if isinstance(node, ast.Name)}
namespace = {"logger": logging.getLogger("model_config")}
for node in tree.body:
    if isinstance(node, (ast.Import, ast.ImportFrom)) and {(a.asname or a.name).split(".")[0] for a in node.names} & used:
        exec(compile(ast.Module([node], []), path, "exec"), namespace)
exec(compile(ast.Module([method], []), path, "exec"), namespace)
found = {}
for allow in ("", "1"):
    if allow:
        os.environ["SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"] = allow
    text = types.SimpleNamespace(max_position_embeddings=32768)
    model = types.SimpleNamespace(is_draft_model=True, hf_text_config=text,
                                  hf_config=types.SimpleNamespace(architectures=["DFlashDraftModel"]))
    try:
        namespace["_derive_context_length"](model, 262144)
    except ValueError as error:
        found[allow or "unset"] = {"error": str(error)}
    else:
        found[allow or "unset"] = {"context_len": model.context_len, "drafter_max": text.max_position_embeddings}
speculative = os.path.join(list(sglang.srt.__path__)[0], "speculative")
if os.path.exists(os.path.join(speculative, "draft_worker_common.py")):
    found["aligned"] = "context_length=target_model_config.context_len" in open(
        os.path.join(speculative, "draft_worker_common.py")).read()
else:
    found["aligned"] = "draft_server_args.context_length = (" in open(os.path.join(speculative, "dflash_worker_v2.py")).read()
print(json.dumps(found))
"""


@pytest.mark.parametrize("release", [r for r in RELEASES if r not in WITHOUT_DFLASH])
def test_a_drafter_declaring_a_shorter_context_needs_the_overwrite_in_every_dflash_release(sglang_releases, release):
    found = sglang_releases.run_code(release, CONTEXT_CHECK)
    assert found["aligned"] is True, found
    assert "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1" in found["unset"]["error"], found
    assert found["1"] == {"context_len": 262144, "drafter_max": 262144}, found


def test_the_module_reads_the_real_release_as_captured():
    # The module run as Ansible runs it, with the interpreter of the release the roles default to.
    assert oracle.module_result("0.5.23") == oracle.fact_fixture("0.5.23")


@pytest.mark.parametrize("release, old_accepted", [("0.5.14", True), ("0.5.19", True), ("0.5.21", False),
                                                   ("0.5.23", False)])
def test_the_oracle_tells_accepted_from_rejected(rendered, sglang_releases, release, old_accepted):
    old, budget, backend = examined(rendered, sglang_releases, release)[1]
    assert old.accepted is old_accepted, (release, old.error)
    if not old_accepted:
        assert "unrecognized arguments: --speculative-dflash-draft-window-size" in old.error
    assert not budget.accepted and "unrecognized arguments: --speculative-ddtree-budget" in budget.error
    assert not backend.accepted and "invalid choice: 'bogus'" in backend.error
