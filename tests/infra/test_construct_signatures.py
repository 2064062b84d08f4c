"""Issue 42, 8: `help()` and `inspect.signature` show a construct's props, not jsii's `(*args, **kwargs)`."""

from __future__ import annotations

import inspect
import pydoc

import pytest
from constructs import Construct

from shardline import cdk

CONSTRUCTS = sorted(
    name
    for name in cdk.__all__
    if isinstance(getattr(cdk, name), type) and issubclass(getattr(cdk, name), Construct)
)


def test_every_public_construct_is_checked():
    assert set(CONSTRUCTS) >= {
        "ConsumerGroup",
        "WorkerGroup",
        "ProducerApi",
        "Stream",
        "Layers",
        "Monitoring",
    }


@pytest.mark.parametrize("name", CONSTRUCTS)
def test_8_help_of_a_construct_shows_its_props(name):
    construct = getattr(cdk, name)
    init = list(inspect.signature(construct.__init__).parameters)
    shown = inspect.signature(construct)
    assert list(shown.parameters) == init[1:]  # all of __init__'s, without self
    assert "*args" not in str(shown)
    assert f"{name}(scope: 'Construct', construct_id: 'str'" in pydoc.render_doc(
        construct, renderer=pydoc.plaintext
    )


def test_8_a_construct_made_through_the_signature_still_builds():
    import aws_cdk as core

    stack = core.Stack(core.App(), "S")
    stream = cdk.Stream(stack, "Orders", shards=1)
    assert inspect.signature(cdk.Stream).bind(stack, "Orders", shards=1)
    assert stream.stream_name is not None
