"""API Gateway bills every request that reached the stage, whatever its answer (`local.cloudwatch.usage`);
the runtime's own routes are not the API's."""

from __future__ import annotations

from local.cloudwatch.usage import Usage
from tests.support.apigw import post_records, request


def test_every_request_to_the_stage_is_billed_whatever_its_status(start):
    usage = Usage()
    server, _ = start(usage=usage)
    server.add_route("/_shardline/runtime", lambda r: (_ for _ in ()).throw(RuntimeError("not billed")))
    assert post_records(server)[0] == 200
    assert request(server, "GET", "/v1/echo")[0] == 200
    assert request(server, "GET", "/v1/no-such-path")[0] == 403  # Missing Authentication Token
    assert request(server, "GET", "/v1/private")[0] == 403  # unsigned
    request(server, "GET", "/_shardline/runtime")  # a local route: not a request to the API
    assert usage.snapshot()["services"] == {"apigateway": {"shardline-producer": {"requests": 4}}}
