# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Decisions of the monitoring roles: where exporters listen, what the last smoke result says as
Prometheus metrics, what Prometheus scrapes, whom Prometheus and Alertmanager exchange packets
with and the web configuration that asks for their key. The filters of the same names call these."""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
from urllib.parse import urlsplit, urlunsplit


# Metric names of the smoke result (node exporter textfile collector), one per gate of
# module sglang_bench: the gate names it writes (decode_tps_c1, output_tps_c<N>, acceptance_length).
SMOKE_PREFIX = "pro6000_smoke_"
LOOPBACK_NAMES = ("localhost",)


class MonitoringError(ValueError):
    """Input the monitoring roles cannot work from; the message says which and why."""


def is_loopback(address):
    """Whether ``address`` (a name, an IP address or a network) stays on this host: C(localhost),
    or an address or network inside 127.0.0.0/8 or ::1. Any other name is not."""
    address = str(address)
    found = _address(address)
    return address in LOOPBACK_NAMES or bool(found and found.is_loopback)


def metrics_listen_address(scrapers):
    """Where a metrics listener binds: loopback when every scraper is loopback, else every address
    (the unit's IPAddressAllow= then admits the scrapers only, which must be addresses for that)."""
    if not scrapers:
        raise MonitoringError("the list of scrapers is empty: name the monitoring host's address (or 127.0.0.1)")
    names = [str(s) for s in scrapers if str(s) not in LOOPBACK_NAMES and _address(s) is None]
    if names:
        raise MonitoringError("scraper(s) %s (common_metrics_scrapers) are neither IP addresses nor networks"
                              " (IPAddressAllow= takes no names)"
                              % ", ".join(repr(n) for n in names))
    return "127.0.0.1" if all(is_loopback(s) for s in scrapers) else "0.0.0.0"


def _sample(name, value, help_text, labels=None):
    label_text = ""
    if labels:
        label_text = "{%s}" % ",".join('%s="%s"' % (k, str(v).replace("\\", "\\\\").replace('"', '\\"'))
                                       for k, v in sorted(labels.items()))
    return ["# HELP %s%s %s" % (SMOKE_PREFIX, name, help_text), "# TYPE %s%s gauge" % (SMOKE_PREFIX, name),
            "%s%s%s %s" % (SMOKE_PREFIX, name, label_text, repr(float(value)))]


def smoke_textfile(result, weights_mount=None):
    """The node exporter textfile for the last smoke result (and the weights directory's mount).

    Floors of 0 or none are not written: an alert that compares against a floor then has
    nothing to compare with, as the gate had nothing to gate on."""
    lines = []
    if result:
        if not isinstance(result, dict) or "gates" not in result:
            raise MonitoringError("the smoke result is not a sglang_bench document (no gates): %r" % (result,))
        gates = {gate.get("name"): gate for gate in result.get("gates") or []}
        passed = all(gate.get("passed") is not False for gate in gates.values())
        lines += _sample("passed", 1 if passed and gates else 0, "Whether every gate of the last smoke benchmark passed.")
        params = result.get("parameters") or {}
        if params.get("concurrency"):
            lines += _sample("concurrency", params["concurrency"], "Concurrency of the last smoke benchmark's throughput level.")
        figures = {"decode_tps": "decode_tps_c1", "acceptance_length": "acceptance_length"}
        output = [name for name in gates if str(name).startswith("output_tps_c")]
        if output:
            figures["output_tps"] = output[0]
        helps = {"decode_tps": "median per-stream decode tok/s at concurrency 1",
                 "output_tps": "aggregate output tok/s at the smoke concurrency",
                 "acceptance_length": "speculative acceptance length"}
        for metric, gate_name in sorted(figures.items()):
            gate = gates.get(gate_name)
            if not gate:
                continue
            if isinstance(gate.get("value"), (int, float)) and not isinstance(gate.get("value"), bool):
                lines += _sample(metric, gate["value"], "Last smoke benchmark: %s." % helps[metric])
            floor = gate.get("floor")
            if isinstance(floor, (int, float)) and not isinstance(floor, bool) and floor > 0:
                lines += _sample(metric + "_floor", floor, "Smoke gate floor: %s." % helps[metric])
        lines += _tokens_per_verify(result.get("acceptance"))
        finished = result.get("finished_at") or result.get("started_at")
        if result.get("started_at"):
            stamp = datetime.datetime.fromisoformat(str(finished).replace("Z", "+00:00")).timestamp()
            lines += _sample("timestamp_seconds", stamp, "When the last smoke benchmark ran (Unix time).")
    if weights_mount:
        lines += _sample("weights_directory_info", 1, "The weights directory and the mount point that holds it.",
                         {"path": weights_mount["path"], "mountpoint": weights_mount["mountpoint"]})
    return "\n".join(lines) + "\n" if lines else ""


def _tokens_per_verify(acceptance):
    """The smoke's acceptance as SGLang's counters count it: the baseline of the acceptance alerts.

    SGLang adds each finished request's completion_tokens to sglang:generation_tokens_total and
    its spec_verify_ct to sglang:spec_verify_calls_total (0.5.23,
    TokenizerMetricsCollector.observe_one_finished_request), so the prefill's first token of each
    request is in the tokens, unlike the gated acceptance_length (which leaves it out)."""
    acceptance = acceptance if isinstance(acceptance, dict) else {}
    tokens, steps = acceptance.get("completion_tokens"), acceptance.get("spec_verify_ct")
    if not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in (tokens, steps)):
        return []
    return _sample("tokens_per_verify", tokens / float(steps),
                   "Last smoke benchmark: completion tokens per verify step, the prefill's token included "
                   "(what sglang:generation_tokens_total / sglang:spec_verify_calls_total count).")


