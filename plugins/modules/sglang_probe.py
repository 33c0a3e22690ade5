#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_probe
short_description: Check that an SGLang server answers and serves the speculative setup asked for
version_added: "0.1.0"
description:
  - Waits until C(GET /health) answers HTTP 200 (for up to O(wait_timeout) seconds), then reads
    C(/server_info) (falling back to the deprecated C(/get_server_info)), C(/model_info)
    (falling back to C(/get_model_info)) and C(/v1/models).
  - Compares the speculative decoding settings the server reports with the expected ones given
    as options and fails with one precise message per mismatch.
  - Only reads from the server; it never reports a change.
  - The module returns within O(wait_timeout) + O(timeout) seconds whatever the server does
    (answers slowly, never, or drops connections), since every request and retry runs against
    that bound; its memory stays within a fixed multiple of the client's cap on an answer
    (64 MiB) however small the server's packets, and JSON nested too deep fails naming the URL.
  - DDTree is reported as algorithm C(DDTREE) both for builds with
    C(--speculative-algorithm DDTREE) and for forks that run DFLASH with
    C(--speculative-dflash-enable-ddtree).
author:
  - pro6000.inference developers (@pro6000)
extends_documentation_fragment:
  - pro6000.inference.sglang_server
  - pro6000.inference.attributes
  - pro6000.inference.attributes.read_only
