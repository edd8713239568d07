"""The read layer: how the doors read metric series, between the store and them.

The store hands out rows and columns; what a reader wants of them is computed here, once, for
every door that shows it: GetMetricStatistics' and GetMetricData's numbers, which the alarms
evaluate too (:mod:`.metric_data`); a series as a chart of N pixels shows it (:mod:`.downsample`,
pure, and the chart reads of :mod:`.charts`); a job's series whole, within a budget, for the
profiling report (:mod:`.series`). Checking requests and shaping answers stay with the
operations layer (``api/``) and the doors (``server/``, ``report/``). This package imports the
store and the pure layers only.
"""
