"""The knowledge base: kb_workloads, kb_jobs, kb_kernels, kb_strategies, kb_evidence, kb_failures.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21

Self-contained (no import of ``kb.models``), so that it keeps creating exactly these tables
whatever the models become; later changes are new revisions.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
TIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "kb_workloads",
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("family", sa.String(64), nullable=False),
        sa.Column("source", sa.Text(), nullable=True),
        sa.Column("created_at", TIME, nullable=False),
        sa.PrimaryKeyConstraint("sha256", name=op.f("pk_kb_workloads")),
    )

    op.create_table(
        "kb_jobs",
        sa.Column("job_id", sa.String(100), nullable=False),
        sa.Column("workload_sha256", sa.String(64), nullable=False),
        sa.Column("workload_name", sa.String(200), nullable=False),
        sa.Column("family", sa.String(64), nullable=False),
        sa.Column("world_size", sa.Integer(), nullable=False),
        sa.Column("device", sa.String(16), nullable=False),
        sa.Column("gpu", sa.String(100), nullable=False),
        sa.Column("interconnect", sa.String(100), nullable=False),
        sa.Column("signature", JSON, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("stop_reason", sa.Text(), nullable=False),
        sa.Column("strategist", sa.String(200), nullable=False),
        sa.Column("steps", sa.Integer(), nullable=False),
        sa.Column("reference_ms", sa.Float(), nullable=True),
        sa.Column("best_speedup", sa.Float(), nullable=True),
        sa.Column("finished_at", sa.String(40), nullable=False),
        sa.Column("ingested_at", TIME, nullable=False),
        sa.PrimaryKeyConstraint("job_id", name=op.f("pk_kb_jobs")),
    )
    op.create_index(op.f("ix_kb_jobs_workload_sha256"), "kb_jobs", ["workload_sha256"])
    op.create_index(op.f("ix_kb_jobs_family"), "kb_jobs", ["family"])

    op.create_table(
        "kb_kernels",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(100), nullable=False),
        sa.Column("step_index", sa.Integer(), nullable=False),
        sa.Column("code", sa.Text(), nullable=False),
        sa.Column("code_sha256", sa.String(64), nullable=False),
        sa.Column("workload_sha256", sa.String(64), nullable=False),
        sa.Column("workload_name", sa.String(200), nullable=False),
        sa.Column("family", sa.String(64), nullable=False),
        sa.Column("collectives", sa.Text(), nullable=False),
        sa.Column("world_size", sa.Integer(), nullable=False),
        sa.Column("device", sa.String(16), nullable=False),
        sa.Column("gpu", sa.String(100), nullable=False),
        sa.Column("interconnect", sa.String(100), nullable=False),
        sa.Column("signature", JSON, nullable=False),
        sa.Column("speedup", sa.Float(), nullable=False),
        sa.Column("candidate_ms", sa.Float(), nullable=False),
        sa.Column("reference_ms", sa.Float(), nullable=False),
        sa.Column("fraction_of_floor", sa.Float(), nullable=True),
        sa.Column("evaluation", JSON, nullable=False),
        sa.Column("strategy", sa.String(100), nullable=False),
        sa.Column("params", JSON, nullable=False),
        sa.Column("plan_source", sa.String(16), nullable=False),
        sa.Column("rationale", sa.Text(), nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["kb_jobs.job_id"], name=op.f("fk_kb_kernels_job_id_kb_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_kb_kernels")),
        sa.UniqueConstraint("job_id", "step_index", name=op.f("uq_kb_kernels_job_id_step_index")),
    )
    op.create_index(op.f("ix_kb_kernels_job_id"), "kb_kernels", ["job_id"])
    op.create_index(op.f("ix_kb_kernels_code_sha256"), "kb_kernels", ["code_sha256"])
    op.create_index(op.f("ix_kb_kernels_workload_sha256"), "kb_kernels", ["workload_sha256"])
    op.create_index(op.f("ix_kb_kernels_family"), "kb_kernels", ["family"])
    op.create_index(op.f("ix_kb_kernels_strategy"), "kb_kernels", ["strategy"])

    op.create_table(
        "kb_strategies",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("family", sa.String(64), nullable=False),
        sa.Column("dominant", sa.String(16), nullable=False),
        sa.Column("hardware", sa.String(100), nullable=False),
        sa.Column("min_input_bytes", sa.BigInteger(), nullable=True),
        sa.Column("max_input_bytes", sa.BigInteger(), nullable=True),
        sa.Column("min_world_size", sa.Integer(), nullable=True),
        sa.Column("max_world_size", sa.Integer(), nullable=True),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("best_speedup", sa.Float(), nullable=True),
        sa.Column("best_params", JSON, nullable=False),
        sa.Column("wins", sa.Integer(), nullable=False),
        sa.Column("losses", sa.Integer(), nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_kb_strategies")),
        sa.UniqueConstraint(
            "name", "family", "dominant", "hardware", name=op.f("uq_kb_strategies_name_family_dominant_hardware")
        ),
    )
    op.create_index(op.f("ix_kb_strategies_name"), "kb_strategies", ["name"])

    op.create_table(
        "kb_evidence",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("strategy_id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.String(100), nullable=False),
        sa.Column("step_index", sa.Integer(), nullable=False),
        sa.Column("tries", sa.Integer(), nullable=False),
        sa.Column("won", sa.Boolean(), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("speedup", sa.Float(), nullable=True),
        sa.Column("candidate_ms", sa.Float(), nullable=True),
        sa.Column("reference_ms", sa.Float(), nullable=True),
        sa.Column("fraction_of_floor", sa.Float(), nullable=True),
        sa.Column("params", JSON, nullable=False),
        sa.Column("profile_summary", sa.Text(), nullable=False),
        sa.Column("profile", JSON, nullable=True),
        sa.Column("created_at", TIME, nullable=False),
        sa.ForeignKeyConstraint(
            ["strategy_id"], ["kb_strategies.id"], name=op.f("fk_kb_evidence_strategy_id_kb_strategies"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["job_id"], ["kb_jobs.job_id"], name=op.f("fk_kb_evidence_job_id_kb_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_kb_evidence")),
        sa.UniqueConstraint("strategy_id", "job_id", name=op.f("uq_kb_evidence_strategy_id_job_id")),
    )
    op.create_index(op.f("ix_kb_evidence_strategy_id"), "kb_evidence", ["strategy_id"])
    op.create_index(op.f("ix_kb_evidence_job_id"), "kb_evidence", ["job_id"])

    op.create_table(
        "kb_failures",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("strategy", sa.String(100), nullable=False),
        sa.Column("params_key", sa.String(32), nullable=False),
        sa.Column("params", JSON, nullable=False),
        sa.Column("signature_key", sa.String(32), nullable=False),
        sa.Column("signature", JSON, nullable=False),
        sa.Column("family", sa.String(64), nullable=False),
        sa.Column("workload_name", sa.String(200), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("first_job_id", sa.String(100), nullable=False),
        sa.Column("last_job_id", sa.String(100), nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("updated_at", TIME, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_kb_failures")),
        sa.UniqueConstraint(
            "strategy", "params_key", "signature_key", "status",
            name=op.f("uq_kb_failures_strategy_params_key_signature_key_status"),
        ),
    )
    op.create_index(op.f("ix_kb_failures_strategy"), "kb_failures", ["strategy"])
    op.create_index(op.f("ix_kb_failures_signature_key"), "kb_failures", ["signature_key"])


def downgrade() -> None:
    for table in ("kb_failures", "kb_evidence", "kb_strategies", "kb_kernels", "kb_jobs", "kb_workloads"):
        op.drop_table(table)
