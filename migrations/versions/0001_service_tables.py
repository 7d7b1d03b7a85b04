"""The service tables: api_keys, batches, jobs, steps, job_events, workers.

Revision ID: 0001
Revises:
Create Date: 2026-11-21

Self-contained (no import of the models), so that it keeps creating exactly these tables whatever
the models become; later changes are new revisions.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
TIME = sa.DateTime(timezone=True)
JOB_STATES = "('queued', 'running', 'succeeded', 'failed', 'cancelled', 'stopped')"


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("key_hash", sa.String(64), nullable=False),
        sa.Column("prefix", sa.String(16), nullable=False),
        sa.Column("is_admin", sa.Boolean(), nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("revoked_at", TIME, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_keys")),
        sa.UniqueConstraint("key_hash", name=op.f("uq_api_keys_key_hash")),
    )
    op.create_table(
        "workers",
        sa.Column("id", sa.String(200), nullable=False),
        sa.Column("hostname", sa.String(200), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("queues", JSON, nullable=False),
        sa.Column("gpus", JSON, nullable=False),
        sa.Column("profile", sa.String(64), nullable=False),
        sa.Column("started_at", TIME, nullable=False),
        sa.Column("last_heartbeat", TIME, nullable=False),
        sa.Column("stopped_at", TIME, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workers")),
    )
    op.create_index(op.f("ix_workers_last_heartbeat"), "workers", ["last_heartbeat"])

    op.create_table(
        "batches",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("owner_key_id", sa.String(32), nullable=False),
        sa.Column("suite", sa.String(200), nullable=False),
        sa.Column("settings", JSON, nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.ForeignKeyConstraint(["owner_key_id"], ["api_keys.id"], name=op.f("fk_batches_owner_key_id_api_keys")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_batches")),
    )
    op.create_index(op.f("ix_batches_owner_key_id"), "batches", ["owner_key_id"])

    op.create_table(
        "jobs",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("owner_key_id", sa.String(32), nullable=False),
        sa.Column("batch_id", sa.String(32), nullable=True),
        sa.Column("idempotency_key", sa.String(200), nullable=True),
        sa.Column("workload_name", sa.String(200), nullable=False),
        sa.Column("workload_family", sa.String(64), nullable=False),
        sa.Column("workload_source", sa.Text(), nullable=False),
        sa.Column("workload_sha256", sa.String(64), nullable=False),
        sa.Column("world_size", sa.Integer(), nullable=False),
        sa.Column("device_kind", sa.String(64), nullable=False),
        sa.Column("shapes", sa.String(32), nullable=True),
        sa.Column("strategist", sa.String(200), nullable=False),
        sa.Column("limits", JSON, nullable=False),
        sa.Column("options", JSON, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("stop_reason", sa.Text(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("worker_id", sa.String(200), nullable=True),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("num_steps", sa.Integer(), nullable=False),
        sa.Column("best_step_index", sa.Integer(), nullable=True),
        sa.Column("best_speedup", sa.Float(), nullable=True),
        sa.Column("best_fraction_of_floor", sa.Float(), nullable=True),
        sa.Column("cost_usd", sa.Float(), nullable=True),
        sa.Column("trajectory", JSON, nullable=True),
        sa.Column("event_seq", sa.Integer(), nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("dispatched_at", TIME, nullable=True),
        sa.Column("started_at", TIME, nullable=True),
        sa.Column("finished_at", TIME, nullable=True),
        sa.Column("updated_at", TIME, nullable=False),
        sa.CheckConstraint(f"state IN {JOB_STATES}", name=op.f("ck_jobs_state")),
        sa.ForeignKeyConstraint(["batch_id"], ["batches.id"], name=op.f("fk_jobs_batch_id_batches")),
        sa.ForeignKeyConstraint(["owner_key_id"], ["api_keys.id"], name=op.f("fk_jobs_owner_key_id_api_keys")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
        sa.UniqueConstraint("owner_key_id", "idempotency_key", name=op.f("uq_jobs_owner_key_id_idempotency_key")),
    )
    op.create_index(op.f("ix_jobs_batch_id"), "jobs", ["batch_id"])
    op.create_index("ix_jobs_owner_created", "jobs", ["owner_key_id", "created_at"])
    op.create_index(op.f("ix_jobs_state"), "jobs", ["state"])
    op.create_index(op.f("ix_jobs_worker_id"), "jobs", ["worker_id"])

    op.create_table(
        "job_events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(32), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("payload", JSON, nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_job_events_job_id_jobs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_events")),
        sa.UniqueConstraint("job_id", "seq", name=op.f("uq_job_events_job_id_seq")),
    )
    op.create_table(
        "steps",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(32), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("speedup", sa.Float(), nullable=True),
        sa.Column("data", JSON, nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_steps_job_id_jobs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_steps")),
        sa.UniqueConstraint("job_id", "index", name=op.f("uq_steps_job_id_index")),
    )


def downgrade() -> None:
    op.drop_table("steps")
    op.drop_table("job_events")
    op.drop_table("jobs")
    op.drop_table("batches")
    op.drop_table("workers")
    op.drop_table("api_keys")
