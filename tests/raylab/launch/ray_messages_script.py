"""``python ray_messages_script.py quiet|verbose``: start a local Ray as ``raylab.tune`` does and
make its raylet push a message to this driver (a task's worker process dies), then print the file
the quiet console diverts such messages to."""

from __future__ import annotations

import os
import sys
import time

from raylab.launch import ray_start

if __name__ == "__main__":
    info = ray_start.connect(quiet=sys.argv[1] == "quiet")
    import ray

    @ray.remote(max_retries=0)
    def die():
        os._exit(1)

    try:
        ray.get(die.remote())
    except ray.exceptions.WorkerCrashedError:
        print("planted: a worker died", flush=True)
    time.sleep(3)  # Ray's message thread prints within about a second
    print(f"ray messages: {info['ray_messages']}", flush=True)
    ray.shutdown()
