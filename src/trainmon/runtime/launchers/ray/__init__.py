"""The Ray launcher: each host of the job on a node of a Ray cluster, every host writing to a
shared PostgreSQL store.

:mod:`.rayjob` hands the job to the cluster, whose coordinator runs its supervisor;
:mod:`.cluster` places the hosts (``RayHosts``) and drives their agents (:mod:`.hostagent`), each
running its host as a local one on its node, held by a lifeline (:mod:`.lifeline`). Ray itself is
an extra (``trainmon[ray]``), imported only where a Ray job needs it."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ....errors import ValidationException
from ....shapes import Boolean, Integer, MapOf, Number, String
from ....store import Store, profiles
from ...contract import instances
from ..kind import Kind

if TYPE_CHECKING:
    from ...job.hosts import HostsContext, JobHosts
    from ...watch.profilewatch import ReportWriter

ADDRESS_VARIABLE = "RAY_ADDRESS"
DEFAULT_RESOURCE_WAIT_S = 3600  # a busy cluster: the job queues for an hour before it fails for capacity

MEMBERS = {
    "RayAddress": String(1, 1024, hint="the Ray cluster's address (ray start --head prints it), e.g. 10.0.0.1:6379"),
    "HostResources": MapOf(String(1, 128, r"[A-Za-z0-9_.:/-]+"), Number(0, 1_000_000), max=16,
                           hint="the Ray resources each host takes, e.g. {\"CPU\": 8, \"GPU\": 1}"),
    "ResourceWaitSeconds": Integer(0, 7 * 24 * 3600, hint="how long the job waits for room on the cluster"),
    "WaitForNodes": Boolean(hint="wait (ResourceWaitSeconds) for nodes to join when too few could ever hold "
                            "the hosts, instead of failing at once"),
}


def _hosts(context: HostsContext) -> JobHosts:
    from .cluster import RayHosts

    return RayHosts(context.store, context.job, context.names, context.state)


def _submit(store: Store, name: str, report: ReportWriter | None) -> None:
    from .rayjob import submit

    submit(store, name, report)


def check(request: Mapping[str, Any], database_url: str | None, root: Path) -> None:
    """What a job whose hosts run on other machines needs: Ray, a store they all reach, and places
    they all reach for what they read and write (a shared file system, not this machine's objects)."""
    if importlib.util.find_spec("ray") is None:
        raise ValidationException("TrainmonConfig.Launcher 'ray' needs Ray on this machine and every node: "
                                  "pip install 'trainmon[ray]'.")
    if not database_url:
        raise ValidationException(
            "TrainmonConfig.Launcher 'ray': the hosts of a Ray job run on other machines and write to the store "
            "from there, which the embedded SQLite store cannot take: set TRAINMON_DATABASE_URL to a PostgreSQL "
            "server every node reaches (postgresql://USER:PASSWORD@HOST:PORT/DATABASE); see docs/cluster.md.")
    several = request.get("ResourceConfig", {}).get("InstanceCount", 1) > 1
    if several and request.get("EnableNetworkIsolation"):
        raise ValidationException(
            "EnableNetworkIsolation: the hosts of a Ray job reach each other through their nodes' own network, "
            "which trainmon cannot cut off from all else: run the job on this machine (its hosts then share a "
            "network of their own that reaches nothing else), or on Ray without isolation.")
    for channel in request.get("InputDataConfig", []):
        uri = channel.get("DataSource", {}).get("S3DataSource", {}).get("S3Uri", "")
        if uri.startswith("s3://"):
            raise ValidationException(
                f"InputDataConfig.{channel['ChannelName']} {uri!r}: the hosts of a Ray job read their channels on "
                "their own nodes: give a directory every node reaches (a shared file system).")
    # the archives of an s3:// output path are written from algo-1's node with boto3, and the profiler's
    # files with fsspec: to S3, or to an S3-compatible service the nodes' AWS configuration names, but
    # not into trainmon's own object store, which is this machine's
    for field, uri in (("OutputDataConfig.S3OutputPath", request.get("OutputDataConfig", {}).get("S3OutputPath", "")),
                       ("ProfilerConfig.S3OutputPath", request.get("ProfilerConfig", {}).get("S3OutputPath", ""))):
        if profiles.in_own_bucket(uri, root) is not None:
            raise ValidationException(
                f"{field} {uri!r}: the objects of trainmon's object store live on this machine, which a Ray job's "
                "nodes cannot write: give a directory every node reaches (a shared file system), or a bucket of S3 "
                "or of an S3-compatible service that the nodes' AWS configuration names (docs/cluster.md).")


def complete(settings: dict[str, Any], given: Mapping[str, Any], instance_type: str) -> None:
    """A Ray job's settings, completed in ``settings``: the cluster's address (RAY_ADDRESS when not
    given) and what each host takes (from the instance type when not given)."""
    address = given.get("RayAddress") or os.environ.get(ADDRESS_VARIABLE, "").strip()
    if not address:
        raise ValidationException("TrainmonConfig.RayAddress: a Ray job needs the address of a running Ray "
                                  f"cluster: give it (trainmon run --ray-address ADDR) or set {ADDRESS_VARIABLE}; "
                                  "`ray start --head` prints it.")
    resources = given.get("HostResources") or instances.host_resources(instance_type)
    if resources is None:
        raise ValidationException(f"ResourceConfig.InstanceType {instance_type!r} is not in trainmon's table of "
                                  "instance types (docs/cluster.md): give what each host takes in "
                                  "TrainmonConfig.HostResources, e.g. {\"CPU\": 8, \"GPU\": 1}.")
    settings["RayAddress"] = address
    settings["HostResources"] = dict(resources)
    settings["ResourceWaitSeconds"] = given.get("ResourceWaitSeconds", DEFAULT_RESOURCE_WAIT_S)
    settings["WaitForNodes"] = given.get("WaitForNodes", False)


def options(run: argparse.ArgumentParser) -> None:
    run.add_argument("--ray-address", metavar="ADDR", help="the Ray cluster (default: RAY_ADDRESS)")
    run.add_argument("--host-resources", metavar="JSON",
                     help='the Ray resources each host takes, e.g. \'{"CPU": 8, "GPU": 1}\' (default: the instance type\'s)')
    run.add_argument("--resource-wait-seconds", type=int, metavar="S",
                     help="how long a Ray job waits for room on the cluster before it fails (default 3600)")
    run.add_argument("--wait-for-nodes", action="store_true",
                     help="when too few Ray nodes could ever hold the hosts, wait for more to join instead of failing")


def given(args: argparse.Namespace) -> list[str]:
    return [flag for flag, value in (("--ray-address", args.ray_address), ("--host-resources", args.host_resources),
                                     ("--resource-wait-seconds", args.resource_wait_seconds),
                                     ("--wait-for-nodes", args.wait_for_nodes)) if value]


def from_options(args: argparse.Namespace) -> dict[str, Any]:
    settings: dict[str, Any] = {"WaitForNodes": args.wait_for_nodes}
    if args.ray_address:
        settings["RayAddress"] = args.ray_address
    if args.resource_wait_seconds is not None:
        settings["ResourceWaitSeconds"] = args.resource_wait_seconds
    if args.host_resources:
        try:
            settings["HostResources"] = json.loads(args.host_resources)
        except json.JSONDecodeError as exc:
            raise ValidationException(f"--host-resources is not valid JSON: {exc.msg} at column {exc.colno}; "
                                      'give an object such as \'{"CPU": 8, "GPU": 1}\'.') from None
    return settings


KIND = Kind("ray", "each host on its own node of a Ray cluster, writing to a shared PostgreSQL store "
            "(TRAINMON_DATABASE_URL)", _hosts, where="a job on a Ray cluster", members=MEMBERS,
            check=check, complete=complete, files_here=False, submit=_submit, elsewhere="the Ray cluster", options=options,
            given=given, from_options=from_options)
