"""Alembic environment: batch mode on SQLite so later ALTERs work there too.

On SQLite a batch ALTER rebuilds the table: a copy, ``DROP TABLE`` of the old one, a rename. With
foreign keys enforced that drop deletes every row that cascades from the old table (rebuilding
``jobs`` would empty ``stages``, ``findings`` and the rest), so the revisions run with them off, and
the keys are checked once before the transaction commits: a revision that leaves a dangling
reference fails and writes nothing.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from service.db import make_engine
from service.models import Base

config = context.config
target_metadata = Base.metadata


def run_migrations_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    url = config.get_main_option("sqlalchemy.url")
    assert url is not None
    engine = make_engine(url)
    with engine.connect() as connection:
        sqlite = connection.dialect.name == "sqlite"
        if sqlite:  # a no-op inside a transaction: before the migrations' own begins
            connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
            connection.commit()
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            render_as_batch=True,
            compare_type=True,
        )
        with context.begin_transaction():
            context.run_migrations()
            if sqlite:
                _no_dangling_keys(connection)
    engine.dispose()


def _no_dangling_keys(connection: Connection) -> None:
    dangling = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
    if dangling:
        raise RuntimeError(f"the migration left rows whose foreign keys dangle: {dangling[:5]}")


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
