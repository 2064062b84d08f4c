"""Producer Lambda: `POST /streams/{stream}/records` behind API Gateway (REST).

Everything lives in shardline: the HTTP contract (`shardline.aws_lambda`: parsing, validation,
answers), the producer (aggregation per shard, retries, a result per record), and the wiring of
Powertools (`ProducerFunction`: REST resolver, Logger with the request id as correlation id,
Tracer, EMF Metrics, one warm Producer per stream). Identity: a record's `id`, or the request's
`Idempotency-Key` header (records without an id get `<key>:<index>`), travels with the record, and
shardline's consumers apply each id once: a request that failed as a whole may be posted again as
it was. Environment: `ProducerEnvironment`
(SHARDLINE_STREAMS, MAX_RECORDS_PER_REQUEST, MAX_BODY_BYTES) and Powertools' own variables.
"""

from shardline.aws_lambda import ProducerFunction

function = ProducerFunction()
handler = function.handler
