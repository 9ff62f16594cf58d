"""The server-conformance probe harness: 45 canonical requests, recorded, classified and reported."""
