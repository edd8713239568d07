"""The job, as its supervisor runs it: the supervisor (statuses, stop requests, time limit, rules,
final status), the job's state as it goes, the hosts it drives whatever the launcher, the
supervisor started apart from the command that asked for it, and what is left of a job whose
supervisor died.
"""
