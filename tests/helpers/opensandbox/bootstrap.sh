#!/bin/sh
# Test stand-in for OpenSandbox's execd bootstrap (docs/runtime.md, "What the tests cover, and what they do not"): the server copies this file
# and `execd` into /opt/opensandbox/ of every sandbox and makes this the entrypoint, the sandbox's
# own entrypoint as its arguments. Start the agent in the background, then become the entrypoint.
"$(dirname "$0")/execd" &
exec "$@"
