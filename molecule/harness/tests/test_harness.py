"""The container behaves like a systemd host: the sandboxed unit runs and answers."""


def test_systemd_is_pid_one(host):
    assert host.file("/proc/1/comm").content_string.strip() == "systemd"


def test_sandboxed_unit_runs_under_a_dynamic_user(host):
    unit = host.service("harness-http.service")
    assert unit.is_running
    assert unit.is_enabled
    user = host.check_output("systemctl show -p User,DynamicUser --value harness-http.service")
    assert "yes" in user.split()
    pid = host.check_output("systemctl show -p MainPID --value harness-http.service")
    assert host.check_output(f"stat -c %U /proc/{pid}") != "root"


def test_unit_listens_on_loopback_only(host):
    assert host.socket("tcp://127.0.0.1:18080").is_listening
    assert not host.socket("tcp://0.0.0.0:18080").is_listening


def test_unit_serves_files(host):
    page = host.check_output("curl -sf http://127.0.0.1:18080/")
    assert "Directory listing" in page
