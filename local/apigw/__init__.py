"""API Gateway (REST, v1, `AWS_PROXY`) on loopback.

- `server`: `ApiServer`, the HTTP server running each request through API Gateway's steps.
- `steps`: those steps (routing, validation, the proxy event, the reading of the proxy answer).
- `access`: who may call (resource policy, API keys and their usage plans).
- `sigv4`: SigV4 checking for `AWS_IAM` methods; `schema`: request-model checks.
"""
