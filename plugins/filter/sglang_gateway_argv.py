# -*- coding: utf-8 -*-
# Copyright: contributors to pro6000.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The command line of SGLang's gateway (smg launch) in front of the replicas: one place that
names its flags, checked against the pinned release's own parser by tests/integration."""

from __future__ import annotations

DOCUMENTATION = r"""
name: sglang_gateway_argv
short_description: The arguments of C(smg launch) (Shepherd Model Gateway) for the gateway of a host's replicas
version_added: 0.1.0
description:
  - Renders the gateway's arguments from the gateway entry of
    P(pro6000.inference.sglang_replica_plan#filter) and the role's gateway settings. Workers come
    from a manifest file the gateway re-reads on change (C(--discovery-provider file)); the role
    drains a replica by taking it out of that file, and puts it back after its health gate.
  - The API key is never an argument here; the role's launcher reads it from a file only the
    service group reads and hands it to smg's own parser in the process, so it stays out of
    C(/proc/PID/cmdline) and C(systemctl show).
  - Flag names are those of smg 1.13.0 (C(smg launch --help)).
options:
  _input:
    description: >-
      The C(gateway) entry of the replica plan (C(host), C(port), C(metrics_host), C(metrics_port));
      C(metrics_host) defaults to C(127.0.0.1).
    type: dict
    required: true
  settings:
    description: >-
      C(discovery_file), C(policy), C(health_check_interval), C(health_check_timeout),
      C(replica_health_check_timeout), C(health_failure_threshold), C(retries),
      C(cb_failure_threshold), C(cb_timeout), C(request_timeout), C(shutdown_grace), C(extra_args).
      C(health_check_timeout) must exceed C(replica_health_check_timeout) (the replicas'
      C(SGLANG_HEALTH_CHECK_TIMEOUT)), and C(health_check_interval) must be at least
      C(health_check_timeout).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Render the gateway's command line
  ansible.builtin.set_fact:
    __argv: "{{ __plan.gateway | pro6000.inference.sglang_gateway_argv(settings) }}"
"""

RETURN = r"""
_value:
  description: Arguments after C(smg launch).
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.pro6000.inference.plugins.module_utils._inputs import single_line

# Set by the role itself: a second value in extra_args would contradict it, or put a secret in argv.
OWNED = ("--host", "--port", "--discovery-provider", "--discovery-file", "--worker-urls", "--api-key",
         "--tenant-api-key", "--control-plane-api-keys", "--prometheus-host", "--prometheus-port")
# (setting, flag, lowest value); the flags and their limits as `smg launch --help` of 1.13.0 gives them.
NUMBERS = (
    ("health_check_interval", "--health-check-interval-secs", 1),
    ("health_check_timeout", "--health-check-timeout-secs", 1),
    ("health_failure_threshold", "--health-failure-threshold", 1),
    ("retries", "--retry-max-retries", 1),
    ("cb_failure_threshold", "--cb-failure-threshold", 1),
    ("cb_timeout", "--cb-timeout-duration-secs", 1),
    ("request_timeout", "--request-timeout-secs", 1),
    ("shutdown_grace", "--shutdown-grace-period-secs", 0),
)


# What smg 1.13.0 waits for a probe when --health-check-timeout-secs is not given
# (`smg launch --help`: "Timeout in seconds for health check requests ... (default: 5)").
SMG_DEFAULT_HEALTH_CHECK_TIMEOUT = 5


def _error(message):
    return AnsibleFilterError("sglang_gateway_argv: " + message)


def _integer(settings, key, low):
    """The setting as an integer of at least `low`, or None when unset."""
    value = settings.get(key)
    if value is None:
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise _error("%s must be an integer, got %r" % (key, value))
    if number < low:
        raise _error("%s must be at least %d, got %d" % (key, low, number))
    return number


def sglang_gateway_argv(gateway, settings):
    if not isinstance(gateway, dict) or not isinstance(settings, dict):
        raise _error("the gateway entry and the settings must be dictionaries")
    if not settings.get("discovery_file"):
        raise _error("settings need discovery_file, the manifest of the replicas in service")
    argv = ["--host", str(gateway["host"]), "--port", str(gateway["port"]),
            "--discovery-provider", "file", "--discovery-file", str(settings["discovery_file"]),
            # The manifest is re-read as soon as it changes; the interval only backs that up.
            "--discovery-check-interval-secs", "5",
            "--policy", str(settings.get("policy") or "cache_aware"),
            # Loopback, or every address where a scraper is on another host (the plan's
            # metrics_host, from common_metrics_scrapers; the unit admits the scrapers only).
            "--prometheus-host", str(gateway.get("metrics_host") or "127.0.0.1"),
            "--prometheus-port", str(gateway["metrics_port"]),
            "--health-check-endpoint", "/health",
            # A replica joins the manifest only after its gate: register it without the 30 s
            # wait between checks smg defaults to.
            "--worker-startup-check-interval", "1"]
    for key, flag, low in NUMBERS:
        number = _integer(settings, key, low)
        if number is not None:
            argv += [flag, str(number)]
    _check_probe_timing(settings)
    extra = [str(word) for word in settings.get("extra_args") or []]
    taken = [word for word in extra if word.split("=", 1)[0] in OWNED]
    if taken:
        raise _error("extra_args must not set %s: the role sets them (and keeps the API key out of argv)"
                     % ", ".join(taken))
    # Each word becomes part of the unit's ExecStart: a newline there would be a line of its own.
    multiline = [word for word in argv + extra if not single_line(word)]
    if multiline:
        raise _error("%s: a command line word holds a newline or another control character"
                     % ", ".join(repr(word) for word in multiline))
    return argv + extra


def _check_probe_timing(settings):
    """SGLang's /health runs a 1-token generate and waits up to SGLANG_HEALTH_CHECK_TIMEOUT
    seconds for the scheduler (python/sglang/srt/entrypoints/http_server.py, health_generate,
    0.5.23: default 20). A probe that gives up first counts a loaded replica as
    failed, and a probe sent before the last one ended piles another generate onto it (SGLang
    issue 35884, fixed by pull request 35896 after 0.5.23)."""
    timeout = _integer(settings, "health_check_timeout", 1) or SMG_DEFAULT_HEALTH_CHECK_TIMEOUT
    replica = _integer(settings, "replica_health_check_timeout", 1)
    if replica is not None and timeout <= replica:
        raise _error("health_check_timeout (%d s) must exceed the replicas' SGLANG_HEALTH_CHECK_TIMEOUT (%d s): "
                     "a probe that gives up first drops a loaded replica" % (timeout, replica))
    interval = _integer(settings, "health_check_interval", 1)
    if interval is not None and interval < timeout:
        raise _error("health_check_interval (%d s) must be at least health_check_timeout (%d s): probes would "
                     "pile up on a loaded replica" % (interval, timeout))


class FilterModule(object):
    def filters(self):
        return {"sglang_gateway_argv": sglang_gateway_argv}
