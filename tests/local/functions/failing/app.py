"""Test function: fails in the ways a handler can (an exception, a result that is not JSON), and
returns bytes (which Lambda passes through unmarshalled)."""

import os


class OrderRejected(Exception):
    pass


def raises(event, context):
    reject(event["order"])


def reject(order):
    raise OrderRejected(f"order {order} rejected")


def unserialisable(event, context):
    return {"ids": {1, 2, 3}}


def raw_bytes(event, context):
    return b"\x00not json"


def whoami(event, context):
    return {"pid": os.getpid()}
