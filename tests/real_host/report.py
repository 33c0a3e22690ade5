"""Reduce the real-host lane's raw output (task results recorded by callback_plugins/lane_record.py) to report.json and
report.md: the host's identity, what the roles composed for it, every task's outcome, and for
each task that failed or could not be predicted, why.

    python3 report.py --raw RAW_DIR --out REPORT_DIR
"""
import argparse
import json
import pathlib
import re

# Why a task cannot be predicted on a host, recognised by its message. Each is a property of the
# machine the lane ran on, not of the collection; anything not matched is reported unexplained.
EXPLANATIONS = [
    (r"System has not been booted with systemd|Failed to connect to bus|systemd.*(not running|PID 1)",
     "no systemd as PID 1 on this machine: unit states cannot be read or predicted"),
    (r"Temporary failure in name resolution|Network is unreachable|Name or service not known|"
     r"Connection refused|timed out|No route to host|Failed to (establish|download)|urlopen error",
     "no network on this machine: the repositories, the git remote and the hub cannot be reached"),
    (r"ansible_local\.sglang .*is missing",
     "SGLang is not built on this machine yet (a real run builds it first)"),
]
MESSAGE_LIMIT = 600


def explain(message):
    for pattern, why in EXPLANATIONS:
        if re.search(pattern, message or ""):
            return why
    return None


def message_of(result):
    parts = [result.get("msg")] if isinstance(result.get("msg"), str) else []
    if result.get("stderr"):
        parts.append(result["stderr"])
    if isinstance(result.get("results"), list):
        parts += [item.get("msg", "") for item in result["results"] if isinstance(item, dict) and item.get("failed")]
    return " ".join(part for part in parts if part)[:MESSAGE_LIMIT]


def tasks_of(records):
    """Every task result in the order run, with its message and, where it failed, why."""
    tasks = []
    for record in records:
        entry = {"task": record["task"], "status": record["status"]}
        message = message_of(record["result"])
        if message and record["status"] != "skipped":
            entry["msg"] = message
        if record["status"] == "failed":
            entry["explanation"] = explain(message)
        tasks.append(entry)
    return tasks


def load_run(raw, name):
    path = raw / ("%s.jsonl" % name)
    if not path.exists():
        raise SystemExit("%s recorded no task: %s" % (name, (raw / ("%s.log" % name)).read_text()[-3000:]))
    return [json.loads(line) for line in path.read_text().splitlines()]


def build(raw):
    preflight, site = load_run(raw, "preflight"), load_run(raw, "site-check")
    facts = {}
    for record in preflight:
        facts.update({key.removeprefix("ansible_"): value
                      for key, value in record["result"].get("ansible_facts", {}).items()})
    identity_keys = ("distribution", "distribution_version", "distribution_major_version", "distribution_release",
                     "os_family", "lsb", "architecture", "kernel", "service_mgr", "virtualization_type",
                     "virtualization_role")
    gpu = facts.get("nvidia_gpu", {})
    site_tasks = tasks_of(site)
    refusals = [task["msg"] for task in tasks_of(preflight) if task["task"].startswith("Record the refusal of")]
    stats = {}
    for task in site_tasks:
        stats[task["status"]] = stats.get(task["status"], 0) + 1
    return {
        "exits": dict(line.split(": exit ") for line in (raw / "exits").read_text().split("\n") if line),
        "host": {key: facts.get(key) for key in identity_keys}
        | {"python": facts.get("python", {}).get("version"), "host_files": (raw / "host.txt").read_text()},
        "gpu": {key: gpu.get(key) for key in ("gpu_present", "blackwell_present", "loaded_version", "loaded_flavour",
                                              "installed_version", "reboot_needed", "nvidia_smi_error")}
        | {"gpus": [{k: g.get(k) for k in ("name", "compute_capability", "memory_total_mib")}
                    for g in gpu.get("gpus", [])]},
        "composed": next((r["result"].get("msg") for r in preflight
                          if r["task"] == "Report what the roles composed for this host"), None),
        "preflight_refusals": [{"msg": msg, "explanation": explain(msg)} for msg in refusals],
        # What the roles said check mode could not predict here (their own "Check mode: ..." reports).
        "not_predicted": [task["msg"] for task in site_tasks
                          if task["status"] == "ok" and re.match(r"(Check mode|ansible_local\.\w+ is missing)", task.get("msg", ""))],
        "arguments": (raw / "arguments").read_text().strip() if (raw / "arguments").exists() else "",
        "site_check": {
            "stats": stats,
            "tasks": site_tasks,
            "failed": [task for task in site_tasks if task["status"] == "failed"],
            "last_task": site_tasks[-1]["task"] if site_tasks else None,
        },
    }


def markdown(report):
    host, composed = report["host"], report["composed"] or {}
    lines = ["# Real-host lane report", "",
             "| fact | value |", "| --- | --- |"]
    lines += ["| %s | %s |" % (key, value) for key, value in host.items() if key != "host_files"]
    lines += ["", "## GPU (pro6000.inference.nvidia_gpu_facts)", "", "```", json.dumps(report["gpu"], indent=2), "```",
              "", "## What the roles composed", "", "```", json.dumps(composed, indent=2), "```",
              "", "## Preflight refusals", ""]
    lines += ["- %s%s" % (r["msg"], " (why: %s)" % r["explanation"] if r["explanation"] else " (UNEXPLAINED)")
              for r in report["preflight_refusals"]] or ["- none"]
    lines += ["", "## Not predicted on this host, and why", ""]
    lines += ["- %s" % message for message in report["not_predicted"]] or ["- everything was predicted"]
    if report["host"]["service_mgr"] != "systemd":
        lines.append("- unit states (systemd is not PID 1 here: %s)" % report["host"]["service_mgr"])
    site = report["site_check"]
    lines += ["", "## `site.yml --check --diff`", "", "extra arguments: `%s`; exit codes: %s; last task: %s"
              % (report["arguments"] or "none", report["exits"], site["last_task"]),
              "", "| task | status | note |", "| --- | --- | --- |"]
    for task in site["tasks"]:
        note = task.get("msg", "")
        if task["status"] == "failed":
            note = "%s (why: %s)" % (note, task["explanation"] or "UNEXPLAINED")
        lines.append("| %s | %s | %s |" % (task["task"], task["status"], note.replace("|", "\\|").replace("\n", " ")[:300]))
    lines += ["", "## The host", "", "```", host["host_files"].rstrip(), "```", ""]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--raw", type=pathlib.Path, required=True)
    parser.add_argument("--out", type=pathlib.Path, required=True)
    args = parser.parse_args()
    report = build(args.raw)
    (args.out / "report.json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    (args.out / "report.md").write_text(markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
