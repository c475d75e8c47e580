"""servelab.telemetry."""
