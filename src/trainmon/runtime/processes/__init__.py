"""The processes of a job, told apart from every other: who a process is (``/proc``), the tag that
every process of a job inherits, and the session a supervisor runs in.
"""