def _retarget(url, address):
    """``url`` as the monitoring host reaches it: the host part replaced by ``address``."""
    parts = urlsplit(url)
    host = "[%s]" % address if ":" in address else address
    return parts, urlunsplit((parts.scheme, "%s:%d" % (host, parts.port), parts.path or "/metrics", "", ""))


def _job(name, targets, scheme="http", path="/metrics"):
    return {"job_name": name, "scheme": scheme, "metrics_path": path, "static_configs": targets}


def scrape_hosts(names, hostvars):
    """The inference hosts as prometheus_scrape_configs takes them, from the play's ``hostvars``.

    Each: ``host``; ``address``, its host variable monitoring_scrape_address, else ansible_host,
    else its name; ``exporters`` and ``service``, what roles metrics_exporters and sglang_service
    recorded (ansible_local), empty where a host has no such record yet."""
    hosts = []
    for name in names:
        host_vars = hostvars[name]
        recorded = (host_vars.get("ansible_facts") or {}).get("ansible_local") or {}
        address = host_vars.get("monitoring_scrape_address", host_vars.get("ansible_host", name))
        hosts.append({"host": name, "address": address, "exporters": recorded.get("metrics_exporters", {}),
                      "service": recorded.get("sglang_service", {})})
    return hosts


def prometheus_scrape_configs(hosts):
    """Scrape jobs from each host's recorded facts.

    ``hosts``: list of {host, address, exporters (ansible_local.metrics_exporters),
    service (ansible_local.sglang_service)}; either record may be missing (a host not deployed
    yet): its jobs are left out. Every target carries ``host``; replicas also ``replica``.
    """
    jobs = {"node": [], "dcgm": [], "sglang": [], "smg": []}
    paths = {}
    seen = set()
    for entry in hosts:
        host, address = entry["host"], entry.get("address") or entry["host"]
        exporters = entry.get("exporters") or {}
        for job in ("node", "dcgm"):
            port = (exporters.get(job) or {}).get("port")
            if port:
                jobs[job].append({"targets": ["%s:%d" % (address, int(port))] if ":" not in address
                                  else ["[%s]:%d" % (address, int(port))], "labels": {"host": host}})
        service = entry.get("service") or {}
        replicas = service.get("replicas")
        if replicas is None and service.get("url"):
            # A record from before replicas: one server, its /metrics on its own port.
            replicas = [{"name": "0", "metrics_url": service["url"].rstrip("/") + "/metrics"}]
        for replica in replicas or []:
            if not replica.get("metrics_url"):
                # Metrics disabled on this replica (sglang_service_enable_metrics: false): nothing to scrape.
                continue
            parts, url = _retarget(replica["metrics_url"], address)
            paths.setdefault("sglang", set()).add((parts.scheme, parts.path or "/metrics"))
            jobs["sglang"].append({"targets": [urlsplit(url).netloc],
                                   "labels": {"host": host, "replica": str(replica["name"])}})
        gateway = service.get("gateway")
        if gateway and gateway.get("metrics_url"):
            parts, url = _retarget(gateway["metrics_url"], address)
            paths.setdefault("smg", set()).add((parts.scheme, parts.path or "/metrics"))
            jobs["smg"].append({"targets": [urlsplit(url).netloc], "labels": {"host": host}})
        if host in seen:
            raise MonitoringError("host %s is listed twice" % host)
        seen.add(host)
    configs = []
    for name in ("node", "dcgm", "sglang", "smg"):
        if not jobs[name]:
            continue
        found = sorted(paths.get(name, {("http", "/metrics")}))
        if len(found) > 1:
            listed = ", ".join("%s://...%s" % f for f in found)
            raise MonitoringError("the %s endpoints differ in scheme or path (%s): one job cannot scrape them"
                                  % (name, listed))
        configs.append(_job(name, jobs[name], scheme=found[0][0], path=found[0][1]))
    return configs


