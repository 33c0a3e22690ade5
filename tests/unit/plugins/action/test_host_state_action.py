"""host_state's action plugin run by real ansible-playbook on localhost: a role's templates are
rendered on the controller as ansible.builtin.template renders them (the checksum of what that
module wrote), with the role's delimiters; a missing template is named; a content never reaches
the module, its log or its result."""
import hashlib
import json
import os
import pathlib
import subprocess
import sys

import pytest

from ansible_collections.pro6000.inference.plugins.action.host_state import ActionModule
from support import REPO_ROOT

SECRET = "pro6000-secret-password"

TASKS = """
- name: Write the files as the role's change step does
  ansible.builtin.template:
    src: "{{ item.template }}"
    dest: "{{ item.path }}"
    mode: "0644"
    variable_start_string: "{{ item.variable_start_string | default(omit) }}"
    variable_end_string: "{{ item.variable_end_string | default(omit) }}"
  loop: "{{ declared }}"

- name: Write the password as a role would
  ansible.builtin.copy:
    content: "{{ password }}"
    dest: "{{ out }}/password"
    mode: "0600"
  no_log: true

- name: Compare the same declaration with the host
  pro6000.inference.host_state:
    files: "{{ declared + [{'path': out ~ '/password', 'content': password, 'mode': '0600'}] }}"
  register: as_written

- name: Change one file behind the role's back
  ansible.builtin.copy:
    content: "edited\\n"
    dest: "{{ out }}/app.conf"
    mode: "0644"

- name: Compare again
  pro6000.inference.host_state:
    files: "{{ declared }}"
  register: edited

- name: Name a template the role does not have
  pro6000.inference.host_state:
    files: [{path: "{{ out }}/x", template: no-such.j2}]
  register: missing
  ignore_errors: true

- name: Give delimiters without a template
  pro6000.inference.host_state:
    files: [{path: "{{ out }}/x", checksum: "{{ '0' * 40 }}", variable_start_string: "<<"}]
  register: stray_delimiters
  ignore_errors: true

- name: Give template variables without a template
  pro6000.inference.host_state:
    files: [{path: "{{ out }}/x", checksum: "{{ '0' * 40 }}", template_vars: {replica: r0}}]
  register: stray_template_vars
  ignore_errors: true

- name: Give a content and a checksum
  pro6000.inference.host_state:
    files: [{path: "{{ out }}/password", checksum: "{{ '0' * 40 }}", content: "{{ password }}"}]
  register: both
  ignore_errors: true

- name: Keep what each run answered
  ansible.builtin.copy:
    content: "{{ {'as_written': as_written, 'edited': edited, 'missing': missing, 'stray_delimiters': stray_delimiters,
                  'stray_template_vars': stray_template_vars, 'both': both} | to_json }}"
    dest: "{{ out }}/results.json"
    mode: "0644"
"""


@pytest.fixture(scope="module")
def played(tmp_path_factory):
    root = tmp_path_factory.mktemp("action")
    out = root / "out"
    out.mkdir()
    templates = root / "roles" / "wanted" / "templates"
    templates.mkdir(parents=True)
    (root / "roles" / "wanted" / "tasks").mkdir()
    (root / "roles" / "wanted" / "tasks" / "main.yml").write_text(TASKS)
    (templates / "app.conf.j2").write_text("{{ ansible_managed | comment }}\nport = {{ app_port }}\n{% if app_port %}\nset\n{% endif %}\n")
    # Prometheus's own {{ }} stay as written; << >> are the role's.
    (templates / "rules.yml.j2").write_text("summary: '{{ $labels.instance }} above << limit >>'\n")
    (templates / "password.j2").write_text("{{ password }}\n")
    play = [{"hosts": "localhost", "gather_facts": False, "connection": "local",
             "vars": {"out": str(out), "app_port": 8080, "ansible_python_interpreter": sys.executable, "limit": 3, "password": SECRET,
                      "declared": [{"path": str(out / "app.conf"), "template": "app.conf.j2", "mode": "0644",
                                    "validate": "test -s %s", "notify": ["Restart app"]},
                                   {"path": str(out / "rules.yml"), "template": "rules.yml.j2",
                                    "variable_start_string": "<<", "variable_end_string": ">>"}]},
             "roles": ["wanted"]}]
    (root / "play.yml").write_text(json.dumps(play))
    bindir = pathlib.Path(sys.executable).parent
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO_ROOT / "collections"), ANSIBLE_LOCALHOST_WARNING="False",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="False", PATH=os.pathsep.join([str(bindir), os.environ.get("PATH", "")]))
    done = subprocess.run([str(bindir / "ansible-playbook"), "-vvv", "-i", "localhost,", str(root / "play.yml")],
                          env=env, capture_output=True, text=True, timeout=300, check=False, cwd=root)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return out, json.loads((out / "results.json").read_text()), done.stdout + done.stderr


