"""The measurements of ``bench/time_to_verdict.py``, one concern a module: through the service and
its queue (``service_path``), installs side by side with the obvious way and the floor
(``installs``), requests per second against a minimal FastAPI app (``throughput``)."""
