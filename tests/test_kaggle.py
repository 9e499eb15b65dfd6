"""core.io.kaggle: strict CSV parsing with line numbers, pair scoring, submission round trip."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from core.io.kaggle import (
    KaggleFormatError,
    PairRow,
    check_images_exist,
    check_submission,
    distinct_images,
    read_submission,
    read_test_csv,
    read_train_csv,
    score_pairs,
    write_submission,
)
from core.similarity import lift_to_hyperboloid, lorentz_distance

TEST_CSV = "row_id,query_image,gallery_image\n0,a.png,b.png\n1,a.png,c.png\n2,c.png,b.png\n"


# ---------------------------------------------------------------- reading


def test_read_test_csv_from_text_and_path(tmp_path: Path) -> None:
    rows = read_test_csv(TEST_CSV)
    assert rows == [PairRow("0", "a.png", "b.png"), PairRow("1", "a.png", "c.png"), PairRow("2", "c.png", "b.png")]
    assert [r.line for r in rows] == [2, 3, 4]
    p = tmp_path / "test.csv"
    p.write_text(TEST_CSV)
    assert read_test_csv(p) == rows
    assert read_test_csv(str(p)) == rows


def test_bom_whitespace_extra_columns_and_blank_lines_are_tolerated() -> None:
    text = "\ufeff row_id , gallery_image,query_image ,note\r\n\r\n 7 , g.png ,q.png, hi\r\n"
    assert read_test_csv(text) == [PairRow("7", "q.png", "g.png")]
    assert read_test_csv(text.encode("utf-8")) == [PairRow("7", "q.png", "g.png")]


@pytest.mark.parametrize(
    "text,pattern",
    [
        ("", r"<text>: file is empty"),
        ("   \n\n", r"file is empty"),
        ("row_id,query_image,gallery_image\n", r"header only, no data rows"),
        ("row_id,query_image\n0,a.png\n", r"line 1: missing column\(s\) gallery_image"),
        ("id,query_image,gallery_image\n0,a,b\n", r"line 1: missing column\(s\) row_id"),
        ("row_id,query_image,gallery_image\n0,a,b\n1,a,c\n0,b,c\n", r"line 4: duplicate row_id '0' \(first on line 2\)"),
        ("row_id,query_image,gallery_image\n0,a,b\n1, ,c\n", r"line 3: blank query_image"),
        ("row_id,query_image,gallery_image\n0,a\n", r"line 2: 2 field\(s\), the header has 3"),
        ("row_id,query_image,gallery_image,row_id\n0,a,b,0\n", r"line 1: duplicate column"),
    ],
)
def test_malformed_test_csv(text: str, pattern: str) -> None:
    with pytest.raises(KaggleFormatError, match=pattern):
        read_test_csv(text)


def test_error_names_the_file(tmp_path: Path) -> None:
    p = tmp_path / "test.csv"
    p.write_text("row_id,query_image,gallery_image\n0,a,b\n0,a,c\n")
    with pytest.raises(KaggleFormatError, match=rf"{p}, line 3: duplicate row_id"):
        read_test_csv(p)
    with pytest.raises(KaggleFormatError, match="file not found"):
        read_test_csv(tmp_path / "nope.csv")
    (tmp_path / "latin.csv").write_bytes(b"row_id,query_image,gallery_image\n0,\xe9,b\n")
    with pytest.raises(KaggleFormatError, match="not UTF-8"):
        read_test_csv(tmp_path / "latin.csv")


def test_read_train_csv() -> None:
    assert read_train_csv("filename,ground_truth\nx.png,jag_1\ny.png, jag_2 \n") == [
        ("x.png", "jag_1"),
        ("y.png", "jag_2"),
    ]
    with pytest.raises(KaggleFormatError, match="line 3: duplicate filename 'x.png'"):
        read_train_csv("filename,ground_truth\nx.png,a\nx.png,b\n")
    with pytest.raises(KaggleFormatError, match="line 2: blank ground_truth"):
        read_train_csv("filename,ground_truth\nx.png,\n")
    with pytest.raises(KaggleFormatError, match="missing column"):
        read_train_csv("filename,label\nx.png,a\n")


def test_distinct_images_first_seen_order() -> None:
    rows = read_test_csv(TEST_CSV + "3,d.png,a.png\n")
    assert distinct_images(rows) == ["a.png", "b.png", "c.png", "d.png"]


def test_check_images_exist(tmp_path: Path) -> None:
    for n in ("a.png", "b.png"):
        (tmp_path / n).write_bytes(b"x")
    check_images_exist(["a.png", "b.png"], tmp_path)
    missing = [f"m{i}.png" for i in range(15)]
    with pytest.raises(KaggleFormatError, match=r"15 image\(s\) not found: 'm0.png'.*'m2.png' \.\.\. and 12 more"):
        check_images_exist(["a.png", *missing], tmp_path, max_listed=3)
    with pytest.raises(KaggleFormatError, match="stay inside the folder"):
        check_images_exist(["../secret.png"], tmp_path)
    with pytest.raises(KaggleFormatError, match="stay inside the folder"):
        check_images_exist(["/etc/passwd"], tmp_path)
    with pytest.raises(KaggleFormatError, match="images directory not found"):
        check_images_exist(["a.png"], tmp_path / "nope")


# ---------------------------------------------------------------- scoring


def test_score_pairs_hand_case_cosine() -> None:
    rows = read_test_csv(TEST_CSV)
    names = ["c.png", "b.png", "a.png"]
    emb = np.array([[0.0, 2.0], [3.0, 4.0], [1.0, 0.0]])  # b not normalised: cos(a,b) = 0.6
    sims = score_pairs(rows, emb, names)
    np.testing.assert_allclose(sims, [0.6, 0.0, 0.8], atol=1e-6)
    assert sims.dtype == np.float32


def test_score_pairs_lorentz_is_exp_minus_distance() -> None:
    rows = read_test_csv(TEST_CSV)
    names = ["a.png", "b.png", "c.png"]
    emb = lift_to_hyperboloid(np.array([[0.0, 0.0], [1.0, 0.0], [0.0, -2.0]]))
    sims = score_pairs(rows, emb, names, metric="lorentz")
    d = lorentz_distance(emb, emb)
    np.testing.assert_allclose(sims, np.exp(-np.array([d[0, 1], d[0, 2], d[2, 1]])), rtol=1e-6)
    np.testing.assert_allclose(sims[0], np.exp(-np.arcsinh(1.0)), rtol=1e-6)  # d(origin, (sqrt2, 1, 0)) = asinh(1)


def test_dense_and_chunked_paths_agree() -> None:
    rng = np.random.default_rng(0)
    names = [f"i{k}.png" for k in range(40)]
    emb = rng.standard_normal((40, 16))
    pairs = rng.integers(40, size=(500, 2))
    rows = [PairRow(str(r), names[a], names[b]) for r, (a, b) in enumerate(pairs)]
    dense = score_pairs(rows, emb, names)
    chunked = score_pairs(rows, emb, names, dense_limit=0)
    np.testing.assert_allclose(dense, chunked, atol=1e-6)
    unit = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    np.testing.assert_allclose(dense, np.sum(unit[pairs[:, 0]] * unit[pairs[:, 1]], axis=1), atol=1e-6)


def test_score_pairs_unknown_image_and_bad_names() -> None:
    rows = read_test_csv(TEST_CSV)
    with pytest.raises(KaggleFormatError, match=r"line 3, row_id '1': 'c.png'"):
        score_pairs(rows, np.eye(2), ["a.png", "b.png"])
    with pytest.raises(ValueError, match="appears twice"):
        score_pairs(rows, np.eye(3), ["a.png", "a.png", "c.png"])
    with pytest.raises(ValueError, match="len\\(names\\)"):
        score_pairs(rows, np.eye(3), ["a.png", "b.png"])
    with pytest.raises(ValueError, match="NaN"):
        score_pairs(rows, np.array([[1.0, 0], [np.nan, 1], [0, 1]]), ["a.png", "b.png", "c.png"])


# ---------------------------------------------------------------- writing


def test_write_read_round_trip_keeps_order(tmp_path: Path) -> None:
    rows = read_test_csv("row_id,query_image,gallery_image\nz,a,b\n10,a,c\n2,b,c\n")
    sims = np.array([0.25, -0.5, 0.123456789], dtype=np.float64)
    out = tmp_path / "sub" / "submission.csv"
    write_submission(out, rows, sims)
    lines = out.read_text().splitlines()
    assert lines[0] == "row_id,similarity"
    assert [line.split(",")[0] for line in lines[1:]] == ["z", "10", "2"]
    back = read_submission(out)
    assert list(back) == ["z", "10", "2"]
    np.testing.assert_allclose(list(back.values()), sims, rtol=1e-8)
    check_submission(back, rows)
    assert list(tmp_path.joinpath("sub").iterdir()) == [out]  # no temporary file left


def test_write_submission_rejects_bad_input(tmp_path: Path) -> None:
    rows = read_test_csv(TEST_CSV)
    out = tmp_path / "s.csv"
    with pytest.raises(ValueError, match="one similarity per row"):
        write_submission(out, rows, np.zeros(2))
    with pytest.raises(ValueError, match="row_id '1'.*finite"):
        write_submission(out, rows, np.array([0.1, np.nan, 0.2]))
    with pytest.raises(ValueError, match="numeric"):
        write_submission(out, rows, np.array(["a", "b", "c"]))
    dup = [*rows, PairRow("0", "x", "y")]
    with pytest.raises(ValueError, match="row_id '0' appears more than once"):
        write_submission(out, dup, np.zeros(4))
    assert not out.exists()


def test_read_submission_rejects_non_numeric_and_checks_ids() -> None:
    with pytest.raises(KaggleFormatError, match="line 3: similarity 'high' is not a number"):
        read_submission("row_id,similarity\n0,0.5\n1,high\n")
    with pytest.raises(KaggleFormatError, match="line 2: similarity 'nan' is not finite"):
        read_submission("row_id,similarity\n0,nan\n")
    rows = read_test_csv(TEST_CSV)
    with pytest.raises(KaggleFormatError, match=r"1 row_id\(s\) missing: '2'.*1 unexpected row_id\(s\): '9'"):
        check_submission({"0": 0.1, "1": 0.2, "9": 0.3}, rows)


def test_end_to_end_small(tmp_path: Path) -> None:
    (tmp_path / "test.csv").write_text(TEST_CSV)
    rows = read_test_csv(tmp_path / "test.csv")
    names = distinct_images(rows)
    emb = np.random.default_rng(3).standard_normal((len(names), 8))
    write_submission(tmp_path / "submission.csv", rows, score_pairs(rows, emb, names))
    sub = read_submission(tmp_path / "submission.csv")
    check_submission(sub, rows)
    assert all(-1.0 <= v <= 1.0 for v in sub.values())
