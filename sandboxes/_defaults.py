"""Default values for the sandboxes package, in one place.

Every default a config field, a CLI flag or a helper falls back to lives here, so that changing one
changes it everywhere. Nothing in this module has behaviour.
"""

from __future__ import annotations

#: Image tag the Docker backend runs; `build_image` makes it offline when it is missing.
IMAGE = "looplift-sandbox:py311"
#: The 3D sandbox image (the base image plus Blender as the `bpy` module); `build_image(flavor="3d")` makes it.
IMAGE_3D = "looplift-sandbox-3d:py311"
#: Debian packages the `bpy` wheel's shared libraries need beyond a minbase system (X11 client libraries and
#: libGL are linked at import time even though nothing is displayed or rendered).
IMAGE_3D_PACKAGES = ("libx11-6", "libxrender1", "libxfixes3", "libxi6", "libxkbcommon0", "libxext6", "libxt6",
                     "libsm6", "libice6", "libbsd0", "libgl1")
#: Wheels installed into the 3D image's python3 (from the package index, at build time only; no deps are
#: resolved: bpy imports numpy and nothing else of its declared requirements).
IMAGE_3D_WHEELS = ("bpy==4.5.15", "numpy==1.26.4")
#: Platform tags those wheels may have (the image's glibc is Debian bookworm's 2.36).
IMAGE_3D_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
#: Memory a sandbox may use, in MiB (Docker: cgroup limit without swap; local: RLIMIT_AS).
MEMORY_MB = 256
#: Most processes/threads alive at once inside a Docker sandbox (cgroup pids limit).
PIDS = 64
#: CPU share of a Docker sandbox, in cores.
CPUS = 1.0
#: Default wall-clock limit for one exec, in seconds.
TIMEOUT_S = 10.0
#: Size of the writable workdir tmpfs (Docker) or the largest file one may write (local), in MiB.
WORKDIR_MB = 64
#: Size of the /tmp tmpfs inside a Docker sandbox, in MiB.
TMP_MB = 16
#: Bytes kept of each of stdout and stderr; the rest is counted as truncated and dropped.
OUTPUT_LIMIT_BYTES = 64 * 1024
#: Open files a local sandbox process may hold (RLIMIT_NOFILE).
NOFILE = 256

#: Working directory inside a Docker sandbox.
WORKDIR = "/work"
#: uid/gid that runs model code in both backends ("nobody"); the Docker runner itself is uid 0 in its
#: container with four capabilities (see `_docker.py`), the local backend drops to it when run as root.
SANDBOX_UID = 65534
#: Label put on every container this package starts, so leftovers can be found and removed.
LABEL = "looplift.sandbox"

#: Seconds the host waits past an exec's timeout for the in-container runner's answer before it kills
#: and replaces the whole container (the runner normally kills the command right at its timeout).
HARD_GRACE_S = 3.0
#: Seconds `detect_backend` waits for a Docker engine to answer a ping.
PING_TIMEOUT_S = 2.0
#: Seconds a `docker pull` of the fallback base image may take before the offline build starts.
PULL_TIMEOUT_S = 20.0
#: Image pulled when a registry answers; its python3 and coreutils are all a sandbox needs.
PULL_IMAGE = "python:3.11-slim"
#: Debian suite debootstrap builds the offline image from.
DEBIAN_SUITE = "bookworm"

#: Sandboxes a pool keeps started and ready.
POOL_SIZE = 2
#: Seconds an `acquire` that waits, while a sandbox start has failed, lets pass before it retries the start.
START_RETRY_S = 1.0
#: Seconds between a pool's checks of its idle sandboxes: one that died while idle (killed, OOM, removed by hand)
#: is replaced then, before an acquire meets it and waits for a start.
IDLE_CHECK_S = 5.0

# ---- several engines (`_engines.py`) -----------------------------------------------------------
#: Environment variable listing the Docker engines a pool spreads over: `URL[#CAPACITY]`, spaces or commas.
ENGINES_ENV = "LOOPLIFT_SANDBOX_ENGINES"
#: An engine without a stated capacity holds at most this many sandboxes per core it reports. Sandboxes
#: mostly wait for the model (a warm exec is ~20 ms, an LLM turn ~1 s), so a core serves several.
SANDBOXES_PER_CORE = 4
#: ... and at most this share of its memory divided by the sandbox memory limit (the limit is a hard cap).
MEMORY_SHARE = 0.8
#: Seconds an engine whose start failed is left alone before it is tried again (doubling per failure) ...
ENGINE_RETRY_S = 5.0
#: ... up to this.
ENGINE_RETRY_MAX_S = 60.0
#: PATH given to processes in both backends.
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
