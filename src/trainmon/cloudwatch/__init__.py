"""CloudWatch's domain, pure: the metric model and PutMetricData's rules (:mod:`.model`), statistics
and period rules (:mod:`.statistics`), roll-up rows with quantile sketches (:mod:`.sketch`), metric
math (:mod:`.expressions`) and the retention policy (:mod:`.retention`). The reads over the store
are :mod:`trainmon.read.metric_data`, the operations :mod:`trainmon.api.cloudwatch`."""
