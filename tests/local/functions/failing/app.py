"""Test function: fails in the ways a handler can (an exception, a result that is not JSON)."""

import os


class OrderRejected(Exception):
    pass


def raises(event, context):
    reject(event["order"])


def reject(order):
    raise OrderRejected(f"order {order} rejected")


def unserialisable(event, context):
    return {"ids": {1, 2, 3}}


def whoami(event, context):
    return {"pid": os.getpid()}
