"""The stages in order, shared by the agent and ``fe-ci validate``; the local report."""
