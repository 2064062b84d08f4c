"""The local runtime's parts, on real processes and servers."""
