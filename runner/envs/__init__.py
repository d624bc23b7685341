"""A candidate's environment: shared dependency layers, the warm install, the environments that
reuse the host's torch."""
