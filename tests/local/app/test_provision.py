"""Provisioning the app's resources on the endpoint: in the order AWS would accept them."""

from __future__ import annotations

from local.app import model
from local.app.provision import _waves, client, provision


def queue(name: str, dead_letters: str | None = None) -> model.Resource:
    properties = {"FifoQueue": True}
    if dead_letters is not None:
        properties["RedrivePolicy"] = {
            "deadLetterTargetArn": model.queue_arn(dead_letters),
            "maxReceiveCount": 5,
        }
    return model.Resource(name, "AWS::SQS::Queue", name, properties)


def test_a_queue_comes_after_the_dead_letter_queue_its_redrive_policy_names():
    chain = [queue("c.fifo", "b.fifo"), queue("a.fifo"), queue("b.fifo", "a.fifo")]
    assert [[r.name for r in wave] for wave in _waves(chain)] == [["a.fifo"], ["b.fifo"], ["c.fifo"]]
    outside = [queue("x.fifo", "not-in-the-app.fifo")]
    assert [[r.name for r in wave] for wave in _waves(outside)] == [["x.fifo"]]  # SQS says why


def test_queues_with_dead_letter_queues_provision_whatever_the_threads_do(local_endpoint_no_limits):
    """The endpoint refuses a RedrivePolicy naming a queue it does not have (as SQS does)."""
    for attempt in range(5):
        names = [f"p{attempt}-{n}.fifo" for n in range(6)]
        resources = [queue(name, names[n - 1] if n else None) for n, name in enumerate(names)][::-1]
        provision(model.LocalApp("s", resources=tuple(resources)), local_endpoint_no_limits)
        urls = client("sqs", local_endpoint_no_limits).list_queues(QueueNamePrefix=f"p{attempt}-")[
            "QueueUrls"
        ]
        assert len(urls) == 6
