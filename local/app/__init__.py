"""The app as synthesized: what the local runtime reads from `cdk.out` and creates on the endpoint.

- `model`: the app's parts (streams, tables, functions, mappings, REST APIs), declared once.
- `template` (+ `template_api` for the REST API, `template_streams` for streams, registered
  consumers and streams named but not defined): the synthesized template read into a `model.LocalApp`.
- `properties`: which properties of what the runtime runs it honours; the rest listed as not emulated.
- `provision`: its streams (and registered consumers), tables, queues and buckets created on the
  endpoint; `client()` for any
  service on it.
- `environments`: the functions' environments, read through `shardline.aws_lambda`'s contract.
"""
