"""Test function: sleeps for `event["seconds"]` and tells which worker ran it, and when."""

import os
import time


def handler(event, context):
    started = time.time()
    time.sleep(event.get("seconds", 0))
    return {"pid": os.getpid(), "started": started, "ended": time.time()}
