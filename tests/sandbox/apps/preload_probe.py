"""What a server forked from a preloaded parent sees: prints one JSON object, waits for the file
``go`` in its own directory ($GR_TEST_OWN; at most 60 s), then exits with argv[2].

``python preload_probe.py OTHER_DIR EXIT_CODE``: OTHER_DIR is another server's writable directory;
it first imports the modules named in $GR_TEST_IMPORT (comma-separated), if any."""

import importlib
import json
import os
import sys
import time

for module in filter(None, os.environ.get("GR_TEST_IMPORT", "").split(",")):
    importlib.import_module(module)

other, code = sys.argv[1], int(sys.argv[2])
with open("/tmp/mine", "w") as f:
    f.write(os.environ.get("GR_TEST_NAME", ""))
with open(os.path.join(os.environ["GR_TEST_OWN"], "written"), "w") as f:
    f.write("by the server")
status = open("/proc/self/status").read()
try:
    os.kill(os.getppid(), 0)  # signal 0: the permission check only
    signal_parent = "allowed"
except OSError as e:
    signal_parent = e.__class__.__name__
print(
    json.dumps(
        {
            "argv": sys.argv,
            "cwd": os.getcwd(),
            "private": os.environ.get("GR_TEST_PRIVATE"),
            "tmp": sorted(os.listdir("/tmp")),
            "other_listing": sorted(os.listdir(other)) if os.path.isdir(other) else None,
            "cap_eff": status.split("CapEff:")[1].split()[0],
            "no_new_privs": status.split("NoNewPrivs:")[1].split()[0],
            "resolv": open("/etc/resolv.conf").read(),
            "preloaded": "email.mime.text" in sys.modules,
            # reference counts: a class the parent imported, and an object of the server's own
            "count_inherited": sys.getrefcount(sys.modules["email.mime.text"].MIMEText)
            if "email.mime.text" in sys.modules
            else None,
            "count_inherited_text": sys.getrefcount(sys.modules["email.mime.text"].MIMEText.__init__.__doc__)
            if "email.mime.text" in sys.modules
            else None,
            "count_own": sys.getrefcount(type("Own", (), {})),
            "count_none": sys.getrefcount(None),
            "main_name": __name__,
            "pythonpath_first": sys.path[0],
            "random": __import__("random").random(),
            "signal_parent": signal_parent,
        }
    ),
    flush=True,
)
deadline = time.monotonic() + 60
while not os.path.exists(os.path.join(os.environ["GR_TEST_OWN"], "go")) and time.monotonic() < deadline:
    time.sleep(0.05)
sys.exit(code)
