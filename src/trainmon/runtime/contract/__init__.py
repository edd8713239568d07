"""SageMaker's container contract on this machine: the job's directory laid out as ``/opt/ml`` is
(:mod:`.layout`), the training toolkit's variables and script mode (:mod:`.toolkit`), instance
types (:mod:`.instances`), the model and output archives (:mod:`.artifacts`) and where the tensor
hook writes (:mod:`.tensors`).
"""
