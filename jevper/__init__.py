"""jevper: typed questions answered with a real probability distribution from any OpenAI-style server."""

__version__ = "0.1.0"

__all__ = ["__version__"]
