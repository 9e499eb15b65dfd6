"""Migration 0012 (flank_link_decisions) on the catalogue built at 0009 (tests/fixtures/catalogue_0009), on SQLite
and PostgreSQL: every row of every table kept, no column of an older table added or lost, the new table there and
empty, the audit chain intact, and the table usable at once (a rejected pair recorded). Going back to 0011 is
refused, changing nothing, while a rejected pair stands; with none, it drops the table and nothing else."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine

from db.audit import acting_as, verify_chain
from db.models import FlankLinkDecision, FlankLinkKind, Individual
from db.session import head_revision, open_catalogue
from tests.old_catalogue import (
    columns_at,
    revision_at,
    rows_at,
    OLD_CATALOGUES,
    audit_chain_holds,
    copy_old_catalogue,
    downgrade_to_revision,
    load_old_catalogue_into_postgres,
    revision_of,
    sqlite_url,
    table_counts,
    table_rows,
)

OLD = OLD_CATALOGUES["0009"]
TABLE = "flank_link_decisions"


def _check_upgraded(url: str, before: dict[str, list[dict]], old_columns: dict[str, list[str]]) -> None:
    assert before["individuals"] and before["images"]  # the fixture's rows, not an empty database
    engine = create_engine(url)
    try:
        assert revision_of(engine) == head_revision()
        counts = table_counts(engine)
        for table, n in OLD.counts.items():
            if table != "audit_events":
                assert counts[table] == n, table
        for table, rows in before.items():
            after = table_rows(engine, table)
            if table != "audit_events":
                assert len(after) == len(rows), table
            assert [{k: row[k] for k in rows[0]} for row in after[:len(rows)]] == rows, table
        assert table_rows(engine, TABLE) == []
        assert audit_chain_holds(engine) == (counts["audit_events"], None)
    finally:
        engine.dispose()
    columns = columns_at(url)
    assert columns[TABLE] == ["id", "left_individual_id", "right_individual_id", "decision", "probability",
                              "job_id", "identity_event_id", "user", "created_at", "undone_at"]
    for table, names in old_columns.items():  # an older table keeps its columns (a later migration may add some)
        assert columns[table][:len(names)] == names, table


def _reject_a_pair(cat) -> None:
    with acting_as("ana"), cat.unit_of_work() as s:
        a, b = s.query(Individual).filter(Individual.active).order_by(Individual.id).limit(2).all()
        s.add(FlankLinkDecision(left_individual_id=a.id, right_individual_id=b.id, decision=FlankLinkKind.rejected,
                                probability=0.4, user="ana"))
        s.commit()


def _forget_the_pair(cat) -> None:
    with acting_as("ana"), cat.unit_of_work() as s:
        for row in s.query(FlankLinkDecision):
            row.undone_at = row.created_at
        s.commit()


def test_sqlite_catalogue_at_0009_gets_an_empty_flank_links_table_and_keeps_everything(tmp_path):
    data_dir = copy_old_catalogue(tmp_path / "rosette-data", revision="0009")
    url = sqlite_url(data_dir / "catalogue.db")
    before, old_columns = rows_at(url, OLD.counts), columns_at(url)
    assert TABLE not in old_columns
    cat = open_catalogue(data_dir)  # opening migrates
    _check_upgraded(url, before, old_columns)
    _reject_a_pair(cat)
    assert verify_chain(cat).ok  # the answer is audited in the chain
    cat.close()
    kept = rows_at(url, OLD.counts)
    with pytest.raises(RuntimeError, match="1 rejected flank pair stands"):
        downgrade_to_revision(url, "0011")
    assert revision_at(url) == head_revision() and rows_at(url, OLD.counts) == kept and TABLE in columns_at(url)  # nothing changed
    cat = open_catalogue(data_dir)
    _forget_the_pair(cat)
    cat.close()
    forgotten = rows_at(url, OLD.counts)
    downgrade_to_revision(url, "0011")
    assert revision_at(url) == "0011" and TABLE not in columns_at(url)
    assert rows_at(url, OLD.counts) == forgotten  # every other row as it was
    open_catalogue(data_dir).close()  # and up again
    assert revision_at(url) == head_revision() and TABLE in columns_at(url)


@pytest.mark.postgres
def test_postgres_catalogue_at_0009_gets_the_table_and_going_back_is_refused_while_a_pair_stands(pg_db_url, tmp_path):
    load_old_catalogue_into_postgres(OLD.db, pg_db_url, revision="0009")
    before, old_columns = rows_at(pg_db_url, OLD.counts), columns_at(pg_db_url)
    data_dir = copy_old_catalogue(tmp_path / "rosette-data", revision="0009")  # the photo files, the audit head
    cat = open_catalogue(data_dir, url=pg_db_url)
    _check_upgraded(pg_db_url, before, old_columns)
    _reject_a_pair(cat)
    assert verify_chain(cat).ok
    cat.close()
    kept = rows_at(pg_db_url, OLD.counts)
    with pytest.raises(RuntimeError, match="1 rejected flank pair stands"):
        downgrade_to_revision(pg_db_url, "0011")
    assert revision_at(pg_db_url) == head_revision() and rows_at(pg_db_url, OLD.counts) == kept
    cat = open_catalogue(data_dir, url=pg_db_url)
    _forget_the_pair(cat)
    cat.close()
    downgrade_to_revision(pg_db_url, "0011")
    assert revision_at(pg_db_url) == "0011" and TABLE not in columns_at(pg_db_url)
