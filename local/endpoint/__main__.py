"""`python -m local.endpoint`: the endpoint's child program (`local.endpoint.server`)."""

from local.endpoint.server import main

main()
