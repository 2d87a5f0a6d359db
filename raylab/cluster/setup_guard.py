"""python -m raylab.cluster.setup_guard: stop relaunching a node type whose setup keeps failing.

Runs on a cluster's head, started in the background by ``cluster/gpu.yaml``'s head start
commands. Ray's autoscaler v2 (``ray up``'s default in Ray 2.60) runs a new worker's setup lines
up to three times; if they still fail it marks the node ``RAY_INSTALL_FAILED``, terminates it,
and its scheduler launches another node of the same type for the same demand, with no limit
(``Reconciler._terminate_instances`` and the scheduler's launch step in
``python/ray/autoscaler/v2/instance_manager/reconciler.py``): a GPU type with a broken setup line
costs a GPU node's start-up and three setups every few minutes until someone looks. v2 re-reads
its config file (``~/ray_bootstrap_config.yaml`` on the head) every round, and its scheduler
launches no node of a type whose ``max_workers`` is 0; that is what this guard changes.

It follows the autoscaler's logs on the head (``/tmp/ray/session_latest/logs/monitor.*``): v2
logs each ``RAY_INSTALLING->RAY_INSTALL_FAILED`` with the node type and cloud instance id, and
Ray's node updater logs the setup command that failed. After ``--max-failures`` failed nodes
of one type it sets that type's ``min_workers`` and ``max_workers`` to 0 in the config file and
writes one line naming the type, the last node and its failed setup line to stdout and to
``~/raylab-setup-failed.txt``. ``ray up`` again (after fixing the line) writes the config anew.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

# Ray 2.60's v2 instance manager log line for a node whose setup failed
# (InstanceUtil.get_log_str_for_update).
FAILED = re.compile(
    r"RAY_INSTALLING->RAY_INSTALL_FAILED \(id=(?P<id>[^,]+), type=(?P<type>[^,]+), cloud_instance_id=(?P<node>[^,]+),"
)
# Ray's command runner logs each ssh command before it runs it ("Full command is `ssh ...
# user@node bash --login -c -i '... (LINE)'`"); with login shells (the autoscaler's way) a failed
# line then ends in "SSH command failed." without naming it, so the failed line is the last one
# logged for that node. Without login shells the updater names it ("Setup command `[...]`
# failed with exit code N").
RAN = re.compile(r"(?:Full command is|Setup command) `(?P<cmd>.*)`")


@dataclass(frozen=True)
class Failure:
    """One node of ``node_type`` whose setup failed (``command``: the setup line, if found)."""

    node_type: str
    node: str
    command: str


def setup_lines(config: dict, node_type: str) -> list[str]:
    """The setup lines Ray runs on a worker of ``node_type``: its own ``worker_setup_commands``,
    or the cluster's ``setup_commands`` + ``worker_setup_commands``."""
    spec = config.get("available_node_types", {}).get(node_type, {})
    if "worker_setup_commands" in spec:
        return list(spec["worker_setup_commands"])
    return list(config.get("setup_commands", [])) + list(config.get("worker_setup_commands", []))


def which_line(ssh_command: str, lines: list[str]) -> str | None:
    """The setup line inside the text of Ray's failed ssh command: the last of ``lines`` whose
    opening (up to its first quote or backslash, which the ssh command's quoting rewrites, at most
    60 characters) occurs in it."""
    found = None
    for line in lines:
        head = re.split(r"['\\]", line, maxsplit=1)[0][:60].strip()
        if head and head in ssh_command:
            found = line
    return found


def failures(log_text: str, config: dict) -> list[Failure]:
    """Every failed node setup in the autoscaler's log text, in order, each with the setup line
    that failed on it: the last setup line of its type that Ray logged running on that node
    (``user@node`` in the ssh command, where the cloud instance id is the node's address, as on
    the loopback cluster and Ray's local provider), else the last one logged on any node."""
    found = []
    commands: list[str] = []
    seen: set[str] = set()
    for line in log_text.splitlines():
        setup = RAN.search(line)
        if setup:
            commands.append(setup.group("cmd"))
            continue
        failed = FAILED.search(line)
        if failed and failed.group("id") not in seen:  # the same line may be in two of the logs
            seen.add(failed.group("id"))
            node_type, node = failed.group("type"), failed.group("node")
            lines = setup_lines(config, node_type)
            mine = [c for c in commands if f"@{node} " in c] or commands
            command = next((which_line(c, lines) for c in reversed(mine) if which_line(c, lines)), None)
            found.append(Failure(node_type, node, command or "(the failed line is not in the log)"))
    return found


