"""The app's state, one typed object: what ``create_app`` makes once and every request reads.

``ServiceState`` is set on ``app.state`` by ``create_app`` and read through ``of(app)`` (a route:
``deps.StateDep``), the only place that reads ``app.state``; nothing else is kept there. The
rooms' own objects live in their rooms and take what they need as arguments: the queue's change
event (``jobs/wake.py``), what clients hold at once (``uploads/client_limits.py``), the live
streams' poll and caps (``web/live_hub.py``), what a job's change of state sets off
(``results/events.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker
from starlette.applications import Starlette

from service.config import Settings
from service.jobs.bisection_runs import Driver
from service.jobs.wake import Wake
from service.leader import Leader
from service.outbound.notifications import Notifier
from service.results.events import Reactions
from service.uploads.client_limits import Held
from service.web.live_hub import Hub, StreamSlots

_KEY = "fe_ci"


@dataclass
class ServiceState:
    settings: Settings
    engine: Engine
    sessions: sessionmaker[Session]
    reactions: Reactions  # the settings the report is judged by, GitHub, the finished listeners
    notifier: Notifier  # the notifications outbox's delivery
    bisect: Driver  # the bisection driver
    wake: Wake  # long-polling runners woken when the queue changes, here and on other replicas
    leader: Leader  # whether this replica does the periodic work (an advisory lock on PostgreSQL)
    held: Held  # uploads and webhook bodies in flight, wheel checks at once
    live_slots: StreamSlots  # open live streams, in total and per client
    live_hub: Hub | None = None  # the one poll of the live streams, made on the first

    def install(self, app: Starlette) -> None:
        setattr(app.state, _KEY, self)


def of(app: Starlette) -> ServiceState:
    """The state ``create_app`` set on ``app``."""
    found = getattr(app.state, _KEY, None)
    if not isinstance(found, ServiceState):
        raise RuntimeError("this app was not made by service.app.create_app")
    return found
