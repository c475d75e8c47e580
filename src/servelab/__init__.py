"""servelab: benchmark LLM serving deployments on real work."""

__version__ = "0.1.0"
