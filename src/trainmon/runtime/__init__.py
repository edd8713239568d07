"""The job runtime, by role: the job as its supervisor runs it (:mod:`.job`), where its hosts run
(:mod:`.launchers`, by name), capture from the pipes to the store (:mod:`.capture`), what watches the
job from beside it (:mod:`.watch`: system metrics, the profiler, rules, maintenance), the container
contract (:mod:`.contract`), the job's processes told apart from every other (:mod:`.processes`), and
how a refused store write is waited for (:mod:`.retry`)."""
