"""What the processes the bot starts (ansible-inventory, a run's keeper, ansible-playbook)
inherit from the bot's environment: an allow-list. The bot's own credentials (chat tokens and
the like) stay out of them."""
from __future__ import annotations

from collections.abc import Mapping

PASSTHROUGH = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR",
    "SSH_AUTH_SOCK", "VIRTUAL_ENV", "DOCKER_HOST",
    "http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
})


def minimal_environment(inherited: Mapping[str, str], fixed: Mapping[str, str]) -> dict[str, str]:
    """Allow-listed inherited variables and ``ANSIBLE_*`` settings, then the operator's fixed ones."""
    kept = {name: value for name, value in inherited.items()
            if name in PASSTHROUGH or name.startswith("ANSIBLE_")}
    return {**kept, **fixed}
