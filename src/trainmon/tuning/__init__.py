"""Hyperparameter tuning: the tuner that runs a tuning job's trials (:mod:`.tuner`) and its search,
Optuna's samplers over the job's ranges (:mod:`.space`). The operations that create and read tuning
jobs are in :mod:`trainmon.api.tuning`; they start the tuner as ``python -m trainmon.tuning NAME``.
Optuna is an optional dependency (``pip install 'trainmon[tuning]'``), imported here only."""
