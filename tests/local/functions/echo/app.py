"""Test function: answers with its event; `count` shows the module is imported once per worker."""

import os

INVOCATIONS = 0


def handler(event, context):
    return event


def count(event, context):
    global INVOCATIONS
    INVOCATIONS += 1
    return {"count": INVOCATIONS, "pid": os.getpid()}