options:
  timeout:
    description:
      - Seconds each request may wait for its answer, and the time the module may take beyond
        O(wait_timeout) in all, retries included.
      - Must be positive, at most 3600.
    type: float
    default: 30
  wait_timeout:
    description:
      - Seconds to keep polling C(/health) until it answers HTTP 200.
      - V(0) checks once. Model loading and CUDA-graph capture take minutes on a real host.
      - Must not be negative, at most 86400 (a day).
    type: float
    default: 0
  wait_interval:
    description:
      - Seconds between two C(/health) polls while waiting.
      - Must be positive, at most 3600.
    type: float
    default: 2
  servers:
    description:
      - Several servers to check in one module run (the replicas of a host, then its gateway),
        each against the same expected settings. An entry's C(url) and C(unit) stand for O(url)
        and O(unit), and O(url) is not used. Each may wait up to O(wait_timeout).
      - The module fails naming every server that does not answer or does not serve what was
        expected, after checking all of them.
    type: list
    elements: dict
    suboptions:
      url:
        description: Base URL of the server.
        type: str
        required: true
      unit:
        description: The systemd unit that runs it, as O(unit).
        type: str
      name:
        description: What the failure messages call it (a replica's name, say); its URL when not given.
        type: str
  unit:
    description:
      - The systemd unit that runs the server. While waiting, a unit that systemd reports as
        failed or stopped (C(systemctl is-active) says C(failed) or C(inactive)) ends the wait
        at once, since a server that exited (on a command line it refuses, say) or that nobody
        started never becomes healthy, and waiting out O(wait_timeout) would only delay the
        rollback or the report. A unit starting (C(activating), also between automatic
        restarts) is waited for.
    type: str
  model:
    description:
      - Expected model. Matches the C(model_path) from C(/model_info) (trailing slashes
        ignored) or any model id listed by C(/v1/models).
    type: str
  speculative_algorithm:
    description:
      - Expected speculative algorithm, for example V(DFLASH) or V(DDTREE), compared case-insensitively.
      - V(NONE) expects a server without speculative decoding.
    type: str
  speculative_num_draft_tokens:
    description:
      - Expected number of draft tokens (the DFlash block size).
    type: int
  speculative_ddtree_budget:
    description:
      - Expected DDTree node budget.
    type: int
  speculative_draft_model_path:
    description:
      - Expected draft model path (trailing slashes ignored).
    type: str
notes:
  - Uses the Python standard library only; nothing needs to be installed on the target.
seealso:
  - module: pro6000.inference.sglang_bench
"""

EXAMPLES = r"""
- name: Wait for the server and check it runs DFLASH with block size 16
  pro6000.inference.sglang_probe:
    url: http://127.0.0.1:30000
    wait_timeout: 900
    model: /srv/models/Qwen3.6-27B
    speculative_algorithm: DFLASH
    speculative_num_draft_tokens: 16
    speculative_draft_model_path: /srv/models/Qwen3.6-27B-DFlash
  register: probe

- name: Show the version the server reports
  ansible.builtin.debug:
    msg: "{{ probe.server.version }}"
"""

RETURN = r"""
servers:
  description: With O(servers), the facts read from each server (as RV(server)), in order; V(null) for one that did not answer.
  returned: when O(servers) is given
  type: list
  elements: dict
server:
  description: The facts read from the server, normalised; with O(servers), from the last one.
  returned: when the server answered its health check
  type: dict
  contains:
    url:
      description: Base URL probed.
      type: str
      sample: http://127.0.0.1:30000
    healthy:
      description: Whether C(/health) answered HTTP 200.
      type: bool
      sample: true
    waited_s:
      description: Seconds spent waiting for C(/health).
      type: float
      sample: 0.01
    server_info_path:
      description: Which endpoint answered, C(/server_info) or C(/get_server_info).
      type: str
      sample: /server_info
    version:
      description: SGLang version the server reports.
      type: str
      sample: 0.5.23
    model_path:
      description: C(model_path) from C(/model_info).
      type: str
      sample: /srv/models/Qwen3.6-27B
    models:
      description: Model ids listed by C(/v1/models).
      type: list
      elements: str
      sample: [/srv/models/Qwen3.6-27B]
    max_model_len:
      description: C(max_model_len) of the first model card, when given.
      type: int
      sample: 262144
    unit:
      description: O(unit), when given.
      type: str
      sample: sglang-qwen-0.service
    invocation:
      description:
        - systemd's C(InvocationID) of O(unit) when the server answered, which names this run of
          the unit's process (a restart gets a new one), so that a later run can tell whether it
          still talks to the same process; V(null) without O(unit) or where systemd cannot say.
      type: str
      sample: a1041905b76d414788915dbd332d3a44
    speculative:
      description: Speculative decoding settings the server reports.
      type: dict
      sample:
        algorithm: DFLASH
        num_draft_tokens: 16
        ddtree_budget: null
        draft_model_path: /srv/models/Qwen3.6-27B-DFlash
        avg_spec_accept_length: [6.8]
server_info:
  description: The server's own C(/server_info) document, unchanged but for the key and the URL's credentials, masked as C(********).
  returned: when the server answered its health check
  type: dict
model_info:
  description: The server's own C(/model_info) document, unchanged.
  returned: when the server answered its health check
  type: dict
mismatches:
  description: One entry per expected setting the server does not match; with O(servers), each also names its server's C(url).
  returned: always
  type: list
  elements: dict
  sample: [{setting: speculative_algorithm, expected: DDTREE, actual: DFLASH}]
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.parameters import remove_values

from ansible_collections.pro6000.inference.plugins.module_utils._sglang.client import (
    SERVER_ARGUMENT_SPEC,
    SGLangClient,
    POSITIVE,
    check_bounds,
    fetch_server_info,
    model_cards,
    normalise_path,
    speculative_settings,
    url_credentials,
)
from ansible_collections.pro6000.inference.plugins.module_utils._sglang.errors import SGLangError

# (least, most, unit) of each numeric option, checked before any request: no value, inf and
# nan included, can stretch the module's time bound or overflow a socket timeout.
BOUNDS = {
    "timeout": (POSITIVE, 3600, "seconds"),
    "wait_timeout": (0, 86400, "seconds"),
    "wait_interval": (POSITIVE, 3600, "seconds"),
}


def wait_for_health(client, wait_timeout, interval, deadline, gone=lambda: None):
    """Poll /health until HTTP 200, ``wait_timeout`` seconds, or ``gone()`` names why the server
    will not come; each poll ends by ``deadline`` (perf_counter).

    Returns (healthy, waited seconds, last answer or the reason it stopped waiting).
    """
    start = time.perf_counter()
    wait_end = start + wait_timeout
    while True:
        try:
            response = client.get("/health", deadline=deadline, retries=0)
            last = "HTTP %d %s" % (response.status, response.text(120))
            if response.status == 200:
                return True, time.perf_counter() - start, last.strip()
        except SGLangError as exc:
            last = str(exc)
        reason = gone()
        if reason:
            return False, time.perf_counter() - start, "%s (%s)" % (reason, last)
        left = wait_end - time.perf_counter()
        if left <= 0:
            return False, time.perf_counter() - start, last
        time.sleep(min(interval, left))


def unit_failed(module, unit):
    """A callable for wait_for_health: the reason when systemd reports ``unit`` failed or
    stopped (inactive); one starting (activating, also between automatic restarts) is waited for,
    and so is one systemd cannot tell about."""
    def gone():
        _rc, out, _err = module.run_command(["systemctl", "is-active", unit])
        state = out.strip()
        return "systemd reports %s %s" % (unit, state) if state in ("failed", "inactive") else None
    return gone


def unit_invocation(module, unit):
    """systemd's InvocationID of the unit's current run, None where systemd cannot say."""
    rc, out, _err = module.run_command(["systemctl", "show", "--property=InvocationID", "--value", "--", unit])
    return out.strip() or None if rc == 0 else None


def get_with_alias(client, path, alias, deadline):
    response = client.get(path, deadline=deadline)
    if response.status in (404, 405):
        path = alias
        response = client.get(path, deadline=deadline)
    if not response.ok:
        raise SGLangError("GET %s: HTTP %d: %s" % (client.url(path), response.status, response.text()))
    return response.json(dict)


def compare(expected, server):
    """One mismatch entry per expected setting that differs from what the server reports."""
    spec = server["speculative"]
    mismatches = []
    wanted_algorithm = expected.get("speculative_algorithm")
    if wanted_algorithm is not None:
        wanted = wanted_algorithm.upper()
        actual = spec["algorithm"] or "NONE"
        if wanted != actual:
            mismatches.append({"setting": "speculative_algorithm", "expected": wanted, "actual": actual})
    for setting, key in (("speculative_num_draft_tokens", "num_draft_tokens"),
                         ("speculative_ddtree_budget", "ddtree_budget")):
        wanted = expected.get(setting)
        if wanted is None:
            continue
        actual = spec[key]
        try:
            same = actual is not None and int(actual) == wanted
        except (TypeError, ValueError, OverflowError):  # a string, a list, Infinity
            same = False
        if not same:
            mismatches.append({"setting": setting, "expected": wanted, "actual": actual})
    wanted = expected.get("speculative_draft_model_path")
    if wanted is not None and normalise_path(wanted) != normalise_path(spec["draft_model_path"]):
        mismatches.append({"setting": "speculative_draft_model_path", "expected": wanted,
                           "actual": spec["draft_model_path"]})
    wanted = expected.get("model")
    if wanted is not None:
        served = [normalise_path(server["model_path"])] + [normalise_path(m) for m in server["models"]]
        if normalise_path(wanted) not in served:
            mismatches.append({"setting": "model", "expected": wanted,
                               "actual": {"model_path": server["model_path"], "models": server["models"]}})
    return mismatches


def describe(mismatch):
    return "%s: expected %r, the server reports %r" % (mismatch["setting"], mismatch["expected"], mismatch["actual"])


def probe(client, wait_timeout, wait_interval, gone=lambda: None):
    """Read the server's facts within wait_timeout + the client's timeout; raises SGLangError
    when it is not healthy or an endpoint fails."""
    deadline = time.perf_counter() + wait_timeout + client.timeout
    healthy, waited, last = wait_for_health(client, wait_timeout, wait_interval, deadline, gone)
    if not healthy:
        raise SGLangError("%s/health did not answer HTTP 200 within %.1f s; last answer: %s"
                          % (client.base_url, waited, last))
    info_path, info = fetch_server_info(client, deadline)
    model_info = get_with_alias(client, "/model_info", "/get_model_info", deadline)
    models = model_cards(client, deadline)
    server = {
        "url": client.base_url,
        "healthy": True,
        "waited_s": round(waited, 3),
        "server_info_path": info_path,
        "version": info.get("version"),
        "model_path": model_info.get("model_path") or info.get("model_path"),
        "models": [card.get("id") for card in models],
        "max_model_len": models[0].get("max_model_len") if models else None,
        "speculative": speculative_settings(info),
    }
    return server, info, model_info


def check_server(module, params, url, unit):
    """Probe one server and compare it with the expected settings: (result, failure or None)."""
    module.no_log_values.update(url_credentials(url))
    try:
        client = SGLangClient(url, api_key=params["api_key"], timeout=params["timeout"],
                              validate_certs=params["validate_certs"], ca_path=params["ca_path"])
        gone = unit_failed(module, unit) if unit else (lambda: None)
        server, info, model_info = probe(client, params["wait_timeout"], params["wait_interval"], gone)
    except SGLangError as exc:
        return {"mismatches": []}, str(exc)
    if unit:
        server.update(unit=unit, invocation=unit_invocation(module, unit))
    # The server's own documents echo its key (server_info's api_key) and the URL's credentials.
    # ansible-core 2.22 no longer masks no_log values in a module's result (it hands them to the
    # controller's masker instead), so the module masks them itself, as 2.21 did at exit.
    result = remove_values({"server": server, "server_info": info, "model_info": model_info,
                            "mismatches": compare(params, server)}, module.no_log_values)
    if result["mismatches"]:
        return result, "The server at %s does not serve what was expected: %s" % (
            server["url"], "; ".join(describe(m) for m in result["mismatches"]))
    return result, None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            **SERVER_ARGUMENT_SPEC,
            servers=dict(type="list", elements="dict", options=dict(
                url=dict(type="str", required=True),
                unit=dict(type="str"),
                name=dict(type="str"),
            )),
            timeout=dict(type="float", default=30),
            wait_timeout=dict(type="float", default=0),
            wait_interval=dict(type="float", default=2),
            unit=dict(type="str"),
            model=dict(type="str"),
            speculative_algorithm=dict(type="str"),
            speculative_num_draft_tokens=dict(type="int", no_log=False),
            speculative_ddtree_budget=dict(type="int"),
            speculative_draft_model_path=dict(type="str"),
        ),
        mutually_exclusive=[("servers", "unit")],
        supports_check_mode=True,
    )
    params = module.params
    problem = check_bounds(params, BOUNDS)
    if problem:
        module.fail_json(msg=problem, changed=False, mismatches=[])
    if params["servers"] is None:
        result, failure = check_server(module, params, params["url"], params["unit"])
        if failure:
            module.fail_json(msg=failure, changed=False, **result)
        module.exit_json(changed=False, **result)
    if not params["servers"]:
        module.fail_json(msg="servers is empty: name at least one server to check", changed=False, mismatches=[])
    checked = [check_server(module, params, server["url"], server["unit"]) for server in params["servers"]]
    results = [result for result, _failure in checked]
    failures = ["%s: %s" % (server["name"] or server["url"], failure)
                for server, (_result, failure) in zip(params["servers"], checked) if failure]
    summary = dict(changed=False, servers=[result.get("server") for result in results], server=results[-1].get("server"),
                   mismatches=[dict(m, url=server["url"]) for server, result in zip(params["servers"], results)
                               for m in result["mismatches"]])
    if failures:
        module.fail_json(msg="%d of %d servers failed the check: %s" % (len(failures), len(checked), " | ".join(failures)),
                         **summary)
    module.exit_json(**summary)


if __name__ == "__main__":
    main()
