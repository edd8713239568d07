"""Where a job's hosts run: the launchers a job may name, by registry (:mod:`.registry`), each a folder
(:mod:`.local`, :mod:`.ray`) with its :class:`~.kind.Kind`, and the process launcher they share
(:mod:`.launcher`).
"""
