# Launcher of SGLang's gateway (smg) for role pro6000.inference.sglang_service.
# smg 1.13.0 takes its keys only as arguments (--api-key, --control-plane-api-keys; no environment
# variable, no config file: smg/router_args.py), and an argument is readable by every local user
# in /proc/PID/cmdline. This launcher hands both to smg's own parser inside the process, so no key
# is a word of any process's command line nor a value of the unit's environment:
# - the inference key from the file SMG_API_KEY_FILE names (root-owned, readable by the service
#   group, which the replicas share: they check the same key);
# - the control-plane key (/workers, /flush_cache, profiling) from standard input, which systemd
#   opens as root from a file only root reads (StandardInput=file:), so no other process of the
#   service account can read it. Without it smg would gate its control plane with the inference
#   key, or leave it open: the launcher refuses to start then.
import os
import sys

from smg.launch_router import launch_router, parse_router_args

# Exit status the unit does not restart on (RestartPreventExitStatus=2), as for a parser error.
USAGE = 2


def main():
    args = sys.argv[1:]
    path = os.environ.get("SMG_API_KEY_FILE")
    if path:
        with open(path, encoding="utf-8") as handle:
            args += ["--api-key", handle.read().strip()]
    control_plane_key = "" if sys.stdin.isatty() else sys.stdin.read().strip()
    # The gateway keeps no descriptor of the key's file open for its life.
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    if not control_plane_key:
        print("smg_launch: no control-plane key on standard input: the gateway's /workers would be open or "
              "guarded by the inference key", file=sys.stderr)
        sys.exit(USAGE)
    # id:name:role:key; smg splits at the first three colons, so the key may hold more.
    args += ["--control-plane-api-keys", "pro6000:ansible:admin:" + control_plane_key]
    launch_router(parse_router_args(args))


if __name__ == "__main__":
    main()
