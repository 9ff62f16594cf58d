"""The server-conformance probe harness: a catalogue of requests (the canonical ones and more), recorded,
classified and reported."""
