"""Results and reports: the report assembled from the rows and stored once finished, what is kept
across builds, runner logs."""
