#!/usr/bin/env bash
# Fill examples/wheels-arithmetic/wheels/ with the complete wheel closure of its servers (and the
# runtime's pins), so the package starts with no package index at all.
#
#   ./uvw run bash examples/vendor_wheels_arithmetic.sh [PLATFORM] [PYTHON]
#
# PLATFORM: linux/amd64 (default) or linux/arm64, the training nodes' arch; PYTHON: the server
# venvs' Python (default 3.13, the runtime image's). The wheels are downloaded from the package
# index once, here, by `gym-runtime vendor`; they are not committed (see examples/.gitignore).
set -euo pipefail
PLATFORM="${1:-linux/amd64}"
PYTHON="${2:-3.13}"
PKG="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/wheels-arithmetic"
gym-runtime vendor "$PKG" --platform "$PLATFORM" --python "$PYTHON"
gym-runtime validate "$PKG" --platform "$PLATFORM" --python "$PYTHON"