def sha1(path):
    return hashlib.sha1(path.read_bytes()).hexdigest()


def test_templates_render_as_the_template_module_wrote_them(played):
    out, results, _log = played
    assert (out / "rules.yml").read_text() == "summary: '{{ $labels.instance }} above 3'\n"
    assert results["as_written"]["drift"] == []
    # app.conf was edited later in the play; rules.yml is still as the template module wrote it.
    found = {entry["path"]: entry for entry in results["as_written"]["files"]}
    assert found[str(out / "rules.yml")]["checksum"] == sha1(out / "rules.yml")


def test_the_module_gets_checksums_and_never_the_change_steps_keys():
    action = ActionModule.__new__(ActionModule)  # _wanted reads no task state for a content
    declared = {"path": "/etc/app/password", "content": SECRET, "owner": "root", "mode": "0600",
                "validate": "test -s %s", "notify": ["Restart app"]}
    wanted = {"path": "/etc/app/password", "owner": "root", "mode": "0600",
              "secret_checksum": hashlib.sha1(SECRET.encode()).hexdigest()}
    assert action._wanted(declared, {}) == wanted
    assert action._wanted({"path": "/usr/local/cuda", "state": "link", "src": "/etc/alternatives/cuda"}, {}) == {
        "path": "/usr/local/cuda", "state": "link", "src": "/etc/alternatives/cuda"}
    # A content that is no secret (a dashboard copied as it is) is compared by a checksum the module returns.
    dashboard = {"path": "/etc/grafana/dashboard.json", "content": "{}", "secret": False}
    assert action._wanted(dashboard, {}) == {"path": "/etc/grafana/dashboard.json",
                                             "checksum": hashlib.sha1(b"{}").hexdigest()}


def test_a_changed_file_is_drift(played):
    out, results, _log = played
    assert results["edited"]["drift"] == ["%s: content differs from the wanted one" % (out / "app.conf")]


def test_a_content_is_compared_and_never_passed_shown_or_returned(played):
    out, results, log = played
    assert SECRET not in log
    assert hashlib.sha1(SECRET.encode()).hexdigest() not in log
    secret_entry = results["as_written"]["files"][-1]
    assert secret_entry["path"] == str(out / "password") and "checksum" not in secret_entry


@pytest.mark.parametrize("case, message", [
    ("missing", "files[{out}/x].template: Could not find or access 'no-such.j2'"),
    ("stray_delimiters", "files[{out}/x]: variable_start_string and variable_end_string are a template's delimiters"),
    ("stray_template_vars", "files[{out}/x]: template_vars are a template's variables, but no template is given"),
    ("both", "files[{out}/password]: checksum and content are alternatives, give one"),
])
def test_bad_entries_fail_naming_the_path(played, case, message):
    out, results, _log = played
    assert results[case]["failed"] and results[case]["msg"].startswith(message.format(out=out))
