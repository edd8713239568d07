"""The container engine, Podman or Docker, driven through its command line (both take the same
arguments for everything trainmon asks of them).

:func:`find` chooses it: ``TRAINMON_CONTAINER_ENGINE`` when set (a name on PATH or a path), else
``podman``, else ``docker``. Every container trainmon creates carries the label ``trainmon.tag``
with its job's process tag (:mod:`trainmon.runtime.processes.tags`), so what a job left behind is
found by that label, never by a name alone.
"""

from __future__ import annotations

import ipaddress
import json
import os
import platform
import resource
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .image import ImageReference

ENGINE_VARIABLE = "TRAINMON_CONTAINER_ENGINE"
TAG_LABEL = "trainmon.tag"
JOB_LABEL = "trainmon.job"
CALL_TIMEOUT_S = 120.0
PULL_TIMEOUT_S = 3600.0
CDI_DIRS = ("/etc/cdi", "/var/run/cdi")  # where the Container Device Interface's descriptions are
NVIDIA_GPU_KIND = "nvidia.com/gpu"
# conmon, Podman's monitor of each container, cannot raise a container's process limit above this
PODMAN_MAX_NPROC = 32768


class EngineError(Exception):
    """The engine is missing, not running, or refused; the message says what to do."""


@dataclass(frozen=True)
class LocalImage:
    name: str  # repository:tag, or the id of an image without one
    id: str
    size: str
    created: str


