"""Every role option that holds a secret is hidden by its argument spec (no_log), so that
Ansible's role argument validation never prints it, and every handler that restarts a unit
skips in check mode, where the unit may exist only in the plan."""
import pathlib

import yaml

ROLES = pathlib.Path(__file__).resolve().parents[2] / "roles"
# Option names that hold a secret: keys, tokens, passwords.
SECRET_SUFFIXES = ("_key", "_token", "_password", "_secret")


def options():
    for spec in sorted(ROLES.glob("*/meta/argument_specs.yml")):
        for entry in yaml.safe_load(spec.read_text())["argument_specs"].values():
            for name, option in (entry.get("options") or {}).items():
                yield spec.parts[-3], name, option


def test_every_secret_option_is_no_log():
    secrets = [(role, name) for role, name, option in options() if name.endswith(SECRET_SUFFIXES)]
    assert secrets, "no secret options found: the suffixes no longer match the roles' names"
    shown = [(role, name) for role, name, option in options()
             if name.endswith(SECRET_SUFFIXES) and option.get("no_log") is not True]
    assert shown == []


def test_every_restart_handler_skips_in_check_mode():
    restarts = []
    for handlers in sorted(ROLES.glob("*/handlers/main.yml")):
        for handler in yaml.safe_load(handlers.read_text()) or []:
            service = handler.get("ansible.builtin.systemd_service") or {}
            if service.get("state") in ("restarted", "reloaded"):
                restarts.append((handlers.parts[-3], handler["name"], str(handler.get("when", ""))))
    assert restarts
    assert [r for r in restarts if "not ansible_check_mode" not in r[2]] == []
