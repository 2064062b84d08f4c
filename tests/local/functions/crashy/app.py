"""Test function: its process dies mid-invocation (an exit, a signal) unless asked for its pid."""

import os
import signal
import sys


def handler(event, context):
    how = event.get("how")
    if how == "exit":
        os._exit(3)
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if how == "sys.exit":
        sys.exit(2)
    return {"pid": os.getpid()}
