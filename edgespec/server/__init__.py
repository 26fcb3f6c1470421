"""`edgespec serve`: an OpenAI-compatible HTTP server over one loaded pair that speculates.

`app.create_app` builds the ASGI app (FastAPI) around a loaded `Speculator`; `worker` runs one
generation at a time in a thread and queues the rest; `openai` holds the request and response
shapes; `metrics` the Prometheus counters; `arenas` caps glibc's malloc arenas for the
server's process.
"""

from edgespec.server.app import create_app

__all__ = ["create_app"]
