"""The local runtime: shardline on one machine, on loopback (grows with later issues)."""
