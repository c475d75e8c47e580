"""servelab.analysis."""
