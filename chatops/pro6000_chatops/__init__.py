"""Run the pro6000.inference playbooks from a chat bot through ansible-runner, safely.

    from pro6000_chatops import ChatOps
    ops = ChatOps.from_config_file("/etc/pro6000-chatops/chatops.yml")
    reply = ops.handle("alice", "deploy pro6000-03 ddtree draft=16", on_progress=relay)
    post(reply.text)
"""
from .commands import ACTIONS, Command, Refused, parse
from .config import Config, ConfigError, Policy, load_config
from .service import ChatOps, Reply, Request, RunInfo
from .summary import BenchFigures, HostSummary, ProbeFigures, Progress, RunSummary

__all__ = [
    "ACTIONS", "BenchFigures", "ChatOps", "Command", "Config", "ConfigError", "HostSummary",
    "Policy", "ProbeFigures", "Progress", "Refused", "Reply", "Request", "RunInfo", "RunSummary", "load_config",
    "parse",
]
