"""Against real servers on loopback (moto server, kinesis-mock): the library over the wire."""
