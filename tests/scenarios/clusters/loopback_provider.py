"""A Ray node provider (``provider: {type: external, module: loopback_provider.LoopbackProvider}``)
whose "cloud" is the loopback harness's sshd nodes: each node type of the cluster YAML is mapped
onto loopback IPs (``node_config: {ips: [...]}``), the head onto ``provider.head_ip``.

Ray's own ``local`` provider refuses ``available_node_types`` (it has one node type of its own),
so a YAML's node-type list, with each type's resources, min/max workers and setup lines, needs
a provider that launches nodes by type, as a cloud's does. Launching takes a free IP of the
type's list; terminating marks it free again (the sshd node stays up for the next launch of that
type, as a cloud hands out a fresh machine). Each launch is a new node id, ``IP-N`` for the N-th
launch on that IP, as a cloud never reuses an instance id: Ray's autoscaler v2 matches its
records to cloud instances by id, and a relaunch under the old id stayed unmatched (its record
of the terminated node still held the id). The state is one JSON file in
``provider.state_dir`` (a folder the launcher and the head's autoscaler both see), under an
``flock``: ``ray up`` (the launcher) and the head's autoscaler share it, as they share a cloud.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from contextlib import contextmanager
from pathlib import Path

from ray.autoscaler.node_provider import NodeProvider
from ray.autoscaler.tags import NODE_KIND_HEAD, TAG_RAY_NODE_KIND

_THREAD_LOCK = threading.Lock()


class LoopbackProvider(NodeProvider):
    def __init__(self, provider_config: dict, cluster_name: str) -> None:
        super().__init__(provider_config, cluster_name)
        self._path = Path(provider_config["state_dir"]) / f"{cluster_name}.json"

    @contextmanager
    def _state(self):
        """The nodes ``{node_id: {"ip": str, "running": bool, "tags": {...}}}``, locked while the block runs and
        written back after it."""
        with _THREAD_LOCK:
            # Read-only is enough for flock, whichever of the two users made the file.
            lock = os.open(self._path.with_suffix(".lock"), os.O_RDONLY | os.O_CREAT, 0o666)
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                nodes = json.loads(self._path.read_text()) if self._path.exists() else {}
                yield nodes
                tmp = self._path.with_suffix(".tmp")
                tmp.write_text(json.dumps(nodes))
                tmp.replace(self._path)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
                os.close(lock)

    def non_terminated_nodes(self, tag_filters: dict) -> list[str]:
        with self._state() as nodes:
            return [
                node_id
                for node_id, node in nodes.items()
                if node["running"] and all(node["tags"].get(k) == v for k, v in tag_filters.items())
            ]

    def is_running(self, node_id: str) -> bool:
        with self._state() as nodes:
            return bool(nodes.get(node_id, {}).get("running"))

    def is_terminated(self, node_id: str) -> bool:
        return not self.is_running(node_id)

    def node_tags(self, node_id: str) -> dict:
        with self._state() as nodes:
            return dict(nodes[node_id]["tags"])

    def external_ip(self, node_id: str) -> str:
        return node_id.rsplit("-", 1)[0]

    def internal_ip(self, node_id: str) -> str:
        return node_id.rsplit("-", 1)[0]

    def create_node(self, node_config: dict, tags: dict, count: int) -> dict:
        head = tags.get(TAG_RAY_NODE_KIND) == NODE_KIND_HEAD
        pool = [self.provider_config["head_ip"]] if head else list(node_config["ips"])
        made = {}
        with self._state() as nodes:
            for ip in pool:
                if len(made) == count:
                    break
                if not any(n["running"] and n["ip"] == ip for n in nodes.values()):
                    node_id = f"{ip}-{sum(n['ip'] == ip for n in nodes.values()) + 1}"
                    nodes[node_id] = {"ip": ip, "running": True, "tags": dict(tags)}
                    made[node_id] = {}
        launches = self._path.with_suffix(".launches")  # one line per launch: IP and node type
        with open(launches, "a") as log:
            log.writelines(f"{n.rsplit('-', 1)[0]} {tags.get('ray-user-node-type', '')}\n" for n in made)
        if os.geteuid() == 0:  # made by the launcher (root): the head's autoscaler appends too
            os.chmod(launches, 0o666)
        if len(made) < count:
            # A cloud out of capacity for this type: the autoscaler logs it and tries later.
            raise RuntimeError(f"loopback: {count - len(made)} more node(s) asked, no free IP in {pool}")
        return made

    def set_node_tags(self, node_id: str, tags: dict) -> None:
        with self._state() as nodes:
            nodes[node_id]["tags"].update(tags)

    def terminate_node(self, node_id: str) -> None:
        with self._state() as nodes:
            if node_id in nodes:
                nodes[node_id]["running"] = False
