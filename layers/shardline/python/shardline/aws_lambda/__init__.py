"""Lambda adapters: the producer's HTTP contract, the consumer function, metrics as EMF."""

from __future__ import annotations

from shardline._lazy import lazy_exports

_EXPORTS = {
    "ConsumerFunction": "_consumer_function",
    "publish_metrics": "_emf",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
