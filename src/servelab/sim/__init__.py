"""servelab.sim."""
