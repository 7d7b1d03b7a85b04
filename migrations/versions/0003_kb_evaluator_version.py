"""Each kept kernel records the evaluator version that judged it, and when ``kloom kb verify``
last re-judged it.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24

Kernels kept before this revision were judged by the evaluator whose candidate shared its
process with the reference (version "1"): they get that version, so that ``kloom kb verify``
knows to judge them again.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("kb_kernels") as batch:
        batch.add_column(sa.Column("evaluator_version", sa.String(32), nullable=False, server_default="1"))
        batch.add_column(sa.Column("verified_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("kb_kernels") as batch:
        batch.drop_column("verified_at")
        batch.drop_column("evaluator_version")
