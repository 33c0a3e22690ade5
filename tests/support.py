"""Helpers that the unit and integration tests, the benchmarks and the doubles' own scripts share.

Importable as ``support`` once the repository's tests/ directory is on sys.path
(tests/unit/conftest.py, tests/integration/test_argv_real_parser.py, tests/benchmarks/_double.py
and chatops/tests/conftest.py put it there).
"""
import hashlib
import importlib.util
import json
import os
import pathlib
import socket
import subprocess
import sys
import threading
import time

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
# What a time bound measured by a server on loopback (first connection in, last one closed by the
# client) may exceed the module's bound by: the client checks its deadline every 0.05 s
# (IDLE_CHECK_S), then two processes (the module and the server's thread) must each be woken
# once more to close and to see the close. With two busy loops on a 2-core machine each wake-up
# waits behind them for a CFS slice (sched_latency is 12-24 ms there), a few slices at worst;
# 0.5 s is ten times the deadline check interval and several times that, far below any bound
# that would be broken by a deadline not enforced (a silent request waits 30 s).
SERVER_SIDE_SLACK_S = 0.5


def free_port():
    """A loopback TCP port that nothing listens on: free to bind, refused to connect to."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def load_module(name, path):
    """Import the script at ``path`` (a fixture's script, not part of a package) as ``name``,
    with its own directory importable, as when it runs as a script (its sibling modules)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    here = str(pathlib.Path(path).resolve().parent)
    sys.path.insert(0, here)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(here)
    return module


def as_the_controller_takes(result):
    """A module's JSON result as the controller takes it: from ansible-core 2.22 on, a module
    hands the values it masks (no_log) to the controller's masker in ``_ansible_new_secrets``,
    and the controller removes that key before anything shows or registers the result
    (ansible/_internal/_task.py). Earlier lines send no such key."""
    result.pop("_ansible_new_secrets", None)
    return result


def run_module_file(name, args, workdir, pythonpath=(), environ=None, timeout=120):
    """Run the collection's module ``name`` as Ansible runs it, a process reading its arguments
    from a file written into ``workdir``, with the checkout importable; returns its JSON result.

    ``pythonpath`` adds folders after the collection, ``environ`` overrides variables."""
    args_file = pathlib.Path(workdir) / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = dict(os.environ, **(environ or {}),
               PYTHONPATH=os.pathsep.join([str(REPO_ROOT / "collections"), *map(str, pythonpath)]))
    done = subprocess.run([sys.executable, str(REPO_ROOT / "plugins" / "modules" / f"{name}.py"), str(args_file)],
                          env=env, capture_output=True, text=True, timeout=timeout, check=False)
    return as_the_controller_takes(json.loads(done.stdout))


def run_main(main, args, capsys):
    """Run a module's main() in this process and return (failed, result) from the JSON it prints."""
    # Imported here: only the unit tests' helper needs pytest; the other helpers run without it.
    import pytest  # pylint: disable=import-outside-toplevel
    from ansible.module_utils.testing import patch_module_args  # pylint: disable=import-outside-toplevel

    with patch_module_args(args):
        with pytest.raises(SystemExit) as exit_info:
            main()
    return exit_info.value.code != 0, as_the_controller_takes(json.loads(capsys.readouterr().out))


class Dribble:
    """An answer a hostile server sends slowly: ``head`` at once, then ``unit`` over and over, one
    byte per send, for ``seconds`` (issue 36, finding 3: one byte per packet). Sends are
    ``spacing`` seconds apart, more than a client takes to read one, so that each read brings
    one byte however busy the machine is."""

    def __init__(self, head, unit, seconds, spacing=15e-6):
        self.head, self.unit, self.seconds, self.spacing = head, unit, seconds, spacing


class HostileServer:
    """``with HostileServer(answers) as server:`` an HTTP server on a free loopback port
    (``server.url``) that answers each request path with ``answers[path]``: bytes, the whole
    answer written at once (status line included), or a Dribble; then it closes the connection.
    It is an attacker, not a double of SGLang: what it sends is what a test scripts. It stops by
    itself after ``lifetime`` seconds, whatever the client does; ``sent`` counts the bytes sent."""

    def __init__(self, answers, lifetime=30.0):
        self.answers = answers
        self.sent = 0
        self.paths = []
        self.stop_at = None
        self.lifetime = lifetime
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.listener.settimeout(0.1)
        self.url = "http://127.0.0.1:%d" % self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.threads = []

    def __enter__(self):
        self.stop_at = time.perf_counter() + self.lifetime
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_at = 0
        self.thread.join(5)
        for thread in self.threads:
            thread.join(5)
        self.listener.close()

    def _serve(self):
        while time.perf_counter() < self.stop_at:
            try:
                conn, _peer = self.listener.accept()
            except OSError:
                continue
            thread = threading.Thread(target=self._answer, args=(conn,), daemon=True)
            self.threads.append(thread)
            thread.start()

    def _answer(self, conn):
        with conn:
            conn.settimeout(2)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            request = b""
            try:
                while b"\r\n\r\n" not in request:
                    data = conn.recv(65536)
                    if not data:
                        return
                    request += data
                path = request.split(b" ", 2)[1].decode("latin-1")
                self.paths.append(path)
                answer = self.answers.get(path, b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                if isinstance(answer, bytes):
                    conn.sendall(answer)
                    self.sent += len(answer)
                    return
                conn.sendall(answer.head)
                self.sent += len(answer.head)
                end = min(time.perf_counter() + answer.seconds, self.stop_at)
                # The pattern one byte per send, sends at least ``answer.spacing`` seconds apart.
                pattern = memoryview(answer.unit * (4096 // len(answer.unit) or 1))
                clock = time.perf_counter
                due = clock()
                while due < end:
                    for index in range(len(pattern)):
                        while clock() < due:
                            pass  # a sleep would last far longer than the spacing
                        self.sent += conn.send(pattern[index:index + 1])
                        due = clock() + answer.spacing
            except OSError:
                return  # the client hung up


# Runs a module (argv[3:]) with its address space limited to argv[1] bytes and writes its peak
# resident memory (bytes) and its run time, interpreter start-up excluded, to the file argv[2].
# The peak is the kernel's VmHWM of the process's own memory: getrusage's ru_maxrss would keep
# the forking parent's (pytest's) size across the exec.
_MEASURED = """
import atexit, re, resource, runpy, sys, time
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
report, started = sys.argv[2], time.perf_counter()
def measured():
    with open("/proc/self/status") as status:
        peak = int(re.search(r"VmHWM:\\s+(\\d+) kB", status.read()).group(1)) * 1024
    with open(report, "w") as out:
        out.write("%d %f" % (peak, time.perf_counter() - started))
atexit.register(measured)
sys.argv = sys.argv[3:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def run_module_measured(name, args, workdir, memory_limit, timeout):
    """Run the collection's module ``name`` as run_module_file does, its address space capped at
    ``memory_limit`` bytes and its run at ``timeout`` seconds (subprocess.TimeoutExpired);
    returns (result or None where it printed no JSON, stderr, peak RSS in bytes, seconds)."""
    workdir = pathlib.Path(workdir)
    args_file, report = workdir / "args.json", workdir / "measured"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT / "collections"))
    done = subprocess.run([sys.executable, "-c", _MEASURED, str(memory_limit), str(report),
                           str(REPO_ROOT / "plugins" / "modules" / f"{name}.py"), str(args_file)],
                          env=env, capture_output=True, text=True, timeout=timeout, check=False)
    try:
        result = as_the_controller_takes(json.loads(done.stdout))
    except ValueError:
        result = None
    peak, seconds = report.read_text().split()
    return result, done.stderr, int(peak), float(seconds)


def http_answer(body, content_type="application/json"):
    """The bytes of a whole HTTP/1.1 answer 200 carrying ``body`` (bytes, or a JSON document)."""
    if not isinstance(body, bytes):
        body = json.dumps(body).encode()
    return b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (
        content_type.encode(), len(body), body)


# JSON nested 100,000 deep: json.loads raises RecursionError on it, not ValueError.
DEEP_JSON = b"[" * 100000 + b"]" * 100000
# The address space of a measured module run: a broken memory bound fails the test with a
# MemoryError instead of filling a shared machine.
MEASURED_MEMORY_LIMIT = 1024 ** 3


def sha256_hex(data):
    return hashlib.sha256(data).hexdigest()


def manifest_entry(data, algo="sha256"):
    """A manifest entry of model_stage's weights engine for data: size, algorithm and digest
    (sha256, or the git blob id that git_sha1 names)."""
    digest = sha256_hex(data) if algo == "sha256" else hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    return {"size": len(data), "algo": algo, "digest": digest}


CASES_PLAY = """
- name: Run each case against its role, one playbook run for all
  hosts: localhost
  connection: local
  gather_facts: true
  gather_subset: [min]
  vars: {play_vars}
  tasks:
{read_facts}    - name: Run one case
      ansible.builtin.include_tasks: {case_file}
      loop: "{{{{ cases }}}}"
      loop_control:
        loop_var: case
    - name: Write the outcomes
      ansible.builtin.copy:
        dest: {out}
        content: "{{{{ outcomes | to_json }}}}"
        mode: "0644"
      check_mode: false
"""

READ_FACTS = """    - name: Read the recorded facts from the test's fact directory
      ansible.builtin.setup:
        gather_subset: ["!all", "!min", "local"]
        fact_path: {fact_path}
"""

# A failed loop's message is each failed item's; otherwise the task's own.
CASE_TASKS = """
- name: Run the role with this case's variables
  block:
    - name: Include the role
      ansible.builtin.include_role:
        name: pro6000.inference.{{{{ case.role }}}}
{tasks_from}      vars:
{variables}
    - name: Note that it passed
      ansible.builtin.set_fact:
        outcomes: "{{{{ outcomes | combine({{case.name: None}}) }}}}"
  rescue:
    - name: Note which task failed and why
      ansible.builtin.set_fact:
        outcomes: "{{{{ outcomes | combine({{case.name: {{'task': ansible_failed_task.name, 'msg': __why or ansible_failed_result.msg}}}}) }}}}"
      vars:
        __why: "{{{{ ansible_failed_result.results | default([]) | selectattr('failed', 'true') | map(attribute='msg') | join('; ') }}}}"
"""


def run_cases(root, cases, defaults, tasks_from=None, check=True, play_vars=None, fact_path=None):
    """Run roles on localhost with real ansible-playbook, once for every case, and return
    {case name: None when the role passed, else {"task": the failed task's name, "msg": why}}.

    cases: (name, role, variables) each; a case's variables go over ``defaults`` and reach the
    role as include_role vars. tasks_from: the role's task file to include (else the whole
    role); check: in check mode; play_vars: the play's vars; fact_path: a facts.d to load first."""
    root = pathlib.Path(root)
    names = sorted(set(defaults).union(*(variables for _name, _role, variables in cases)))
    variables = "".join('        %s: "{{ case.vars.%s }}"\n' % (name, name) for name in names)
    (root / "case.yml").write_text(CASE_TASKS.format(
        tasks_from="        tasks_from: %s\n" % tasks_from if tasks_from else "", variables=variables.rstrip("\n")))
    listed = [{"name": name, "role": role, "vars": dict(defaults, **variables)} for name, role, variables in cases]
    for case in listed:
        missing = set(names) - set(case["vars"])
        assert not missing, "case %r sets none of %s and they have no default" % (case["name"], sorted(missing))
    read_facts = "" if fact_path is None else READ_FACTS.format(fact_path=json.dumps(str(fact_path)))
    (root / "play.yml").write_text(CASES_PLAY.format(
        play_vars=json.dumps(dict(play_vars or {}, cases=listed, outcomes={})), read_facts=read_facts,
        case_file=json.dumps(str(root / "case.yml")), out=json.dumps(str(root / "outcomes.json"))))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO_ROOT / "collections"), ANSIBLE_INJECT_FACT_VARS="False",
               ANSIBLE_LOCALHOST_WARNING="False", ANSIBLE_INVENTORY_UNPARSED_WARNING="False",
               PATH=os.pathsep.join([str(pathlib.Path(sys.executable).parent), os.environ.get("PATH", "")]))
    done = subprocess.run([str(pathlib.Path(sys.executable).parent / "ansible-playbook"), *(["--check"] if check else []),
                           str(root / "play.yml")], env=env, capture_output=True, text=True, timeout=300, check=False,
                          cwd=root)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return json.loads((root / "outcomes.json").read_text())


def sglang_chat(max_tokens=32):
    """A streamed chat completion request for the SGLang client's tests, usage in every event."""
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": max_tokens,
            "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}


def weights_commit(repo_id, label):
    """The generator's commit id of a labelled revision (generate.py, commit_of)."""
    return hashlib.sha1(f"{repo_id}@{label}".encode()).hexdigest()


class HubDouble:
    """The hub and CDN listeners of tests/fixtures/hub_double in threads of the test process, over
    the weights generator's molecule profile (the target's main is v2, the drafter's v1)."""

    def __init__(self, root, token):
        self.root = root
        self.log = root / "requests.jsonl"
        self.token = token
        fixtures = REPO_ROOT / "tests" / "fixtures"
        load_module("generate", fixtures / "weights" / "generate.py").molecule_profile(str(root))
        server = load_module("hub_double_server", fixtures / "hub_double" / "server.py")
        hub_port, cdn_port = free_port(), free_port()
        args = type("Args", (), dict(root=str(root), log=str(self.log), token=token, tree_page_size=2,
                                     bind="127.0.0.1", cdn_port=cdn_port))
        self.state = server.State(args)
        self.servers = [server.serve(server.HubHandler, self.state, "127.0.0.1", hub_port),
                        server.serve(server.CdnHandler, self.state, "127.0.0.1", cdn_port)]
        self.url = f"http://127.0.0.1:{hub_port}"

    def requests(self):
        self.state.wait_idle()
        return [json.loads(line) for line in self.log.read_text().splitlines()] if self.log.exists() else []

    def shutdown(self):
        for server in self.servers:
            server.shutdown()

    def clear(self):
        self.state.wait_idle()
        self.log.write_text("")

    def manifest(self, repo_id, label):
        """The generator's own list of the revision's files (path, size, sha256)."""
        tree = self.root / "mirror" / repo_id / weights_commit(repo_id, label)
        return sorted(json.loads((tree / "manifest.json").read_text())["files"], key=lambda f: f["path"])

    def helper_text(self, repo_id, commit_id, var):
        """What the documented helper command prints for this commit, against this hub."""
        env = dict(os.environ, HF_ENDPOINT=self.url, HF_TOKEN=self.token, HF_HUB_DISABLE_XET="1",
                   HF_HOME=str(self.root / "hf-home"))
        helper = REPO_ROOT / "plugins" / "module_utils" / "_weights_hub_helper.py"
        return subprocess.run([sys.executable, str(helper), "lock", repo_id, commit_id, "--var", var],
                              capture_output=True, text=True, check=True, timeout=120, env=env).stdout


# A local git repository for the tests of what git ls-remote lists (SGLang refs): no user
# configuration or credential helper of the machine takes part.
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid", "PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}


def git(repo, *args):
    """Run git in repo and return its output, stripped."""
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=GIT_ENV).stdout.strip()


def git_history(repo, commits, refs=None):
    """A repository of ``commits`` commits of one file on branch main; ``refs`` maps a commit's
    index to the git commands (argument lists) run right after it: tags, branches, refs."""
    git(repo, "init", "-q", "-b", "main")
    for n in range(commits):
        (repo / "f").write_text(str(n))
        git(repo, "add", "f")
        git(repo, "commit", "-q", "-m", "c%d" % n)
        for command in (refs or {}).get(n, ()):
            git(repo, *command)
    return repo
