# Launcher of SGLang's gateway (smg) for role pro6000.inference.sglang_service.
# smg 1.13.0 takes its API key only as --api-key (no environment variable, no config file:
# smg/router_args.py), and an argument is readable by every local user in /proc/PID/cmdline.
# This launcher reads the key from the file SMG_API_KEY_FILE names (root-owned, readable by the
# service group only) and hands it to smg's own parser inside the process, so the key never is
# a word of any process's command line nor a value of the unit's environment.
import os
import sys

from smg.launch_router import launch_router, parse_router_args


def main():
    args = sys.argv[1:]
    path = os.environ.get("SMG_API_KEY_FILE")
    if path:
        with open(path, encoding="utf-8") as handle:
            args += ["--api-key", handle.read().strip()]
    launch_router(parse_router_args(args))


if __name__ == "__main__":
    main()
