"""The test Ray cluster itself: real nodes, each with its own resources and TRAINMON_HOME, killable for real.

Every driver runs in a subprocess: the pytest process never calls ray.init.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from .raycluster import RESULT, RayCluster, driver_result, ray_cluster  # noqa: F401

pytestmark = pytest.mark.xdist_group("ray")  # with tests/test_ray.py: one cluster on one worker

# A task pinned to worker 2 reports where it ran and what it saw.
WHERE = """
import json, os, ray
ray.init(logging_level="ERROR", log_to_driver=False)

@ray.remote(resources={"node-2": 0.01})
def where():
    return {"node": ray.get_runtime_context().get_node_id(), "home": os.environ.get("TRAINMON_HOME"),
            "pid": os.getpid(), "sid": os.getsid(0)}

print("@@result " + json.dumps(ray.get(where.remote(), timeout=120)))
"""

# An actor on worker 1 answers once; once the test has killed the node ("go" on stdin), how does its death show,
# and how soon does ray.nodes() have the node (argv[1], its id) for dead?
VICTIM = """
import json, os, sys, time
import ray
ray.init(logging_level="ERROR", log_to_driver=False)

@ray.remote(resources={"node-1": 0.01}, num_cpus=0)
class Victim:
    def ping(self):
        return {"node": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}

victim = Victim.remote()
print("@@result " + json.dumps(ray.get(victim.ping.remote(), timeout=120)), flush=True)
sys.stdin.readline()
start = time.monotonic()
errors = []  # ActorUnavailableError (retriable) may come first, until Ray has the node for dead
while time.monotonic() - start < 60:
    try:
        ray.get(victim.ping.remote(), timeout=60)
        errors.append(None)
    except Exception as e:
        errors.append(type(e).__name__)
        if isinstance(e, ray.exceptions.ActorDiedError):
            break
    time.sleep(0.05)
actor_s = time.monotonic() - start
dead = {}
while time.monotonic() - start < 60:
    dead = {n["NodeID"]: n for n in ray.nodes() if not n["Alive"]}
    if sys.argv[1] in dead:
        break
    time.sleep(0.05)
print("@@result " + json.dumps({"errors": errors, "actor_s": actor_s, "node_s": time.monotonic() - start, "dead": list(dead)}))
"""


def alive_by_resource(nodes: list[dict[str, object]]) -> dict[str, str]:
    """Custom resource name (head, node-i) -> id of the alive node that has it."""
    found: dict[str, str] = {}
    for node in nodes:
        if node["Alive"]:
            resources = node["Resources"]
            assert isinstance(resources, dict)
            for name in resources:
                if name == "head" or name.startswith("node-"):
                    assert name not in found, f"two alive nodes have {name}"
                    found[name] = str(node["NodeID"])
    return found


@pytest.mark.timeout(300)
def test_nodes_have_their_resources_and_homes(ray_cluster: RayCluster) -> None:  # noqa: F811
    nodes = alive_by_resource(ray_cluster.nodes())
    assert sorted(nodes) == ["head", "node-1", "node-2", "node-3"]
    assert len(set(nodes.values())) == 4
    homes = {ray_cluster.node_home(i) for i in range(4)}
    assert len(homes) == 4 and all(home.is_dir() for home in homes)

    seen = driver_result(ray_cluster.run_driver(WHERE).stdout)
    assert seen["node"] == nodes["node-2"]
    assert seen["home"] == str(ray_cluster.node_home(2))
    assert seen["sid"] in ray_cluster.node_pids(2)  # the task's worker is in the session of node 2's ray start


@pytest.mark.timeout(300)
def test_a_killed_node_is_dead_for_ray_and_comes_back(ray_cluster: RayCluster) -> None:  # noqa: F811
    before = alive_by_resource(ray_cluster.nodes())
    driver = subprocess.Popen(
        [sys.executable, "-c", VICTIM, before["node-1"]],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ray_cluster.client_env(),
        text=True,
    )
    try:
        assert driver.stdin is not None and driver.stdout is not None
        for line in driver.stdout:  # up to the actor's answer
            if line.startswith(RESULT):
                break
        else:
            raise AssertionError(driver.communicate(timeout=30))
        ready = driver_result(line)
        assert ready["node"] == before["node-1"]
        assert ready["pid"] in ray_cluster.node_pids(1)

        ray_cluster.kill_node(1)
        assert ray_cluster.node_pids(1) == []
        driver.stdin.write("go\n")
        driver.stdin.flush()
        out, err = driver.communicate(timeout=120)
    finally:
        driver.kill()
        driver.wait()
    assert driver.returncode == 0, err
    result = driver_result(out)
    assert result["errors"][-1] == "ActorDiedError" and None not in result["errors"], result
    assert before["node-1"] in result["dead"]
    assert result["actor_s"] < 15 and result["node_s"] < 15, result  # ~1 s with the short health checks
    assert sorted(alive_by_resource(ray_cluster.wait_nodes([0, 2, 3], timeout=15))) == ["head", "node-2", "node-3"]

    ray_cluster.restart_node(1)
    again = alive_by_resource(ray_cluster.nodes())
    assert sorted(again) == ["head", "node-1", "node-2", "node-3"]
    assert again["node-1"] != before["node-1"]  # a new Ray node, with the same resources
    assert {again[k] for k in ("head", "node-2", "node-3")} == {before[k] for k in ("head", "node-2", "node-3")}
