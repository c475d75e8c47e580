"""servelab.report."""
