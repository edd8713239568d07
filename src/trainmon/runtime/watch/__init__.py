"""What watches a running job from beside it: the system monitor and its /proc and GPU readers, the
rules and profiler watchers with the tensor files they read, alarm actions' delivery and the
store's maintainer. None of them may block, slow or end the job.
"""
