"""Stand-in base images for Harbor tasks on a host that cannot reach an image registry.

Public Harbor task sets build `FROM` a handful of registry images (``python:3.1x-slim``,
``ubuntu:24.04``, ``debian:bookworm-slim``, ``ghcr.io/laude-institute/t-bench/ubuntu-24-04``). Where
docker.io/ghcr.io do not resolve, `build_standins` makes local images tagged with those names from the
Debian mirror (``mmdebstrap --variant=minbase bookworm``, then ``podman import``, then a short
``podman build``), so the tasks' own Dockerfiles build unchanged. They are **stand-ins**: Debian
bookworm under every name (Python 3.11 for every ``python:3.x`` tag, Debian instead of Ubuntu), each
labelled `STANDIN_LABEL`; a user with registry access pulls the real images instead.

Every stand-in carries the host's CA bundle in `HOST_CA_PATH` (``PIP_CERT``, ``SSL_CERT_FILE`` and
``REQUESTS_CA_BUNDLE`` point at it: HTTPS from a container fails where the host trusts an intercepting
CA, and a task's ``apt-get install ca-certificates`` rebuilds the system bundle). The ``python`` ones
add ``python3 python3-pip python-is-python3`` with ``EXTERNALLY-MANAGED`` removed (the official images'
pip installs freely) and a ``pip`` command. The ``temurin`` one (``eclipse-temurin:17``) holds Debian's
OpenJDK 17 (headless) with ``JAVA_HOME`` at `JAVA_HOME` and its ``bin`` first on ``PATH``, as the
official image has them.

`build_tiny` makes `TINY_IMAGE`: bash and coreutils extracted from Debian packages (seconds, tens of MB),
the base of the default test tier's image-backed task.

Each image is built once: a build is skipped while every name exists carrying the label value of the
same recipe. Run it as ``python -m rollout_dataset.harbor.standin_images`` (``make standin-images``).
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["STANDIN_LABEL", "STANDIN_BASE", "UV_VERSION", "TINY_IMAGE", "HOST_CA_PATH", "STANDIN_TARGET", "JAVA_HOME", "StandIn", "STANDINS",
           "standin_names", "standin_for", "containerfile", "image_label", "build_base", "build_standins",
           "build_tiny", "main"]

logger = logging.getLogger(__name__)

#: the image label every stand-in carries (value: the recipe's hash)
STANDIN_LABEL = "org.rollout-dataset.standin"
#: the imported Debian rootfs the stand-ins build on
STANDIN_BASE = "localhost/rollout-dataset/standin-base:bookworm"
#: the default test tier's tiny image (bash, coreutils, tmux and its terminfo for terminus-2)
TINY_IMAGE = "localhost/rollout-dataset/tiny:bookworm"
#: where each stand-in keeps the host's CA bundle
HOST_CA_PATH = "/usr/local/share/host-ca.crt"
#: the command that builds the stand-ins (named by errors about a missing image)
STANDIN_TARGET = "make standin-images"
_SUITE = "bookworm"
_MIRROR = "http://deb.debian.org/debian"
_HOST_CA_SOURCES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt")
_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: Debian packages of the tiny image (extracted, not installed: no maintainer scripts run)
_TINY_PACKAGES = ("bash", "coreutils", "dash", "grep", "sed", "tar", "findutils", "gzip", "base-passwd", "libc-bin", "ncurses-base", "tmux")
#: the tiny image's users and groups (root, as `podman exec -u root` needs), from base-passwd's masters
_TINY_HOOKS = ('cp "$1/usr/share/base-passwd/passwd.master" "$1/etc/passwd"',
               'cp "$1/usr/share/base-passwd/group.master" "$1/etc/group"')


def _aliases(*names: str) -> tuple[str, ...]:
    """Each Docker Hub library name also under its AWS public-gallery mirror (task sets use both)."""
    out: list[str] = []
    for name in names:
        out.append(f"docker.io/library/{name}")
        out.append(f"public.ecr.aws/docker/library/{name}")
    return tuple(out)


@dataclass(frozen=True)
class StandIn:
    """One stand-in image and the registry names it is tagged with.

    Args:
        key: a short name (``python``, ``plain``).
        names: fully qualified image names (the tags tasks' `FROM` lines resolve to).
        packages: Debian packages installed on the base.
        python: whether pip is made to install freely (``EXTERNALLY-MANAGED`` removed, a ``pip`` command).
        env: ``NAME=VALUE`` settings the real image makes, added to the stand-in's ``ENV`` line.
        steps: shell commands run after the packages are installed (one ``RUN`` each).
    """

    key: str
    names: tuple[str, ...]
    packages: tuple[str, ...]
    python: bool
    env: tuple[str, ...] = ()
    steps: tuple[str, ...] = ()


#: where the ``temurin`` stand-in's JDK is found, as in the official eclipse-temurin images (``JAVA_HOME``)
JAVA_HOME = "/opt/java/openjdk"
#: the stand-ins (`FROM` and `COPY --from` names seen in public Harbor task sets; not provided: gcc, golang, node,
#: nvidia/cuda, whose toolchains Debian packages only in other versions). The ``python`` one comes first: the
#: ``uv`` one is fetched with it.
STANDINS: tuple[StandIn, ...] = (
    StandIn("python", _aliases("python:3.10-slim", "python:3.11-slim", "python:3.12-slim", "python:3.13-slim",
                               "python:3.10-slim-bookworm", "python:3.11-slim-bookworm", "python:3.12-slim-bookworm",
                               "python:3.13-slim-bookworm"),
            ("python3", "python3-pip", "python-is-python3", "ca-certificates"), python=True),
    StandIn("plain", _aliases("ubuntu:24.04", "ubuntu:noble", "debian:bookworm-slim", "debian:bookworm")
            + ("ghcr.io/laude-institute/t-bench/ubuntu-24-04:20250624", "ghcr.io/laude-institute/t-bench/ubuntu-24-04:latest"),
            ("ca-certificates",), python=False),
    # `COPY --from=ghcr.io/astral-sh/uv:0.8.15 /uv /uvx /usr/local/bin/`: the same uv release's binaries from PyPI
    StandIn("uv", ("ghcr.io/astral-sh/uv:0.8.15", "ghcr.io/astral-sh/uv:latest"), (), python=False),
    # Debian's OpenJDK 17 where the official image holds Adoptium's build of 17 on Ubuntu 22.04 (jammy), with that
    # image's JAVA_HOME, PATH, UTF-8 locale and tool packages (curl, wget, tzdata, fontconfig, p11-kit, binutils)
    StandIn("temurin", _aliases("eclipse-temurin:17", "eclipse-temurin:17.0.12_7-jdk-jammy"),
            ("openjdk-17-jdk-headless", "ca-certificates", "p11-kit", "curl", "wget", "tzdata", "fontconfig",
             "locales", "binutils"), python=False,
            env=(f"JAVA_HOME={JAVA_HOME}", f"PATH={JAVA_HOME}/bin:{_PATH}", "LANG=en_US.UTF-8", "LANGUAGE=en_US:en",
                 "LC_ALL=en_US.UTF-8"),
            # the JDK's trust store is remade once the locale exists (made before it, it lacks a CA whose file name is
            # not ASCII)
            steps=('echo "en_US.UTF-8 UTF-8" >> /etc/locale.gen && locale-gen en_US.UTF-8',
                   "rm -f /etc/ssl/certs/java/cacerts && update-ca-certificates --fresh > /dev/null",
                   f'mkdir -p {JAVA_HOME.rsplit("/", 1)[0]} && ln -s "$(dirname "$(dirname "$(readlink -f /usr/bin/javac)")")" '
                   f"{JAVA_HOME} && {JAVA_HOME}/bin/javac -version && {JAVA_HOME}/bin/java -version")),
)
#: the uv release the ``uv`` stand-in holds (PyPI's ``uv`` wheel carries the same binaries as the image)
UV_VERSION = "0.8.15"


def standin_names() -> list[str]:
    """Every image name a stand-in provides.

    Returns:
        Fully qualified names, in `STANDINS` order.
    """
    return [name for standin in STANDINS for name in standin.names]


def _qualified(image: str) -> str:
    """``python:3.12-slim`` → ``docker.io/library/python:3.12-slim`` (Docker's short-name rule); a tag-less
    name gets ``:latest``."""
    first, _, rest = image.partition("/")
    if not rest or ("." not in first and ":" not in first and first != "localhost"):
        image = f"docker.io/{image}" if rest else f"docker.io/library/{image}"
    last = image.rsplit("/", 1)[-1]
    return image if (":" in last or "@" in last) else f"{image}:latest"


def standin_for(image: str) -> str | None:
    """The stand-in that provides an image name, if one does.

    Args:
        image: a `FROM` image as a Dockerfile writes it (short or qualified, with or without a tag).

    Returns:
        The stand-in's key (``python``, ``plain``), or None.
    """
    wanted = _qualified(image.strip())
    for standin in STANDINS:
        if wanted in standin.names:
            return standin.key
    return None


def containerfile(standin: StandIn) -> str:
    """The Containerfile that makes a stand-in from `STANDIN_BASE` (the host's CA bundle is ``host-ca.crt``
    in its build context).

    Args:
        standin: which one.

    Returns:
        The file's text.
    """
    if standin.key == "uv":  # a scratch image holding /uv and /uvx, as the real one does
        return "\n".join([
            f"FROM {STANDINS[0].names[0]} AS fetch",
            f"RUN pip download -q --no-deps --only-binary=:all: uv=={UV_VERSION} -d /wheel && "
            "python -m zipfile -e /wheel/uv-*.whl /wheel/x && cp /wheel/x/uv-*.data/scripts/uv /wheel/x/uv-*.data/scripts/uvx / "
            "&& chmod 755 /uv /uvx",
            "FROM scratch",
            "COPY --from=fetch /uv /uvx /",
            f'LABEL description="stand-in: uv {UV_VERSION} from PyPI for {standin.names[0]}; not the real image"']) + "\n"
    steps = [f"apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "
             f"{' '.join(standin.packages)} && rm -rf /var/lib/apt/lists/*"]
    if standin.python:
        steps.append("rm -f /usr/lib/python3*/EXTERNALLY-MANAGED && ln -sf /usr/bin/pip3 /usr/local/bin/pip")
    steps += standin.steps
    lines = [f"FROM {STANDIN_BASE}",
             f"COPY host-ca.crt {HOST_CA_PATH}",
             f"ENV PIP_CERT={HOST_CA_PATH} SSL_CERT_FILE={HOST_CA_PATH} REQUESTS_CA_BUNDLE={HOST_CA_PATH}"
             + (" LANG=C.UTF-8" if standin.python else "") + "".join(f" {setting}" for setting in standin.env),
             *(f"RUN {step}" for step in steps),
             f'LABEL description="stand-in built from Debian {_SUITE} for {standin.names[0]}; not the real image"',
             "CMD [\"bash\"]"]
    return "\n".join(lines) + "\n"


def _host_ca() -> bytes:
    for path in _HOST_CA_SOURCES:
        try:
            return Path(path).read_bytes()
        except OSError:
            continue
    return b""


def image_label(standin: StandIn, host_ca: bytes) -> str:
    """The `STANDIN_LABEL` value of a stand-in's current recipe (its Containerfile and the host's CA bundle).

    Args:
        standin: which one.
        host_ca: the host's CA bundle.

    Returns:
        A short hex digest.
    """
    digest = hashlib.sha256(containerfile(standin).encode() + b"\0" + host_ca)
    return digest.hexdigest()[:16]


def _podman(*args: str, check: bool = True, capture: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], check=check, text=True,
                          stdout=subprocess.PIPE if capture else None, stderr=subprocess.STDOUT if capture else None)


def _exists(image: str) -> bool:
    return _podman("image", "exists", image, check=False).returncode == 0


def _label_of(image: str) -> str | None:
    proc = _podman("image", "inspect", "--format", f'{{{{index .Labels "{STANDIN_LABEL}"}}}}', image, check=False)
    value = (proc.stdout or "").strip()
    return value if proc.returncode == 0 and value and value != "<no value>" else None


def _import_rootfs(variant: str, packages: tuple[str, ...], image: str, hooks: tuple[str, ...] = (),
                   env: tuple[str, ...] = (), labels: tuple[str, ...] = ()) -> float:
    """mmdebstrap a rootfs tarball and ``podman import`` it as `image`; returns the seconds taken."""
    if shutil.which("mmdebstrap") is None:
        raise RuntimeError(f"mmdebstrap is not installed: run `make containers` (it builds {image})")
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="standin-rootfs-") as tmp:
        tarball = Path(tmp) / "rootfs.tar"
        argv = ["mmdebstrap", "--quiet", f"--variant={variant}"]
        if packages:
            argv.append(f"--include={','.join(packages)}")
        argv += [f"--extract-hook={hook}" for hook in hooks]
        subprocess.run([*argv, _SUITE, str(tarball), _MIRROR], check=True)
        changes = [arg for item in (f"ENV PATH={_PATH}", *(f"ENV {e}" for e in env), *(f"LABEL {lb}" for lb in labels),
                                    'CMD ["bash"]')
                   for arg in ("--change", item)]
        _podman("import", *changes, str(tarball), image)
    return time.monotonic() - start


def build_base(force: bool = False) -> float:
    """Make `STANDIN_BASE` (``mmdebstrap --variant=minbase``), unless it exists.

    Args:
        force: rebuild even when it exists.

    Returns:
        Seconds taken (0.0 when it existed).
    """
    if _exists(STANDIN_BASE) and not force:
        return 0.0
    return _import_rootfs("minbase", (), STANDIN_BASE)


def build_tiny(force: bool = False) -> float:
    """Make `TINY_IMAGE` (bash and coreutils extracted from Debian packages), unless it exists built from the
    same package list (its `STANDIN_LABEL`).

    Args:
        force: rebuild even when it exists.

    Returns:
        Seconds taken (0.0 when it existed).
    """
    recipe = hashlib.sha256(repr((_TINY_PACKAGES, _TINY_HOOKS)).encode()).hexdigest()[:16]
    if _label_of(TINY_IMAGE) == recipe and not force:  # built from today's package list
        return 0.0
    return _import_rootfs("extract", _TINY_PACKAGES, TINY_IMAGE, _TINY_HOOKS, ("LANG=C.UTF-8",),
                          labels=(f"{STANDIN_LABEL}={recipe}",))


def build_standins(keys: list[str] | None = None, force: bool = False) -> dict[str, float]:
    """Build the stand-ins (and their base) that are missing or whose recipe changed.

    Args:
        keys: which stand-ins (`StandIn.key`); None: all.
        force: rebuild every one asked for.

    Returns:
        Seconds each build took by key (0.0 for one that was current), and ``base`` for the base.

    Raises:
        ValueError: an unknown key.
        subprocess.CalledProcessError: mmdebstrap or podman failed (their output went to stderr).
    """
    known = {standin.key: standin for standin in STANDINS}
    unknown = sorted(set(keys or []) - set(known))
    if unknown:
        raise ValueError(f"unknown stand-in {', '.join(unknown)} (known: {', '.join(known)})")
    timings = {"base": build_base(force=force)}
    host_ca = _host_ca()
    for key in keys or list(known):
        standin = known[key]
        label = image_label(standin, host_ca)
        if not force and all(_label_of(name) == label for name in standin.names):
            timings[key] = 0.0
            continue
        start = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=f"standin-{key}-") as tmp:
            (Path(tmp) / "Containerfile").write_text(containerfile(standin), encoding="utf-8")
            (Path(tmp) / "host-ca.crt").write_bytes(host_ca)
            tags = [arg for name in standin.names for arg in ("-t", name)]
            _podman("build", "--network", "host", "--label", f"{STANDIN_LABEL}={label}", *tags,
                    "-f", str(Path(tmp) / "Containerfile"), tmp, capture=False)
        timings[key] = time.monotonic() - start
    return timings


def main(argv: list[str] | None = None) -> int:
    """``python -m rollout_dataset.harbor.standin_images [--tiny] [--only KEY ...] [--force] [--list]``.

    Returns:
        0 done, 1 a build failed, 2 usage.
    """
    parser = argparse.ArgumentParser(prog="standin_images", description="Build stand-in base images from the Debian mirror.")
    parser.add_argument("--tiny", action="store_true", help=f"build only the test tier's {TINY_IMAGE}")
    parser.add_argument("--only", nargs="+", metavar="KEY", help="stand-ins to build (default: all)")
    parser.add_argument("--force", action="store_true", help="rebuild even when current")
    parser.add_argument("--list", action="store_true", help="print each stand-in's names and exit")
    args = parser.parse_args(argv)
    if args.list:
        for standin in STANDINS:
            print(f"{standin.key}: {' '.join(standin.names)}")
        return 0
    if shutil.which("podman") is None:
        print("standin_images: podman is not installed: run `make containers`", file=sys.stderr)
        return 1
    try:
        if args.tiny:
            seconds = build_tiny(force=args.force)
            print(f"{TINY_IMAGE}: {'current' if seconds == 0.0 else f'built in {seconds:.1f} s'}")
            return 0
        for key, seconds in build_standins(args.only, force=args.force).items():
            print(f"{key}: {'current' if seconds == 0.0 else f'built in {seconds:.1f} s'}")
    except ValueError as exc:
        print(f"standin_images: {exc}", file=sys.stderr)
        return 2
    except (subprocess.CalledProcessError, RuntimeError) as exc:
        print(f"standin_images: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
