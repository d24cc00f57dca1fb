"""A server that leaves descendants: a plain child and a double-forked setsid 'daemon'; then sleeps."""

import os
import subprocess
import sys
import time

subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(600)
    os._exit(0)
print("forked", flush=True)
time.sleep(600)
