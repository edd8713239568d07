"""The local launcher: the job's hosts are processes of this machine (the default).

:mod:`.launcher` starts, watches and signals them; :mod:`.hosts` is the job's hosts as the
supervisor drives them, each with its capture and system monitor. A Ray job's host agent runs a
:class:`~.hosts.LocalHosts` of one host on its node."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..kind import Kind

if TYPE_CHECKING:
    from ...job.hosts import HostsContext, JobHosts


def _hosts(context: HostsContext) -> JobHosts:
    from ...contract.layout import Peers
    from .hosts import LocalHosts  # capture, monitor, sampler: loaded only by whoever supervises

    names = context.names
    peers = Peers.named(names) if "Image" in context.job.doc["TrainmonConfig"] else Peers.local(names)
    return LocalHosts(context.store, context.job, names, peers, echo=context.echo,
                      live_metrics=context.live_metrics, interrupted=lambda: context.state.interrupted)


KIND = Kind("local", "the hosts are processes of this machine (containers, for an image)", _hosts)
