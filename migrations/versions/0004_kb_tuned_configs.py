"""Each kept kernel keeps the configurations Triton's autotuner chose when the judge timed it,
for the next candidate on the same GPU to start from (``kloom.tuning``).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-07

Kernels kept before this revision have none: a later job autotunes as before.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("kb_kernels") as batch:
        batch.add_column(sa.Column("tuned", JSON, nullable=False, server_default=sa.text("'[]'")))


def downgrade() -> None:
    with op.batch_alter_table("kb_kernels") as batch:
        batch.drop_column("tuned")
