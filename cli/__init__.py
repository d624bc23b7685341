"""The ``fe-ci`` commands; the service is imported only inside ``serve``."""
