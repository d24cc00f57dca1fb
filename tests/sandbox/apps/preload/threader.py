"""A module that starts a thread when imported: a preloaded parent must not fork after it."""

import threading
import time

threading.Thread(target=time.sleep, args=(600,), name="started-at-import", daemon=True).start()
