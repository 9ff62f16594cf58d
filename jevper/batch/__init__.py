"""`jevper.batch`: classify a whole table over several servers, with answers or a typed error per row.

``BatchClassifier`` is the engine-neutral core (Arrow record batches in and out, pandas as a
convenience); ``python -m jevper.batch`` is the local engine and its command line. The output's
columns are documented in docs/batch.md.
"""

from jevper.servers.console import extra_required

with extra_required("jevper.batch", "batch"):
    from jevper._upstreams import NoUpstreamError
    from jevper.batch._core import BatchClassifier, Server
    from jevper.batch._schema import ERROR_TYPE, USAGE_TYPE, flattened


__all__ = ["ERROR_TYPE", "USAGE_TYPE", "BatchClassifier", "NoUpstreamError", "Server", "flattened"]
