"""The job runtime: the supervisor that owns a job (:mod:`.supervisor`), how its hosts start and are
signalled (:mod:`.launcher`), capture from pipes to the store (:mod:`.capture`), the container
contract (:mod:`.contract`), system metrics and the profiler (:mod:`.monitor`, :mod:`.sampler`),
background maintenance, and what happens when a supervisor dies (:mod:`.orphans`, :mod:`.recovery`)."""
