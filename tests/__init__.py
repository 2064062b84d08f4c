"""The test suites: unit, integration, local, e2e, infra, docs and package; support is what they share."""
