"""The upload door: the streamed body, its deadlines and bounds, the wheel's checks, its blobs."""
