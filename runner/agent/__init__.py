"""The agent: the claim loop, one claimed job, the protocol client, retries, the state kept on
disk."""
