"""Metric time series: chunks, roll-ups and their maintenance, in the SQL both backends run.

Every metric is a row of ``series``: CloudWatch's identity (namespace, name, dimensions, with a
SHA-256 digest as the unique key), the job it belongs to for metrics parsed from a job's log
(namespace ``/aws/sagemaker/TrainingJobs``, dimension ``TrainingJobName``), the newest time
(for ListMetrics), the job summaries ``describe`` shows (points, minimum, maximum, last finite
value) and ``rolled_ms``, the time before which every roll-up tier is complete.

Data lives in ``chunks``: a job's points (time, value, log position) per host and log stream,
or PutMetricData's datapoints (time, value, count, sum, minimum, maximum) per unit. A write
adds one packed chunk per series and batch (:mod:`trainmon.store.codec`); maintenance later
seals a series' chunks into compressed ones of up to ``SEAL_POINTS`` points, once no write has
touched them for ``SEAL_AFTER_MS``, or within seconds for a series writes keep busy
(``upkeep.seal_busy``: a running job's recent points would otherwise be hundreds of chunks to read).

``rollups`` holds, per series, tier period, period start and unit, a statistic set and a
quantile sketch (:mod:`trainmon.cloudwatch.sketch`). A write merges the datapoints it stores
older than the series' ``rolled_ms`` into the roll-up rows of the periods they fall in, every
tier, in its own transaction (``writes.roll_up``). PutMetricData's series are made with
``rolled_ms`` = ``ROLLED_ALL``, so each write rolls up all it stores and their roll-ups hold every
datapoint from its commit on. A job's points are rolled up by maintenance, as a flood of them
would pay more for it than for storing them: whole finest-tier periods (minutes), each tier from
the finer one, once they have ended, moving ``rolled_ms`` on (a coarser period the mark falls in
holds what came before it, and the next pass merges the rest); a later write older than that is
merged by the write. GetMetricStatistics reads the coarsest tier that divides its period and
start for the rolled part of its range, and rolls the rest up from the raw data on the fly.
Which tiers exist is the store's record, not each process's policy (:mod:`.tiers`).

Maintenance works in one short transaction per series and step, so writers wait milliseconds
at most and readers not at all; one process at a time does it, under a lease in ``maintenance``.

SQL here uses ``?`` placeholders; the backends' :class:`Sql` adapters render them.
"""
