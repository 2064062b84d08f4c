"""The whole local runtime, started from the synthesized app, driven over HTTP."""
