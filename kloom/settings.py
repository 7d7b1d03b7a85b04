"""The service's settings: one pydantic-settings class, read from ``KLOOM_*`` environment variables.

Unset database and broker URLs mean the embedded mode: SQLite and kombu's filesystem transport,
both under ``data_dir`` (``docs/service.md`` says why that broker).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from kloom.workload import MAX_SOURCE_BYTES


class Settings(BaseSettings):
    """Everything the API, the workers and the sweep read from the environment."""

    model_config = SettingsConfigDict(env_prefix="KLOOM_", extra="ignore")

    #: Where the embedded mode keeps its SQLite file, its broker folders and its admin key.
    data_dir: Path = Path(".kloom")
    #: SQLAlchemy URL; None: ``sqlite:///<data_dir>/kloom.db``.
    database_url: str | None = None
    #: Celery broker URL (``redis://...`` in production); None: the filesystem transport in data_dir.
    broker_url: str | None = None
    #: Prefix of every broker key, so that tests and benchmarks can share one Redis.
    broker_key_prefix: str = ""
    #: The admin key: manages API keys. Never logged or returned.
    admin_key: SecretStr | None = None

    api_host: str = "127.0.0.1"
    api_port: int = 8000
    #: Largest workload upload, in bytes (the workload format's own limit by default).
    max_upload_bytes: int = MAX_SOURCE_BYTES
    max_world_size: int = 64
    max_iters: int = 200
    #: Directory of named imported suites (one sub-directory per suite), besides the built-in "kloom".
    suites_dir: Path | None = None
    #: Served at ``/`` when it exists.
    dashboard_dir: Path = Path(__file__).resolve().parent.parent / "services" / "api" / "dashboard"

    #: Queues (device kinds) a worker serves, e.g. ``cpu,cuda-h200x4``.
    worker_queues: Annotated[list[str], NoDecode] = Field(default_factory=lambda: ["cpu"])
    #: Whether this worker also runs the sweep of dead workers' jobs (``kloom worker --sweep``).
    worker_sweep: bool = False
    heartbeat_interval_s: float = 5.0
    #: A worker whose last heartbeat is older than this is dead: its running jobs are requeued.
    worker_dead_after_s: float = 60.0
    sweep_interval_s: float = 15.0
    #: A job is failed, not requeued, once this many workers have died running it.
    max_attempts: int = 3
    #: A job still queued this long after its task was sent is sent again (a broker that lost it).
    redispatch_after_s: float = 1800.0
    job_soft_time_limit_s: int = 6 * 3600
    job_time_limit_s: int = 6 * 3600 + 600
    #: The worker touches this file on every heartbeat (for container health checks).
    heartbeat_file: Path | None = None
    #: How often an event stream looks for new events.
    sse_poll_s: float = 0.5
    #: More paths the ranks must not see, besides the data directory, the SQLite file and the
    #: broker's folders (a deployment's logs or results, say).
    hidden_paths: Annotated[list[str], NoDecode] = Field(default_factory=list)
    #: Device kinds no worker has served yet that submissions may still name: their jobs wait,
    #: saying so, for a worker of that kind (a pool that comes later). Others are refused.
    expected_device_kinds: Annotated[list[str], NoDecode] = Field(default_factory=list)

    @field_validator("worker_queues", "hidden_paths", "expected_device_kinds", mode="before")
    @classmethod
    def _split_queues(cls, value):
        if isinstance(value, str):
            return [q.strip() for q in value.split(",") if q.strip()]
        return value

    @property
    def db_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'kloom.db').resolve()}"

    @property
    def embedded_broker(self) -> bool:
        return not self.broker_url

    @property
    def broker(self) -> str:
        return self.broker_url or "filesystem://localhost/"

    @property
    def broker_folder(self) -> Path:
        return (self.data_dir / "broker").resolve()

    @property
    def visibility_timeout_s(self) -> int:
        """Longer than the longest job, so that Redis never redelivers a task that is still running."""
        return self.job_time_limit_s + 3600

    def admin_key_value(self) -> str | None:
        return self.admin_key.get_secret_value() if self.admin_key else None

    @property
    def sqlite_path(self) -> Path | None:
        """The SQLite database file, where the database is one."""
        url = self.db_url
        return Path(url.split(":///", 1)[1]).resolve() if url.startswith("sqlite:///") else None

    def private_paths(self) -> list[str]:
        """What the ranks must never see: the data directory (admin key, SQLite file, broker's
        queue), the SQLite file wherever it is, the heartbeat file, and ``hidden_paths``."""
        paths = [self.data_dir.resolve(), self.broker_folder]
        if self.sqlite_path is not None:
            paths.append(self.sqlite_path)
        if self.heartbeat_file is not None:
            paths.append(self.heartbeat_file.resolve())
        return [str(p) for p in paths] + list(self.hidden_paths)

    def make_private(self) -> None:
        """The data directory and the SQLite file (with its journal) readable by this user alone,
        whatever the umask made them."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir.chmod(0o700)
        db = self.sqlite_path
        if db is not None:
            for path in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm"), db.with_name(db.name + "-journal")):
                if path.exists():
                    path.chmod(0o600)
