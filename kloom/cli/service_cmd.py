"""``kloom up``, ``kloom api``, ``kloom worker``, ``kloom db upgrade`` and ``kloom keys``: the service.

``kloom up`` is the embedded mode: migrations, then a worker process and the API (with the
dashboard) in one command, on SQLite and the filesystem broker under ``--data-dir``.
Settings come from ``KLOOM_*`` environment variables (``kloom/settings.py``); options override them.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

db_app = typer.Typer(help="The service's database.", no_args_is_help=True)
keys_app = typer.Typer(help="API keys (run where the service's database is reachable).", no_args_is_help=True)

QueuesOpt = Annotated[str | None, typer.Option("--queues", "-Q", help="Device kinds to serve, comma-separated (e.g. cpu,cuda-h200x4).")]
DataDirOpt = Annotated[Path | None, typer.Option("--data-dir", help="Embedded mode's directory (SQLite file, broker folders, admin key).")]
HostOpt = Annotated[str | None, typer.Option("--host", help="Address to listen on.")]
PortOpt = Annotated[int | None, typer.Option("--port", help="Port to listen on.")]


def _settings(**overrides):
    from kloom.settings import Settings  # lazy: settings load pydantic (a service extra)

    values = {k: v for k, v in overrides.items() if v is not None}
    return Settings(**values)


def _admin_key_file(settings) -> Path:
    """The embedded mode's admin key, made once and kept (mode 600) in the data directory."""
    from services.db.keys import new_key  # lazy: the database loads sqlalchemy

    path = settings.data_dir.resolve() / "admin_key"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(new_key() + "\n")
    return path


def _die_with_parent() -> None:
    """In the worker child of ``kloom up``: get SIGTERM when ``kloom up`` ends, however it ends
    (uvicorn re-raises the signal that stopped it, so no ``finally`` of ours runs)."""
    if sys.platform.startswith("linux"):
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _stop_worker_on_signals(supervisor, timeout_s: float = 30.0) -> None:
    """SIGTERM and SIGINT stop ``kloom up``'s worker before ``kloom up`` exits: uvicorn handles
    them while it serves, then restores these handlers and raises the signal again, so they run
    last (a ``finally`` does not: the re-raised signal ends the process). Stopping the worker
    waits for it and kills it if it will not go: a Celery worker whose pool process died under
    the same signal stayed in its warm shutdown, orphaned, after ``kloom up`` had exited."""

    def stop(signum, frame) -> None:
        supervisor.stop(timeout_s)
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)


def _serve(app_or_factory, host: str, port: int, workers: int = 1) -> None:
    import uvicorn  # lazy: uvicorn (a service extra)

    uvicorn.run(app_or_factory, host=host, port=port, workers=workers, factory=isinstance(app_or_factory, str), proxy_headers=True)