def _address(value):
    """``value`` as an IP address or network, or None when it is a name."""
    try:
        return ipaddress.ip_network(str(value), strict=False)
    except ValueError:
        return None


def monitoring_exposure(listen_address, scrape_addresses, webhook_url="", allow=()):
    """Where Prometheus and Alertmanager are reached from this host, and whom they may exchange
    packets with (systemd IPAddressAllow= filters both directions of every socket of the unit).

    ``loopback``: the listen address is a loopback one (nothing beyond this host reaches them).
    ``local_address``: the address this host reaches them at (loopback for a wildcard).
    ``allow``: localhost, the listen address, every scraped host, the webhook's host and
    ``allow`` (clients, a resolver). ``names``: scrape addresses and the webhook's host that are
    names, which IPAddressAllow= cannot hold.
    """
    listen = str(listen_address)
    loopback = is_loopback(listen)
    wildcard = listen in ("0.0.0.0", "::")
    local = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(listen, listen)
    webhook_host = urlsplit(webhook_url).hostname if webhook_url else None
    peers = [str(a) for a in scrape_addresses] + ([webhook_host] if webhook_host else [])
    names = sorted({p for p in peers if p not in LOOPBACK_NAMES and _address(p) is None})
    found = ["localhost"] + ([] if wildcard or loopback else [listen])
    found += [p for p in peers if p not in LOOPBACK_NAMES and _address(p) is not None] + [str(a) for a in allow]
    unique = []
    for address in found:
        if address not in unique:
            unique.append(address)
    return {"loopback": loopback, "local_address": local, "allow": unique, "names": names}


def web_config(users, site):
    """The web configuration of Prometheus's exporter-toolkit (``--web.config.file``, read by
    Prometheus 2.24+ and Alertmanager 0.22+): ``basic_auth_users`` with a bcrypt hash of each
    password. The salt comes from ``site``, the user and the password, so that the same input
    gives the same file (a rerun changes nothing) while no two sites share a hash."""
    # Imported here, by the one function that needs it: pycryptodome's import takes about 0.2 s of
    # CPU, and every task that uses any filter of this file imports the file afresh in its fork.
    try:
        from Crypto.Protocol.KDF import bcrypt
    except ImportError as exc:
        raise MonitoringError("hashing the web passwords needs pycryptodome (bcrypt) on the controller") from exc
    hashed = {}
    for user, password in sorted(users.items()):
        secret = str(password).encode("utf-8")
        if not secret or len(secret) > 72 or b"\0" in secret:
            raise MonitoringError("the password of web user %r must be 1 to 72 bytes without NUL (bcrypt)" % user)
        salt = hashlib.sha256(b"\0".join([b"pro6000 web config", str(site).encode(), str(user).encode(), secret]))
        hashed[str(user)] = bcrypt(secret, 10, salt=salt.digest()[:16]).decode("ascii")
    return {"basic_auth_users": hashed}
