"""The ``trainmon`` command (``python -m trainmon``, and the installed script): before anything else
is imported, a command that starts a job keeps a Ctrl-C or SIGTERM for the job's supervisor
(:func:`~trainmon.runtime.processes.sessions.hold_stop_signals`), so that none can be raised inside
the imports, where a finalizer or a lookup that clears errors would swallow it and the job would
start as if no one had asked it to stop."""

import sys

JOB_COMMANDS = ("run", "demo")


def starts_a_job(argv: list[str]) -> bool:
    """Whether the command line names a command that starts a job (``--home DIR`` may come first)."""
    tokens = iter(argv)
    for token in tokens:
        if token == "--home":
            next(tokens, None)
        elif not token.startswith("-"):
            return token in JOB_COMMANDS
    return False


def main() -> int:
    if starts_a_job(sys.argv[1:]):
        from .runtime.processes.sessions import hold_stop_signals

        hold_stop_signals()
    from .cli import main as command

    return command()


if __name__ == "__main__":
    sys.exit(main())