@dataclass(frozen=True)
class Engine:
    name: str  # podman or docker
    path: str

    def call(self, args: Sequence[str], *, timeout_s: float = CALL_TIMEOUT_S, check: bool = True,
             env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """Run ``engine args``; EngineError with the engine's own words when it fails and ``check``."""
        try:
            done = subprocess.run([self.path, *args], capture_output=True, text=True, timeout=timeout_s,
                                  stdin=subprocess.DEVNULL, env=env)
        except subprocess.TimeoutExpired:
            raise EngineError(f"{self.name} {args[0]} did not answer within {timeout_s:.0f} s: check that "
                              f"{self.name} works (`{self.name} info`).") from None
        except OSError as exc:
            raise EngineError(f"cannot run {self.path}: {exc.strerror or exc}.") from None
        if check and done.returncode != 0:
            raise EngineError(f"{self.name} {args[0]} failed: {_said(done)}")
        return done

    def present(self, image: str) -> bool:
        """Whether the engine has the image; EngineError when the engine itself does not answer (a
        daemon not running, a socket the user may not use)."""
        done = self.call(["image", "inspect", "--format", "{{.Id}}", image], check=False)
        if done.returncode == 0:
            return True
        said = _said(done)
        if any(words in said.lower() for words in _NO_SUCH_IMAGE):
            return False
        raise EngineError(f"{self.name} cannot be used ({said}): check that it runs and that you may use it "
                          f"(`{self.name} info`; Docker: its daemon started and you in the docker group), or "
                          f"choose another engine with {ENGINE_VARIABLE}.")

    def ensure(self, reference: ImageReference) -> str:
        """The image ready to run: the local one of that name when there is one, else pulled (once);
        its name as given to the engine. EngineError, saying what to do, when it cannot be had."""
        name = reference.name
        if self.present(name):
            return name
        done = self.call(["pull", "--quiet", name], timeout_s=PULL_TIMEOUT_S, check=False)
        if done.returncode == 0:
            return name
        said = _said(done)
        how = ("log in to the registry first (`aws ecr get-login-password | "
               f"{self.name} login --username AWS --password-stdin {reference.registry}`), or build or tag the "
               f"image locally under that name (`{self.name} build -t {name} .`)") if reference.in_ecr else (
            f"build or tag it locally under that name (`{self.name} build -t {name} .`), or check its name and "
            f"that the registry can be reached (`{self.name} pull {name}`)")
        raise EngineError(f"image {name} is not on this machine and could not be pulled ({said}): {how}.")

    def architecture(self, image: str) -> str:
        done = self.call(["image", "inspect", "--format", "{{.Architecture}}", image], check=False)
        return done.stdout.strip() if done.returncode == 0 else ""

    def check_runnable(self, image: str) -> None:
        """EngineError, saying what to do, when the image is built for a processor the engine's machine
        cannot run (natively, or through an emulator registered here): the container would fail with
        'exec format error'. The engine's own machine is asked only when the image is not this one's
        (a remote engine, or one in a virtual machine, may run another)."""
        built_for, here = self.architecture(image), machine_architecture()
        if not built_for or _runs_on(built_for, here) or _emulated(built_for):
            return
        engines = self.call(["info", "--format", "{{.Host.Arch}}" if self.name == "podman" else "{{.Architecture}}"],
                            check=False).stdout.strip()
        if engines and _runs_on(built_for, _ARCHITECTURES.get(engines, engines)):
            return
        raise EngineError(f"image {image} is built for {built_for} and this machine is {here}: build it for "
                          f"{here} (`{self.name} build --platform linux/{here} ...`), or register an emulator for "
                          f"{built_for} (Debian: `apt-get install qemu-user-static binfmt-support`).")

    def images(self) -> list[LocalImage]:
        done = self.call(["images", "--format", "{{.Repository}}\t{{.Tag}}\t{{.ID}}\t{{.Size}}\t{{.CreatedSince}}"])
        found = []
        for line in done.stdout.splitlines():
            parts = line.split("\t")
            if len(parts) != 5:
                continue
            repository, tag, image_id, size, created = parts
            named = repository not in ("", "<none>") and tag not in ("", "<none>")
            found.append(LocalImage(f"{repository}:{tag}" if named else image_id, image_id, size, created))
        return found

    def state(self, container: str) -> tuple[bool, int]:
        """Whether the container runs, and its main process's id on this machine (0 when none)."""
        done = self.call(["inspect", "--format", "{{.State.Running}} {{.State.Pid}}", container], check=False)
        running, _, pid = done.stdout.strip().partition(" ")
        return (done.returncode == 0 and running == "true"), int(pid) if pid.isdigit() else 0

    def kill(self, container: str, signal_name: str) -> None:
        self.call(["kill", "--signal", signal_name, container], check=False)

    def tagged(self, tag: str) -> list[str]:
        """The containers (running or not) of the job with this process tag."""
        done = self.call(["ps", "--all", "--quiet", "--filter", f"label={TAG_LABEL}={tag}"], check=False)
        return done.stdout.split() if done.returncode == 0 else []

    def remove_tagged(self, tag: str) -> int:
        """Remove every container of the job with this tag, killing those still running; how many."""
        found = self.tagged(tag)
        if found:
            self.call(["rm", "--force", *found], check=False)
        return len(found)

    def create_network(self, name: str, *, internal: bool, tag: str) -> list[str]:
        """A bridge network of its own (``internal``: reaching nothing beyond it); the addresses of
        its subnet free for containers. Names are given to containers as hosts entries, not by the
        engine's DNS: Podman's DNS server (aardvark-dns) writes its own complaints into the first
        container's output where it cannot reach syslog."""
        args = ["network", "create", "--label", f"{TAG_LABEL}={tag}", *(["--internal"] if internal else [])]
        self.call([*args, *(["--disable-dns"] if self.name == "podman" else []), name])
        found = json.loads(self.call(["network", "inspect", name]).stdout or "[]")
        for network in found:  # Podman's shape, then Docker's
            for entry in network.get("subnets") or (network.get("IPAM") or {}).get("Config") or []:
                subnet = ipaddress.ip_network(entry.get("subnet") or entry.get("Subnet"))
                gateway = entry.get("gateway") or entry.get("Gateway")
                if subnet.version == 4:
                    return [str(a) for a in subnet.hosts() if str(a) != gateway][1 if gateway is None else 0:]
        self.remove_network(name)
        raise EngineError(f"{self.name} made network {name} without an IPv4 subnet: the job's hosts need one.")

    def remove_network(self, name: str) -> None:
        self.call(["network", "rm", "--force", name] if self.name == "podman" else ["network", "rm", name],
                  check=False)

    def gpus_unusable(self, cdi_dirs: Sequence[str] = CDI_DIRS) -> str | None:
        """Why this engine cannot pass NVIDIA's GPUs to a container, with what to install; None when
        it can: Podman with a CDI description of them, Docker with NVIDIA's runtime (or CDI)."""
        if any(_describes_nvidia_gpus(Path(d)) for d in cdi_dirs):
            return None
        if self.name == "docker":
            try:
                runtimes = self.call(["info", "--format", "{{json .Runtimes}}"], check=False).stdout
            except EngineError:
                runtimes = ""
            if "nvidia" in runtimes:
                return None
            return ("docker has neither NVIDIA's runtime nor a CDI description of NVIDIA's GPUs: install the NVIDIA "
                    "Container Toolkit (`nvidia-ctk runtime configure --runtime=docker`, then restart docker)")
        return (f"podman finds no CDI description of NVIDIA's GPUs in {' or '.join(cdi_dirs)}: install the NVIDIA "
                "Container Toolkit and run `nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`")

    def gpu_arguments(self, gpus: Sequence[str]) -> list[str]:
        """The arguments that pass these GPUs (NVIDIA's, by index or UUID) to a container: Podman's
        by their CDI names (``--device nvidia.com/gpu=0``), Docker's through its NVIDIA runtime
        (``--gpus "device=0,1"``); see :meth:`gpus_unusable` first."""
        if not gpus:
            return []
        if self.name == "docker":
            return ["--gpus", f'"device={",".join(gpus)}"']
        return [argument for gpu in gpus for argument in ("--device", f"{NVIDIA_GPU_KIND}={gpu}")]

    def limits(self) -> list[str]:
        """``--ulimit`` arguments that give a container this process's own limits of open files and
        processes: the engines' defaults (Podman's 1,048,576 files) exceed what a user without
        CAP_SYS_RESOURCE may set, and the container would not start."""
        args = []
        for option, which in (("nofile", resource.RLIMIT_NOFILE), ("nproc", resource.RLIMIT_NPROC)):
            soft, hard = resource.getrlimit(which)
            if self.name == "podman" and option == "nproc":
                soft, hard = (min(PODMAN_MAX_NPROC, v if v != resource.RLIM_INFINITY else PODMAN_MAX_NPROC)
                              for v in (soft, hard))
            elif hard == resource.RLIM_INFINITY:
                continue
            args += ["--ulimit", f"{option}={soft if soft != resource.RLIM_INFINITY else hard}:{hard}"]
        return args


def _describes_nvidia_gpus(directory: Path) -> bool:
    try:
        specs = [p for p in directory.iterdir() if p.suffix in (".yaml", ".yml", ".json")]
        return any(NVIDIA_GPU_KIND.split("/")[0] in p.read_text(errors="replace") for p in specs)
    except OSError:
        return False


_NO_SUCH_IMAGE = ("image not known", "no such image", "no such object", "not found")
# the engines' names (Go's) of the processors Python's platform.machine() names
_ARCHITECTURES = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "i686": "386", "ppc64le": "ppc64le",
                  "s390x": "s390x", "riscv64": "riscv64"}
