"""The ``trainmon`` command (``python -m trainmon``, and the installed script): before anything else
is imported, a command that starts a job keeps a Ctrl-C or SIGTERM for the job's supervisor
(:func:`~trainmon.runtime.processes.sessions.hold_stop_signals`), so that none can be raised inside
the imports, where a finalizer or a lookup that clears errors would swallow it and the job would
start as if no one had asked it to stop."""

import os
import sys

JOB_COMMANDS = ("run", "demo")
BLAS_THREADS = "OPENBLAS_NUM_THREADS"


def starts_a_job(argv: list[str]) -> bool:
    """Whether the command line names a command that starts a job (``--home DIR`` may come first)."""
    tokens = iter(argv)
    for token in tokens:
        if token == "--home":
            next(tokens, None)
        elif not token.startswith("-"):
            return token in JOB_COMMANDS
    return False


def load_numpy_with_one_blas_thread() -> None:
    """NumPy loaded with one OpenBLAS thread, unless the user chose a number: trainmon does no linear
    algebra worth a thread, and OpenBLAS's idle threads spin for a while after it loads (0.1 CPU s of
    each command on two cores, a third of `trainmon list`'s). The variable is read as the library
    loads, and taken back at once, so that no job started from here inherits it."""
    if BLAS_THREADS in os.environ:
        return
    os.environ[BLAS_THREADS] = "1"
    try:
        import numpy  # noqa: F401
    finally:
        del os.environ[BLAS_THREADS]


def main() -> int:
    if starts_a_job(sys.argv[1:]):
        from .runtime.processes.sessions import hold_stop_signals

        hold_stop_signals()
    load_numpy_with_one_blas_thread()
    from .cli import main as command

    return command()


if __name__ == "__main__":
    sys.exit(main())
