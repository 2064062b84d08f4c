"""`python -m local.endpoint`: the endpoint's child program (`local.endpoint.server`)."""

from .server import main

main()
