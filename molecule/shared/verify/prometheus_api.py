"""Prometheus's HTTP API as an operator reads it, through the container (curl inside it), for the
verifiers of the scenarios that run the monitoring host: `monitoring` and `default` (the lab)."""
import json
import pathlib
import time
import urllib.parse

PROMETHEUS = "http://127.0.0.1:9090"
# The dashboard as the collection ships it (role monitoring installs it where a Grafana is).
DASHBOARD = pathlib.Path(__file__).resolve().parents[3] / "roles" / "monitoring" / "files" / "pro6000-dashboard.json"


def credentials(host):
    """(user, password) Prometheus and Alertmanager ask for (the scenario's monitoring_web_user and
    monitoring_web_password), or None where they ask for none."""
    variables = host.ansible.get_variables()
    if not variables.get("monitoring_web_password"):
        return None
    return variables.get("monitoring_web_user", "pro6000"), variables["monitoring_web_password"]


def get(host, url):
    """The body of a GET of ``url`` from inside the container, with the credentials if any."""
    found = credentials(host)
    if found:
        return host.check_output("curl -sf -u %s %s", "%s:%s" % found, url)
    return host.check_output("curl -sf %s", url)


def api(host, path, **params):
    url = PROMETHEUS + path + ("?" + urllib.parse.urlencode(params) if params else "")
    answer = json.loads(get(host, url))
    assert answer["status"] == "success", answer
    return answer["data"]


def query(host, expr):
    return api(host, "/api/v1/query", query=expr)["result"]


def firing(host, name):
    return [a for a in api(host, "/api/v1/alerts")["alerts"] if a["labels"]["alertname"] == name and a["state"] == "firing"]


def targets(host):
    """(job, host, replica, health) of every active target, sorted."""
    return sorted((t["labels"]["job"], t["labels"]["host"], t["labels"].get("replica", ""), t["health"])
                  for t in api(host, "/api/v1/targets")["activeTargets"])


def all_targets_up(host, timeout):
    """The targets once every one is up (within `timeout` seconds), else as they are then."""
    def every_one_up():
        seen = targets(host)
        return seen if seen and all(target[3] == "up" for target in seen) else None
    return wait(every_one_up, timeout) or targets(host)


def dashboard_exprs():
    dashboard = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def empty_dashboard_queries(host, rate_interval):
    """The dashboard's queries, with Grafana's variables filled in, that return no series."""
    exprs = (e.replace("$host", ".*").replace("$__rate_interval", rate_interval) for e in dashboard_exprs())
    return [e for e in exprs if not query(host, e)]


def wait(predicate, timeout, step=0.5):
    """The predicate's first truthy value within `timeout` seconds, else its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return predicate()
