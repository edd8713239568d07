"""The processes of a job, told apart from every other: who a process is (``/proc``), the tag that
every process of a job inherits, the session a supervisor runs in, and the mount namespace where a
host run as a process sees its directory at ``/opt/ml`` (:mod:`.optml`).
"""
