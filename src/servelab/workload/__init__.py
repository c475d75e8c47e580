"""servelab.workload."""
