"""Try the bot's front without a chat server:

    python -m pro6000_chatops --config chatops.yml --user alice deploy pro6000-03 ddtree draft=16

Progress goes to standard output as it happens, then the answer. Exit status: 0 when the
request ran and succeeded (or a cancel was accepted), 1 when the run failed, 2 when refused.
Ctrl-C cancels the run.
"""
from __future__ import annotations

import argparse
import sys
import threading

from .bot import check, serve
from .config import ConfigError, load_config
from .service import ChatOps, Reply


def serve_command(argv: list[str]) -> int:
    """``serve --config PATH``: the long-running chat bot (bot.py)."""
    parser = argparse.ArgumentParser(prog="pro6000-chatops serve",
                                     description="Answer chat commands until SIGTERM.")
    parser.add_argument("--config", required=True, help="the configuration file (YAML), with a matrix section")
    parser.add_argument("--check", action="store_true", help="validate the configuration file and exit")
    arguments = parser.parse_args(argv)
    return check(arguments.config) if arguments.check else serve(arguments.config)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"]:
        return serve_command(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m pro6000_chatops", description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--config", required=True, help="the configuration file (YAML)")
    parser.add_argument("--user", required=True, help="the chat user the command comes from")
    parser.add_argument("words", nargs="+", help="the chat command, e.g. bench pro6000-03")
    arguments = parser.parse_args(argv)
    try:
        ops = ChatOps(load_config(arguments.config))
    except (OSError, ConfigError) as error:
        print(f"configuration error: {error}", file=sys.stderr)
        return 2

    replies: list[Reply] = []
    worker = threading.Thread(
        target=lambda: replies.append(ops.handle(arguments.user, " ".join(arguments.words),
                                                 lambda progress: print(progress.text, flush=True))),
        daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.5)
    except KeyboardInterrupt:
        print("cancelling ...", flush=True)
        ops.cancel_all(arguments.user)
        worker.join()
    reply = replies[0]
    print(reply.text)
    if not reply.accepted:
        return 2
    return 0 if reply.summary is None or reply.summary.succeeded else 1


if __name__ == "__main__":
    sys.exit(main())
