"""Migration 0011 (species.common_name) on the catalogue built at 0009 (tests/fixtures/catalogue_0009), on SQLite and
PostgreSQL: every row of every table kept, the new column there and empty, the audit chain intact, and on SQLite the
species table keeps its AUTOINCREMENT and the largest id it ever handed out (0010), so a merged-away species' id is
still never given again. Going back to 0010 is refused, changing nothing, while a species has a common name; with
none, it drops the column and nothing else."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, inspect, select, text

from db.audit import acting_as, audit_rows, verify_chain
from db.models import Species
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
SPECIES_LARGEST_EVER = 2  # Ocelot, merged away in the fixture


def _species_sql_and_sequence(url: str) -> tuple[str, int | None]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            sql = conn.execute(text("SELECT sql FROM sqlite_master WHERE name = 'species'")).scalar_one()
            seq = conn.execute(text("SELECT seq FROM sqlite_sequence WHERE name = 'species'")).scalar()
            return sql, seq
    finally:
        engine.dispose()


def _check_upgraded(url: str, before: dict[str, list[dict]], old_columns: dict[str, list[str]]) -> None:
    assert before["species"] and before["images"]  # the fixture's rows, not an empty database
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
        species = table_rows(engine, "species")
        assert [sp["name"] for sp in species] == ["default"]
        assert all(sp["common_name"] is None for sp in species)  # the column is there, and empty
        assert audit_chain_holds(engine) == (counts["audit_events"], None)
    finally:
        engine.dispose()
    columns = columns_at(url)
    assert columns["species"] == [*old_columns["species"], "common_name"]
    assert {t: c for t, c in columns.items() if t != "species"} == \
        {t: c for t, c in old_columns.items() if t != "species"} | \
        {t: c for t, c in columns.items() if t not in old_columns}  # no other column added or lost


def _name_the_default_species(cat) -> None:
    with acting_as("ana"), cat.unit_of_work() as s:
        sp = s.get(Species, 1)
        sp.name, sp.common_name = "Leopardus pardalis", "ocelot"
        s.commit()


def test_sqlite_catalogue_at_0009_gets_an_empty_common_name_and_keeps_everything(tmp_path):
    data_dir = copy_old_catalogue(tmp_path / "rosette-data", revision="0009")
    url = sqlite_url(data_dir / "catalogue.db")
    before, old_columns = rows_at(url, OLD.counts), columns_at(url)
    cat = open_catalogue(data_dir)  # opening migrates
    _check_upgraded(url, before, old_columns)
    sql, seq = _species_sql_and_sequence(url)
    assert "AUTOINCREMENT" in sql and seq == SPECIES_LARGEST_EVER  # 0010's guarantee survives the new column
    _name_the_default_species(cat)
    assert [r.details for r in audit_rows(cat, action="species.rename", target="species#1")] == \
        [{"name": ["default", "Leopardus pardalis"], "common_name": [None, "ocelot"]}]
    with acting_as("ana"), cat.unit_of_work() as s:
        s.add(Species(name="Panthera onca"))
        s.commit()
    with cat.unit_of_work() as s:  # not the id of Ocelot, merged away before the upgrade
        assert s.scalar(select(Species.id).where(Species.name == "Panthera onca")) == SPECIES_LARGEST_EVER + 1
    assert verify_chain(cat).ok
    cat.close()


def test_going_back_to_0010_is_refused_while_a_species_has_a_common_name_and_drops_only_the_column_after(tmp_path):
    data_dir = copy_old_catalogue(tmp_path / "rosette-data", revision="0009")
    url = sqlite_url(data_dir / "catalogue.db")
    cat = open_catalogue(data_dir)
    _name_the_default_species(cat)
    cat.close()
    named = rows_at(url, OLD.counts)
    with pytest.raises(RuntimeError, match=r"1 species has a common name \(Leopardus pardalis\)"):
        downgrade_to_revision(url, "0010")
    assert revision_at(url) == head_revision() and rows_at(url, OLD.counts) == named  # nothing changed
    assert "common_name" in columns_at(url)["species"]

    cat = open_catalogue(data_dir)
    with acting_as("ana"), cat.unit_of_work() as s:
        s.get(Species, 1).common_name = None
        s.commit()
    cat.close()
    cleared = rows_at(url, OLD.counts)
    sql_before, seq_before = _species_sql_and_sequence(url)
    downgrade_to_revision(url, "0010")
    assert revision_at(url) == "0010"
    assert "common_name" not in columns_at(url)["species"]
    after = rows_at(url, OLD.counts)
    assert after["species"] == [{k: v for k, v in row.items() if k != "common_name"} for row in cleared["species"]]
    assert {t: r for t, r in after.items() if t != "species"} == {t: r for t, r in cleared.items() if t != "species"}
    sql, seq = _species_sql_and_sequence(url)  # dropped in place: no rebuild, AUTOINCREMENT and the sequence kept
    assert "AUTOINCREMENT" in sql and seq == seq_before and "common_name" in sql_before
    open_catalogue(data_dir).close()  # and up again
    assert revision_at(url) == head_revision() and "common_name" in columns_at(url)["species"]


@pytest.mark.postgres
def test_postgres_catalogue_at_0009_gets_an_empty_common_name_and_going_back_is_refused_while_one_is_set(
        pg_db_url, tmp_path):
    load_old_catalogue_into_postgres(OLD.db, pg_db_url, revision="0009")
    before, old_columns = rows_at(pg_db_url, OLD.counts), columns_at(pg_db_url)
    data_dir = copy_old_catalogue(tmp_path / "rosette-data", revision="0009")  # the photo files, the audit head
    cat = open_catalogue(data_dir, url=pg_db_url)
    _check_upgraded(pg_db_url, before, old_columns)
    _name_the_default_species(cat)
    assert verify_chain(cat).ok
    cat.close()
    named = rows_at(pg_db_url, OLD.counts)
    with pytest.raises(RuntimeError, match="1 species has a common name"):
        downgrade_to_revision(pg_db_url, "0010")
    assert revision_at(pg_db_url) == head_revision() and rows_at(pg_db_url, OLD.counts) == named

    cat = open_catalogue(data_dir, url=pg_db_url)
    with acting_as("ana"), cat.unit_of_work() as s:
        s.get(Species, 1).common_name = None
        s.commit()
    cat.close()
    downgrade_to_revision(pg_db_url, "0010")
    assert revision_at(pg_db_url) == "0010" and "common_name" not in columns_at(pg_db_url)["species"]
    assert [sp["name"] for sp in rows_at(pg_db_url, OLD.counts)["species"]] == ["Leopardus pardalis"]
