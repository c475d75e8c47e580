"""servelab.load."""
