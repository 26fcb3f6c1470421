"""`edgespec serve`: an OpenAI-compatible HTTP server over one loaded pair that speculates."""

from edgespec.server.app import create_app

__all__ = ["create_app"]
