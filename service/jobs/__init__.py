"""Jobs and the queue: claims and leases, reruns, waking runners, which runner can take a job,
bisection runs."""
