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
touched them for ``SEAL_AFTER_MS``.

``rollups`` holds, per series, tier period, period start and unit, a statistic set and a
quantile sketch (:mod:`trainmon.cloudwatch.sketch`). Maintenance rolls the raw data of whole
coarsest-tier periods up into every tier (each tier from the finer one), then moves
``rolled_ms`` on. A write older than ``rolled_ms`` (PutMetricData accepts two weeks back) is
merged into the roll-ups it belongs to in the same transaction, so they stay exact.
GetMetricStatistics reads the coarsest tier that divides its period for the rolled part of its
range and rolls the rest up from the raw data on the fly.

Maintenance works in one short transaction per series and step, so writers wait milliseconds
at most and readers not at all; one process at a time does it, under a lease in ``maintenance``.

SQL here uses ``?`` placeholders; the backends' :class:`Sql` adapters render them.
"""