def register(app: typer.Typer) -> None:
    app.add_typer(db_app, name="db")
    app.add_typer(keys_app, name="keys")

    @app.command("up")
    def up(host: HostOpt = None, port: PortOpt = None, data_dir: DataDirOpt = None, queues: QueuesOpt = None) -> None:
        """Start the API, the dashboard and a worker in one command (embedded: SQLite, no Redis, no PostgreSQL)."""
        from pydantic import SecretStr  # lazy: pydantic (a service extra)

        from kloom.db import upgrade  # lazy: the database loads sqlalchemy
        from services.api.app import create_app  # lazy: the API loads fastapi and sqlalchemy
        from services.worker.supervisor import WorkerSupervisor  # lazy: loads sqlalchemy and pydantic

        settings = _settings(api_host=host, api_port=port, data_dir=data_dir, worker_queues=queues)
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        # The API takes jobs for the embedded worker's kinds even before the worker registers.
        settings = settings.model_copy(update={
            "data_dir": settings.data_dir.resolve(),
            "expected_device_kinds": sorted({*settings.expected_device_kinds, *settings.worker_queues}),
        })
        console = Console(stderr=True)
        upgrade(settings.db_url)
        settings.make_private()
        env = dict(os.environ, KLOOM_DATA_DIR=str(settings.data_dir), KLOOM_WORKER_SWEEP="1")
        if settings.admin_key is None:
            key_file = _admin_key_file(settings)
            key = key_file.read_text().strip()
            env["KLOOM_ADMIN_KEY"] = key
            settings = settings.model_copy(update={"admin_key": SecretStr(key)})
            console.print(f"admin API key: in [bold]{key_file}[/] (send it as 'Authorization: Bearer <key>')")
        supervisor = WorkerSupervisor(
            [sys.executable, "-c", "from kloom.cli import main; main()", "worker", "--queues", ",".join(settings.worker_queues), "--sweep"],
            env,
            settings,
            preexec_fn=_die_with_parent,
            on_restart=lambda old, new: console.print(f"[yellow]the worker (pid {old}) died; started another (pid {new})[/]"),
        )
        pid = supervisor.start()
        _stop_worker_on_signals(supervisor)
        console.print(f"kloom on http://{settings.api_host}:{settings.api_port}/ (data in {settings.data_dir}; worker pid {pid})")
        try:
            _serve(create_app(settings), settings.api_host, settings.api_port)
        finally:
            supervisor.stop()

    @app.command("api")
    def api(
        host: HostOpt = None,
        port: PortOpt = None,
        workers: Annotated[int, typer.Option(min=1, help="API processes.")] = 1,
        migrate: Annotated[bool, typer.Option(help="Apply migrations first.")] = False,
    ) -> None:
        """Serve the REST API (and the dashboard) with uvicorn."""
        settings = _settings()
        if migrate:
            from kloom.db import upgrade  # lazy: the database loads sqlalchemy

            upgrade(settings.db_url)
        if settings.sqlite_path is not None or settings.embedded_broker:
            settings.make_private()
        _serve("services.api.app:create_app", host or settings.api_host, port or settings.api_port, workers)

    @app.command("worker")
    def worker(
        queues: QueuesOpt = None,
        sweep: Annotated[bool, typer.Option("--sweep", help="Also requeue the jobs of dead workers, periodically.")] = False,
        loglevel: Annotated[str, typer.Option(help="Celery log level.")] = "INFO",
    ) -> None:
        """Run a Celery worker that takes jobs of the given device kinds, one at a time."""
        from services.worker.celery_app import create_celery_app, worker_name  # lazy: loads celery and sqlalchemy

        settings = _settings(worker_queues=queues, worker_sweep=True if sweep else None)
        if settings.sqlite_path is not None or settings.embedded_broker:
            settings.make_private()
        celery = create_celery_app(settings)
        celery.worker_main(
            [
                "worker",
                f"--queues={','.join(settings.worker_queues)}",
                f"--hostname={worker_name(settings.worker_queues)}",
                "--concurrency=1",
                "--prefetch-multiplier=1",
                "--pool=prefork",
                "--without-gossip",
                "--without-mingle",
                f"--loglevel={loglevel}",
            ]
        )

    @db_app.command("upgrade")
    def db_upgrade(revision: Annotated[str, typer.Argument(help="Target revision.")] = "head") -> None:
        """Apply the migrations (the service's prestart step; also run by ``kloom up``)."""
        from kloom.db import current_revision, upgrade  # lazy: the database loads sqlalchemy

        settings = _settings()
        upgrade(settings.db_url, revision)
        typer.echo(f"database at revision {current_revision(settings.db_url)}")

    @keys_app.command("create")
    def keys_create(
        name: Annotated[str, typer.Argument(help="Who the key is for.")],
        admin: Annotated[bool, typer.Option("--admin", help="May manage keys.")] = False,
    ) -> None:
        """Make a key and print it (the only time it is shown)."""
        from services.db.keys import create_key  # lazy: the database loads sqlalchemy

        with _sessions()() as session:
            row, key = create_key(session, name, admin=admin)
            session.commit()
        typer.echo(f"{key}\n(id {row.id}; store it now: only its hash is kept)")

    @keys_app.command("list")
    def keys_list() -> None:
        """List keys (never the keys themselves)."""
        from sqlalchemy import select  # lazy: sqlalchemy (a service extra)

        from services.db.models import ApiKey  # lazy: the database loads sqlalchemy

        with _sessions()() as session:
            rows = session.scalars(select(ApiKey).order_by(ApiKey.created_at)).all()
        table = Table()
        for col in ("id", "name", "prefix", "admin", "created", "revoked"):
            table.add_column(col)
        for r in rows:
            table.add_row(r.id, r.name, r.prefix + "…", "yes" if r.is_admin else "", f"{r.created_at:%Y-%m-%d %H:%M}", f"{r.revoked_at:%Y-%m-%d %H:%M}" if r.revoked_at else "")
        Console().print(table)

    @keys_app.command("revoke")
    def keys_revoke(key_id: Annotated[str, typer.Argument(help="The key's id (from `kloom keys list`).")]) -> None:
        """Revoke a key at once."""
        from services.db.keys import revoke  # lazy: the database loads sqlalchemy

        with _sessions()() as session:
            row = revoke(session, key_id)
            if row is None:
                typer.echo(f"no key {key_id!r}", err=True)
                raise typer.Exit(1)
            session.commit()
        typer.echo(f"revoked {row.id} ({row.name})")


def _sessions():
    from kloom.db import create_db_engine, session_factory  # lazy: the database loads sqlalchemy

    return session_factory(create_db_engine(_settings().db_url))