def over_limit(found: list[Failure], max_failures: int) -> dict[str, Failure]:
    """The node types with at least ``max_failures`` failed nodes, each with its last failure."""
    counts: dict[str, int] = {}
    last: dict[str, Failure] = {}
    for failure in found:
        counts[failure.node_type] = counts.get(failure.node_type, 0) + 1
        last[failure.node_type] = failure
    return {t: last[t] for t, n in counts.items() if n >= max_failures}


def stop_type(config: dict, node_type: str) -> dict:
    """``config`` with ``node_type`` launching no more nodes (min and max workers 0)."""
    spec = dict(config["available_node_types"][node_type], min_workers=0, max_workers=0)
    return {**config, "available_node_types": {**config["available_node_types"], node_type: spec}}


def message(failure: Failure, count: int, config_path: Path) -> str:
    return (
        f"raylab setup guard: node type {failure.node_type} stopped after {count} nodes failed their setup; "
        f"last on node {failure.node}: {failure.command!r} failed; its max_workers is 0 in {config_path} "
        f"(fix the line, then `ray up` again)"
    )


STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}")


def merged(texts: list[str]) -> str:
    """The lines of several logs in time order: the instance manager's lines are in monitor.log,
    the updater's commands in monitor.out. A line without a timestamp keeps its predecessor's."""
    stamped = []
    for text in texts:
        stamp = ""
        for line in text.splitlines():
            found = STAMP.match(line)
            stamp = found.group(0) if found else stamp
            stamped.append((stamp, len(stamped), line))
    return "\n".join(line for _, _, line in sorted(stamped))


def check_once(logs: Path, config_path: Path, max_failures: int, stopped: set[str], out: Path) -> list[str]:
    """One pass: read the logs, stop each node type over the limit, return the lines written."""
    text = merged([p.read_text(errors="replace") for p in sorted(logs.glob("monitor*")) if p.is_file()])
    config = yaml.safe_load(config_path.read_text())
    found = failures(text, config)
    written = []
    for node_type, failure in over_limit(found, max_failures).items():
        if node_type in stopped:
            continue
        config = stop_type(config, node_type)
        tmp = config_path.with_name(config_path.name + ".raylab-tmp")
        tmp.write_text(yaml.safe_dump(config, sort_keys=False))
        tmp.replace(config_path)
        line = message(failure, sum(f.node_type == node_type for f in found), config_path)
        with open(out, "a") as f:
            f.write(line + "\n")
        print(line, flush=True)
        stopped.add(node_type)
        written.append(line)
    return written


def parser() -> argparse.ArgumentParser:
    """The command's argument parser (the CLI reference is generated from it)."""
    parser = argparse.ArgumentParser(prog="python -m raylab.cluster.setup_guard", description=__doc__.split("\n")[0])
    parser.add_argument("--max-failures", type=int, default=2, help="failed nodes of one type before it stops")
    parser.add_argument("--config", type=Path, default=Path("~/ray_bootstrap_config.yaml").expanduser())
    parser.add_argument("--logs", type=Path, default=Path("/tmp/ray/session_latest/logs"))
    parser.add_argument("--out", type=Path, default=Path("~/raylab-setup-failed.txt").expanduser())
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between reads of the logs")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.max_failures < 1:
        print(f"error: --max-failures must be at least 1, got {args.max_failures}", file=sys.stderr)
        return 2
    # One guard per head: a second start (ray up again) leaves the running one be.
    lock = os.open(Path("~/.raylab-setup-guard.lock").expanduser(), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0
    stopped: set[str] = set()
    session = None
    while True:
        if args.logs.resolve() != session:  # Ray restarted (ray up again): count anew
            session, stopped = args.logs.resolve(), set()
        if args.config.exists():
            check_once(args.logs, args.config, args.max_failures, stopped, args.out)
        time.sleep(args.interval)


if __name__ == "__main__":
    sys.exit(main())
