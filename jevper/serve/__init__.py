"""`python -m jevper.serve`: a System One endpoint (POST /v1/systemone) in front of any OpenAI-style server.

The questions of a request are answered by ``AsyncSystemOneClient`` over the upstream's Chat
Completions, Responses or Messages surface; the answers go back in the System One API's shape. Built on
Starlette and served by Uvicorn (the `serve` extra).
"""

from jevper.servers.console import extra_required

with extra_required("jevper.serve", "serve"):
    from jevper.serve.app import Gateway, create_app
    from jevper.serve.config import GatewayConfig


__all__ = ["Gateway", "GatewayConfig", "create_app"]