_EMULATORS = {"amd64": "x86_64", "arm64": "aarch64", "386": "i386"}  # binfmt_misc's qemu names that differ


def machine_architecture() -> str:
    machine = platform.machine()
    return _ARCHITECTURES.get(machine, machine)


_ALSO_RUNS = {"amd64": ("386",), "arm64": ("arm",)}  # what a processor runs besides its own programs


def _runs_on(built_for: str, machine: str) -> bool:
    return built_for == machine or built_for in _ALSO_RUNS.get(machine, ())


def _emulated(architecture: str) -> bool:
    """Whether the kernel runs programs of that processor through an emulator (binfmt_misc's qemu)."""
    return Path(f"/proc/sys/fs/binfmt_misc/qemu-{_EMULATORS.get(architecture, architecture)}").exists()


def find(environ: os._Environ[str] | dict[str, str] | None = None) -> Engine:
    """The container engine to use; EngineError naming both when neither is installed."""
    environ = os.environ if environ is None else environ
    chosen = environ.get(ENGINE_VARIABLE, "").strip()
    search = environ.get("PATH", os.defpath)
    if chosen:
        path = shutil.which(chosen, path=search)
        if path is None:
            raise EngineError(f"{ENGINE_VARIABLE}={chosen} is not an executable: give podman, docker or the path "
                              "of one.")
        name = "docker" if "docker" in os.path.basename(chosen) else "podman"
        return Engine(name, path)
    for name in ("podman", "docker"):
        path = shutil.which(name, path=search)
        if path is not None:
            return Engine(name, path)
    raise EngineError("running an image needs a container engine, and neither podman nor docker is installed: "
                      "install one (Debian: `apt-get install podman`), or set "
                      f"{ENGINE_VARIABLE} to the path of one.")


def _said(done: subprocess.CompletedProcess[str]) -> str:
    """The last line the engine wrote to stderr, without its own prefix (``Error: ``)."""
    lines = [line.strip() for line in (done.stderr or done.stdout).splitlines() if line.strip()]
    text = lines[-1] if lines else f"exit status {done.returncode}"
    for prefix in ("Error: ", "Error response from daemon: ", "error: "):
        text = text.removeprefix(prefix)
    return text

