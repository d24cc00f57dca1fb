"""Set an inherited signal state, then exec the command (stands for a launcher that leaves it behind).
Usage: sigwrap.py ignore-chld|block-term -- COMMAND ARGS..."""

import os, signal, sys

what, cmd = sys.argv[1], sys.argv[sys.argv.index("--") + 1 :]
if what == "ignore-chld":
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
elif what == "block-term":
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
os.execvp(cmd[0], cmd)
