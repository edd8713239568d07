"""Container images and the engine that runs them: what a ``TrainingImage`` names (:mod:`.image`)
and Podman or Docker driven through its command line (:mod:`.engine`). The launcher that runs a
job's hosts as containers is :mod:`trainmon.runtime.launchers.local.container`."""
