"""A host's processes end with its Ray host agent, however the agent ends.

Locally, a job whose supervisor died is reaped by the next command on that machine
(:mod:`trainmon.runtime.job.orphans`). A host on a Ray node has no such command: when its agent is
killed (its worker process killed alone, the job's supervisor lost with the actors it owned), Ray
ends the agent and at most its direct children, and the host's command runs in a session of its
own, with whatever it started. So each agent starts a *lifeline* before its host:
``python -m trainmon.runtime.launchers.ray.lifeline TAG``, a small process outside the agent's tree (started in
a session of its own, its parent gone at once) whose standard input is a pipe that only the agent
holds open. However the agent ends, SIGKILL included, the kernel closes the pipe; the lifeline
reads the end of it and kills every process of this machine that carries the host's tag
(:func:`trainmon.runtime.processes.tags.kill_tagged`: only those, each proven), removes the
containers labelled with it (a host run in an image), then exits. An agent
that ends its host in order closes the pipe too, by which time nothing carries the tag.
"""

from __future__ import annotations

import os
import subprocess
import sys

from ...containers import engine
from ...processes import tags

PASSES = 5  # kill passes, for what a dying process forked during the last one


def start(tag: str) -> int:
    """Start the lifeline of the processes that carry ``tag``; the write end of its pipe, to hold
    open while they may run (closing it, or ending, ends them)."""
    read, write = os.pipe()  # neither end is inherited by what this process starts later
    try:
        subprocess.run([sys.executable, "-m", "trainmon.runtime.launchers.ray.lifeline", tag], stdin=read,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, check=True,
                       timeout=60)
    except BaseException:
        os.close(write)
        raise
    finally:
        os.close(read)
    return write


def main(argv: list[str]) -> int:
    [tag] = argv
    if os.fork() > 0:  # the parent answers its starter at once; the child is nobody's child
        os._exit(0)
    while os.read(0, 4096):  # nothing is ever written: this returns when the agent's end is closed
        pass
    for _ in range(PASSES):
        if tags.kill_tagged(tag) == 0:
            break
    try:  # a host run as a container: the engine's record of it too (found by its label, never a name)
        engine.find().remove_tagged(tag)
    except engine.EngineError:
        pass  # no engine here: the host ran no container
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
