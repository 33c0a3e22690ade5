"""Try the bot's front without a chat server:

    pro6000-chatops --config chatops.yml --user alice -- "deploy pro6000-03 ddtree draft=16"

The chat text is one argument after ``--``: nothing in it can be taken for an option of the
command line (``--user`` included). Progress goes to standard output as it happens, then the
answer. Exit status: 0 when the request ran and succeeded (or a cancel was accepted), 1 when
the run failed or was canceled, 2 when refused. Ctrl-C (or SIGTERM) cancels the run and waits
until it has ended. ``pro6000-chatops serve --config chatops.yml`` is the chat bot (bot.py).
"""
from __future__ import annotations

import argparse
import queue
import signal
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


def request_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="pro6000-chatops", allow_abbrev=False,
                                     usage="%(prog)s --config FILE --user USER -- 'CHAT TEXT'",
                                     description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--config", required=True, help="the configuration file (YAML)")
    parser.add_argument("--user", required=True, help="the chat user the command comes from")
    options, separator, chat = _split(argv)
    arguments = parser.parse_args(options)
    if not separator or len(chat) != 1:
        parser.error("give the chat text as one argument after --, e.g. -- 'bench pro6000-03'")
    try:
        ops = ChatOps(load_config(arguments.config))
    except (OSError, ConfigError) as error:
        print(f"configuration error: {error}", file=sys.stderr)
        return 2

    replies: queue.Queue[Reply] = queue.Queue()
    threading.Thread(target=lambda: replies.put(ops.handle(
        arguments.user, chat[0], lambda progress: print(progress.text, flush=True))), daemon=True).start()
    # SIGTERM stops the command line as Ctrl-C does: the run is canceled, not left behind.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    interrupted = False
    while True:
        # A queue, not Thread.join: an interrupted join may return while the worker still runs.
        try:
            reply = replies.get(timeout=0.5)
            break
        except queue.Empty:
            pass
        except KeyboardInterrupt:
            if not interrupted:
                print("cancelling ...", flush=True)
            interrupted = True
        if interrupted:  # again and again: the run may start after the first interrupt
            ops.cancel_all(arguments.user)
    print(reply.text)
    if not reply.accepted:
        return 2
    return 0 if reply.summary is None or reply.summary.succeeded else 1


def _split(argv: list[str]) -> tuple[list[str], bool, list[str]]:
    if "--" not in argv:
        return argv, False, []
    at = argv.index("--")
    return argv[:at], True, argv[at + 1:]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"]:
        return serve_command(argv[1:])
    return request_command(argv)


if __name__ == "__main__":
    sys.exit(main())
