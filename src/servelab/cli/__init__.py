"""servelab.cli."""
