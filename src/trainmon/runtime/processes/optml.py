"""A host run as a process sees its directory at ``/opt/ml``, as a container does: code written for
SageMaker's paths (``/opt/ml/model``, ``/opt/ml/input/data/<channel>``, a driver the SDK sends in a
channel) runs unchanged, while the ``SM_*`` variables keep naming the directory itself.

The host's command is started through this program, which gives it a private mount namespace
(Linux's ``unshare``: as root a mount namespace alone, as any other user inside a user namespace
that maps only the user's own ids, so the command runs as the user it would have, with no
capability left once it is executed). There, the host's directory is bound at ``/opt/ml``: onto
``/opt/ml`` itself where the machine has one, else onto a directory of a small read-only ``/opt``
of the namespace's own that holds every entry of the machine's ``/opt`` in its place. Nothing of
this is seen outside the command's processes, and nothing is left when they end.

Where the system refuses (a kernel without user namespaces, or a policy against them for
unprivileged users, as some distributions set) the command runs as before, without ``/opt/ml``,
and its log says so on its first line.

It imports only the standard library and is run by path (``python -I -S optml.py DIR -- COMMAND``),
then replaces itself with the command: the host's main process keeps its process id.
"""

from __future__ import annotations

import ctypes
import os
import stat
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
MNT_DETACH = 0x2
TARGET = "/opt/ml"
NOTICE = "trainmon: this job sees no /opt/ml"


class Unavailable(Exception):
    """The system gives this process no namespace of its own; the message says why."""


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        error = ctypes.get_errno()
        raise Unavailable(f"{what}: {os.strerror(error)}")


def _mount(libc: ctypes.CDLL, source: str | None, target: str, kind: str | None, flags: int,
           data: str | None = None) -> None:
    _check(libc.mount(_bytes(source), target.encode(), _bytes(kind), ctypes.c_ulong(flags), _bytes(data)),
           f"mount {target}")


def _bytes(text: str | None) -> bytes | None:
    return text.encode() if text is not None else None


def _write(path: str, text: str) -> None:
    with open(path, "w") as file:
        file.write(text)


def enter(root: str, libc: ctypes.CDLL | None = None) -> None:
    """Give this process a mount namespace of its own where ``root`` is at /opt/ml (Unavailable when
    the system refuses one; the process is then as it was, or in a namespace that changes nothing)."""
    libc = libc or _libc()
    cwd = os.getcwd()
    if os.getuid() != 0:
        _probe(libc)  # a refusal after unshare would leave this process in a namespace it cannot leave
    _namespace(libc)
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)  # nothing of what follows reaches the machine's
    covered = not os.path.isdir(TARGET)
    try:
        if covered:
            _opt_of_its_own(libc)
        _mount(libc, root, TARGET, None, MS_BIND | MS_REC)
    except BaseException:
        if covered:  # the machine's /opt as it was, not half of it
            libc.umount2(b"/opt", MNT_DETACH)
        raise
    os.chdir(cwd)  # the same directory, seen through the namespace's mounts


def _namespace(libc: ctypes.CDLL) -> None:
    """A mount namespace of this process's own: inside a user namespace that maps the user's own ids
    and no others, unless root (files keep their owners, setgroups is denied)."""
    uid, gid = os.getuid(), os.getgid()
    _check(libc.unshare(CLONE_NEWNS if uid == 0 else CLONE_NEWNS | CLONE_NEWUSER), "unshare")
    if uid != 0:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")


def _probe(libc: ctypes.CDLL) -> None:
    """Unavailable unless a child of this process can make the namespace and mount in it: some
    systems let an unprivileged user create a user namespace and then refuse every id mapping and
    mount in it (Ubuntu's restriction of unprivileged user namespaces by AppArmor)."""
    said, told = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(said)
        try:
            _namespace(libc)
            _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)
        except BaseException as exc:  # this process only reports why: it must not go on as its parent
            os.write(told, str(exc).encode(errors="replace")[:512])
            os._exit(1)
        os._exit(0)
    os.close(told)
    with os.fdopen(said, "rb") as answer:
        why = answer.read().decode(errors="replace")
    _, status = os.waitpid(child, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise Unavailable(why or "the namespace could not be made")


def _opt_of_its_own(libc: ctypes.CDLL) -> None:
    """/opt as the machine has it, plus an empty ``ml`` to mount on: a tmpfs over /opt holding each
    of the machine's entries (directories and files bound from the original, links copied)."""
    if not os.path.isdir("/opt"):
        raise Unavailable("this machine has no /opt")
    names = os.listdir("/opt")
    original = os.open("/opt", os.O_PATH | os.O_DIRECTORY)  # the machine's /opt, once covered
    try:
        _mount(libc, "tmpfs", "/opt", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k")
        for name in names:
            source, target = f"/proc/self/fd/{original}/{name}", f"/opt/{name}"
            try:
                mode = os.lstat(source).st_mode
            except FileNotFoundError:
                continue  # gone meanwhile
            if stat.S_ISLNK(mode):
                os.symlink(os.readlink(source), target)
                continue
            if stat.S_ISDIR(mode):
                os.mkdir(target)
            else:
                os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o644))
            _mount(libc, source, target, None, MS_BIND | MS_REC)
        os.mkdir(TARGET)
        _mount(libc, None, "/opt", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    finally:
        os.close(original)


def main(argv: list[str]) -> None:
    if len(argv) < 3 or argv[1] != "--":
        sys.exit("usage: optml.py DIR -- COMMAND [ARG ...]")
    root, command = argv[0], argv[2:]
    try:
        enter(root)
    except (Unavailable, OSError) as exc:
        why = exc if isinstance(exc, Unavailable) else f"{exc.strerror or exc}"
        sys.stdout.write(f"{NOTICE} (the system refused a private mount namespace: {why}); its files are where "
                         "its SM_* variables say\n")
        sys.stdout.flush()
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        sys.stderr.write(f"trainmon: cannot start {command[0]!r}: {exc.strerror or exc}\n")
        sys.exit(127)


if __name__ == "__main__":
    main(sys.argv[1:])
