"""A candidate's sandbox: processes run with a timeout, the jail, a uid per job, the job's
directory, what of the environment goes in and what of the output comes out, warm zygotes."""
