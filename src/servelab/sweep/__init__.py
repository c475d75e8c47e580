"""servelab.sweep."""
