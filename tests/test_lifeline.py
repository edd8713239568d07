"""A host's lifeline: its processes end with the agent that started them, however the agent ends,
and no other process is touched. Real processes: an "agent" that starts a lifeline and a host
(in a session of its own, with a daemon of its own), killed or closing in order."""

from __future__ import annotations

import os
import signal
import subprocess

import psutil
import pytest

from trainmon.runtime.processes import tags

from .conftest import PY, process_ends

HOST = """
import os, subprocess, sys, time
daemon = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
print(os.getpid(), daemon.pid, flush=True)
time.sleep(600)
"""

AGENT = """
import os, subprocess, sys, time
from trainmon.runtime.launchers.ray import lifeline
from trainmon.runtime.processes import tags
tag, how, host = sys.argv[1:]
keep = lifeline.start(tag)
started = subprocess.Popen([sys.executable, "-c", host], env={**os.environ, tags.TAG_VARIABLE: tag},
                           start_new_session=True, stdout=subprocess.PIPE, text=True)
print(started.stdout.readline().strip(), flush=True)
if how == "close":
    sys.stdin.readline()  # the test has seen the host alive
    os.close(keep)
    print("closed", flush=True)
time.sleep(600)
"""


def bystander(tag: str | None) -> subprocess.Popen[bytes]:
    env = dict(os.environ) | ({tags.TAG_VARIABLE: tag} if tag else {})
    return subprocess.Popen([PY, "-c", "import time; time.sleep(600)"], env=env, start_new_session=True)


@pytest.mark.parametrize("how", ["killed", "close"])
def test_the_hosts_processes_end_with_their_agent_and_nothing_else(how: str) -> None:
    tag = tags.new_tag()
    others = [bystander(tags.new_tag()), bystander(None)]  # another job's process, and one of nobody's
    agent = subprocess.Popen([PY, "-c", AGENT, tag, how, HOST], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        host, daemon = map(int, agent.stdout.readline().split())  # type: ignore[union-attr]
        assert psutil.Process(host).status() != psutil.STATUS_ZOMBIE
        if how == "killed":
            agent.send_signal(signal.SIGKILL)
            agent.wait()
        else:
            agent.stdin.write("close\n")  # type: ignore[union-attr]
            agent.stdin.flush()  # type: ignore[union-attr]
            assert agent.stdout.readline().strip() == "closed"  # type: ignore[union-attr]
        assert process_ends(host) and process_ends(daemon)
        assert all(other.poll() is None for other in others)
        if how == "close":
            assert agent.poll() is None  # closing the lifeline ended the host, not the agent
    finally:
        for process in [agent, *others]:
            process.kill()
            process.wait()
        agent.stdout.close()  # type: ignore[union-attr]
        agent.stdin.close()  # type: ignore[union-attr]
        tags.kill_tagged(tag)

