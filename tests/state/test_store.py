"""State stores: ordering, idempotency, transactions, outbox — on SQLite and PostgreSQL."""

from __future__ import annotations

import multiprocessing
import sqlite3
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _processor_support import fresh_postgres_schema
from perfwatch.state import (
    OutboxEntry,
    Point,
    RunConflict,
    SeriesKey,
    StateStore,
    StoreError,
    StoreUnavailable,
    open_store,
)
from perfwatch.state.sqlite import SqliteStore, sqlite_path


@pytest.fixture
def postgres_url() -> Iterator[str]:
    yield from fresh_postgres_schema()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'state.db'}"
    return request.getfixturevalue("postgres_url")


@pytest.fixture
def store(store_url: str) -> Iterator[StateStore]:
    with open_store(store_url) as opened:
        yield opened


KEY = SeriesKey.of("db.insert", "p99_ms", {"branch": "main"})


def add(
    store: StateStore, key: SeriesKey, run_id: str, ts: float, value: float = 1.0
) -> int | None:
    with store.transaction() as tx:
        series = tx.lock_series([key])[key]
        (position,) = tx.add_points([(series, Point(run_id, value, ts, f"c-{run_id}", None))])
        tx.save_series([(series, None)])
        return position


def test_series_key_canonical_form_is_stable() -> None:
    a = SeriesKey.of("t", "m", {"env": "ci", "branch": "main"})
    b = SeriesKey.of("t", "m", {"branch": "main", "env": "ci"})
    assert a == b
    assert a.canonical == '["t","m",{"branch":"main","env":"ci"}]'
    assert SeriesKey.from_canonical(a.canonical) == a
    assert a.to_dict() == {
        "test": "t",
        "metric": "m",
        "attributes": {"branch": "main", "env": "ci"},
    }


def test_points_ordered_by_timestamp_then_arrival_and_idempotent(store: StateStore) -> None:
    assert add(store, KEY, "r1", 10.0) == 0
    assert add(store, KEY, "r2", 20.0) == 1
    assert add(store, KEY, "r3", 30.0) == 2
    assert add(store, KEY, "late", 15.0) == 1  # inserted where it belongs
    assert add(store, KEY, "tie", 20.0) == 3  # equal timestamp: after the earlier arrival
    assert add(store, KEY, "r2", 20.0) is None  # the same run again: no change
    with pytest.raises(RunConflict) as conflict:  # the run id with another time
        add(store, KEY, "r2", 99.0)
    assert conflict.value.path == "$.timestamp"
    with pytest.raises(RunConflict) as conflict:  # ... or another value
        add(store, KEY, "r2", 20.0, value=2.0)
    assert conflict.value.path == "$.metrics.p99_ms.value"
    assert "stored 1.0, now 2.0" in str(conflict.value)
    assert add(store, KEY, "first", 1.0) == 0
    points = store.series_points(KEY)
    assert [p.run_id for p in points] == ["first", "r1", "late", "r2", "tie", "r3"]
    assert points[3].timestamp == 20.0 and points[3].commit == "c-r2"
    with store.transaction() as tx:
        series = tx.lock_series([KEY])[KEY]
        assert series.length == 6
        assert [p.run_id for p in tx.points(series.series_id, 2, 4)] == ["late", "r2"]
        assert [p.run_id for p in tx.points(series.series_id, 4)] == ["tie", "r3"]


def test_series_values_of_several_series_in_series_order(store: StateStore) -> None:
    other = SeriesKey.of("db.insert", "mean_ms", {"branch": "main"})
    empty = SeriesKey.of("db.insert", "never", {"branch": "main"})
    for run_id, ts, value in [("r2", 20.0, 2.5), ("r1", 10.0, 1.5), ("r3", 30.0, 3.5)]:
        add(store, KEY, run_id, ts, value)
        add(store, other, run_id, ts, -value)
    with store.transaction() as tx:
        locked = tx.lock_series([KEY, other, empty])
        ids = [locked[key].series_id for key in (KEY, other, empty)]
        values = tx.series_values(ids)
    assert set(values) == set(ids[:2])
    np.testing.assert_array_equal(values[ids[0]], [1.5, 2.5, 3.5])
    np.testing.assert_array_equal(values[ids[1]], [-1.5, -2.5, -3.5])
    assert values[ids[0]].dtype == np.float64


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from([f"run{i}" for i in range(12)]), st.integers(0, 6)),
        max_size=30,
    )
)
def test_positions_agree_with_a_sorted_list(arrivals: list[tuple[str, int]]) -> None:
    with tempfile.TemporaryDirectory() as folder, open_store(f"sqlite:///{folder}/s.db") as store:
        model: list[tuple[int, int, str]] = []  # (timestamp, arrival, run id)
        for arrival, (run_id, ts) in enumerate(arrivals):
            stored = [stamp for stamp, _, existing in model if existing == run_id]
            if stored and stored[0] != ts:
                with pytest.raises(RunConflict):
                    add(store, KEY, run_id, float(ts))
                continue
            position = add(store, KEY, run_id, float(ts))
            if stored:
                assert position is None
                continue
            entry = (ts, arrival, run_id)
            expected = sum(1 for other in model if other < entry)
            model.insert(expected, entry)
            assert position == expected
        assert [p.run_id for p in store.series_points(KEY)] == [run for _, _, run in model]


def test_series_state_round_trip(store: StateStore) -> None:
    other = SeriesKey.of("db.insert", "mean_ms", {"branch": "main"})
    with store.transaction() as tx:
        locked = tx.lock_series([KEY, other, KEY])
        assert set(locked) == {KEY, other}
        series = locked[KEY]
        series.analyzer_params = {"window_len": 30}
        series.published = [{"index": 3, "run_id": "r3"}]
        tx.save_series([(series, b"\x00analyzer\xff")])
    with store.transaction() as tx:
        series = tx.lock_series([KEY])[KEY]
        assert series.version == 1
        assert series.analyzer_params == {"window_len": 30}
        assert series.published == [{"index": 3, "run_id": "r3"}]
        states = tx.analyzer_states([series.series_id, locked[other].series_id])
        assert states == {series.series_id: b"\x00analyzer\xff"}
    assert store.published_change_points(KEY) == [{"index": 3, "run_id": "r3"}]
    assert store.published_change_points(SeriesKey.of("nope", "x")) == []
    assert store.series_count() == 2
    assert store.series_keys() == sorted([KEY, other], key=lambda k: k.canonical)


def test_a_transaction_locks_a_series_once_and_writes_its_last_state(
    store: StateStore,
) -> None:
    """Many records of a batch in one transaction: the second lock of a series returns
    the state as the first left it, and only its last analyzer state is written."""
    with store.transaction() as tx:
        series = tx.lock_series([KEY])[KEY]
        tx.add_points([(series, Point("r1", 1.0, 1.0))])
        tx.save_series([(series, b"first")])
        again = tx.lock_series([KEY])[KEY]
        assert again is series and again.length == 1 and again.version == 1
        tx.add_points([(again, Point("r2", 2.0, 2.0))])
        series.published = [{"index": 1}]
        tx.save_series([(again, b"second")])
        # a state saved earlier in the transaction is read back as saved
        assert tx.analyzer_states([series.series_id]) == {series.series_id: b"second"}
        tx.save_series([(again, b"third")])
    with store.transaction() as tx:
        stored = tx.lock_series([KEY])[KEY]
        assert (stored.length, stored.version, stored.published) == (2, 3, [{"index": 1}])
        assert tx.analyzer_states([stored.series_id]) == {stored.series_id: b"third"}


def test_statements_too_big_for_one_go_are_split(store: StateStore) -> None:
    """A batch of wide records can touch more series than one statement takes
    parameters for (PostgreSQL: 65 535); the store splits such statements."""
    store.parameter_limit = 20  # type: ignore[attr-defined]
    if isinstance(store, SqliteStore):  # SQLite can also be made to refuse more
        store._connection.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 20)
    keys = [SeriesKey.of(f"t{i // 10}", f"m{i % 10}") for i in range(47)]
    with store.transaction() as tx:
        locked = tx.lock_series(keys)
        positions = tx.add_points(
            [(locked[k], Point("r1", float(i), 1.0)) for i, k in enumerate(keys)]
        )
        assert positions == [0] * len(keys)
        tx.save_series([(locked[k], k.canonical.encode()) for k in keys])
        ids = [locked[k].series_id for k in keys]
        values = tx.series_values(ids)
        assert [values[i].tolist() for i in ids] == [[float(i)] for i in range(len(keys))]
        states = tx.analyzer_states(ids)
        assert [states[i] for i in ids] == [k.canonical.encode() for k in keys]
        entries = [
            OutboxEntry(0, f"v{i}", "me", "change_point.detected", "s", "t", b"{}", 1.0)
            for i in range(10)
        ]
        numbers = tx.add_verdicts([*entries, entries[0]])
    assert numbers[-1] is None and sorted(numbers[:-1]) == numbers[:-1]  # type: ignore[type-var]
    with store.transaction() as tx:
        again = tx.lock_series(keys)
        assert [again[k].version for k in keys] == [1] * len(keys)
    assert store.series_count() == len(keys)


def test_verdicts_added_together_are_numbered_in_order_once_each(store: StateStore) -> None:
    def entry(verdict_id: str) -> OutboxEntry:
        return OutboxEntry(0, verdict_id, "me", "change_point.detected", "s", "t", b"{}", 1.0)

    with store.transaction() as tx:
        assert tx.add_verdict("old", "change_point.detected", b"{}", "me", "t") is not None
    with store.transaction() as tx:
        numbers = tx.add_verdicts([entry(v) for v in ("c", "old", "a", "c", "b")])
    assert numbers[1] is None and numbers[3] is None  # stored already / given twice
    first, _, second, _, third = numbers
    assert first is not None and second is not None and third is not None
    assert first < second < third
    assert [e.verdict_id for e in store.unpublished()] == ["old", "c", "a", "b"]


def test_after_commit_callbacks_run_only_after_a_commit(store: StateStore) -> None:
    calls: list[str] = []
    with pytest.raises(RuntimeError, match="boom"), store.transaction() as tx:
        tx.after_commit(lambda: calls.append("rolled back"))
        raise RuntimeError("boom")
    with store.transaction() as tx:
        tx.after_commit(lambda: calls.append("committed"))
        assert calls == []
    assert calls == ["committed"]


def test_a_failed_transaction_leaves_nothing(store: StateStore) -> None:
    with pytest.raises(RuntimeError, match="boom"), store.transaction() as tx:
        series = tx.lock_series([KEY])[KEY]
        tx.add_points([(series, Point("r1", 1.0, 1.0))])
        tx.add_verdict("v1", "change_point.detected", b"{}", "me", "db.insert", KEY.canonical)
        tx.put_blob("ns", "k", b"v")
        raise RuntimeError("boom")
    assert store.series_count() == 0
    assert store.series_points(KEY) == []
    assert store.unpublished() == []
    assert store.get_blob("ns", "k") is None


def test_outbox_deduplicates_ids_and_marks_with_the_cursor(store: StateStore) -> None:
    with store.transaction() as tx:
        assert tx.add_verdict("a1", "change_point.detected", b'{"n":1}', "proc-a", "t1", "s1")
        assert tx.add_verdict("b1", "change_point.retracted", b'{"n":2}', "proc-b", "t2", "s2")
        assert tx.add_verdict("a2", "change_point.updated", b'{"n":3}', "proc-a", "t1", "s1")
    with store.transaction() as tx:
        assert not tx.add_verdict("a1", "change_point.detected", b"{}", "proc-b", "t1", "s1")
    assert [e.verdict_id for e in store.unpublished()] == ["a1", "b1", "a2"]
    mine = store.unpublished(owner="proc-a")
    assert [e.verdict_id for e in mine] == ["a1", "a2"]
    assert mine[0].seq < mine[1].seq
    assert mine[0].document == b'{"n":1}' and mine[0].partition_key == "t1"
    assert store.unpublished(created_before=mine[0].created_at) == []
    assert store.max_verdict_seq("proc-a") == mine[1].seq
    assert store.max_verdict_seq("nobody") == 0
    store.mark_published(["a1", "a2"], cursor=("proc-a", b"message-id"))
    assert store.max_verdict_seq("proc-a") == mine[1].seq  # published ones count too
    assert [e.verdict_id for e in store.unpublished()] == ["b1"]
    assert store.get_blob("outbox-cursor", "proc-a") == b"message-id"
    history = list(store.verdicts())
    assert [e.verdict_id for e in history] == ["a1", "b1", "a2"]
    assert history[0].published_at is not None and history[1].published_at is None
    assert [e.verdict_id for e in store.verdicts(kind="change_point.updated")] == ["a2"]


def test_verdict_history_by_series(store: StateStore) -> None:
    with store.transaction() as tx:
        tx.add_verdict("x", "change_point.detected", b"{}", "p", "t", KEY.canonical)
        tx.add_verdict("y", "change_point.detected", b"{}", "p", "t", "other")
    assert [e.verdict_id for e in store.verdicts(series_key=KEY)] == ["x"]


def test_blobs_overwrite(store: StateStore) -> None:
    with store.transaction() as tx:
        tx.put_blob("counter-baseline", "db.insert", b"one")
        tx.put_blob("counter-baseline", "db.insert", b"two")
        assert tx.get_blob("counter-baseline", "db.insert") == b"two"
    assert store.get_blob("counter-baseline", "db.insert") == b"two"
    assert store.get_blob("counter-baseline", "other") is None


def test_reopen_keeps_data_and_does_not_migrate_twice(store_url: str) -> None:
    with open_store(store_url) as first:
        add(first, KEY, "r1", 1.0)
    with open_store(store_url) as second:
        assert [p.run_id for p in second.series_points(KEY)] == ["r1"]


def test_refuses_a_newer_schema(store_url: str) -> None:
    with open_store(store_url) as store, store.transaction() as tx:
        tx.execute(  # type: ignore[attr-defined]
            "UPDATE meta SET value = ? WHERE key = 'schema_version'", ("99",)
        )
    with pytest.raises(StoreError, match="schema version 99 is newer"):
        open_store(store_url)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://x", "unsupported state store URL"),
        ("sqlite:///{tmp}/s.db?synchronous=sometimes", "synchronous must be one of"),
        ("sqlite:///{tmp}/s.db?journal=off", "unknown option(s) journal"),
        ("sqlite:///{tmp}/file/under/a/file.db", "cannot open the state store"),
    ],
)
def test_bad_urls_are_reported(tmp_path: Path, url: str, message: str) -> None:
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(StoreError, match=None) as raised:
        open_store(url.format(tmp=tmp_path))
    assert message in str(raised.value)


def test_a_sqlite_path_may_start_at_the_home_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path.parent)
    with open_store("sqlite:///~/home.db") as store:
        add(store, KEY, "r1", 1.0)
    assert (tmp_path / "home.db").is_file()
    assert not (tmp_path.parent / "~").exists()  # not a folder named "~"
    # "./~/" is the escape for a folder named "~", and "~user/" is no home folder
    assert sqlite_path("sqlite:///./~/x.db") == Path("~/x.db")
    assert sqlite_path("sqlite:///~nobody/x.db") == Path("~nobody/x.db")


@pytest.mark.postgres
def test_postgres_series_lock_serialises_two_processors(postgres_url: str) -> None:
    events: list[str] = []
    holding = threading.Event()

    def first(store: StateStore) -> None:
        with store.transaction() as tx:
            tx.lock_series([KEY])
            holding.set()
            time.sleep(0.3)
            events.append("first commits")

    def second(store: StateStore) -> None:
        holding.wait(10)
        with store.transaction() as tx:
            tx.lock_series([KEY])
            events.append("second holds the lock")

    run_concurrently(postgres_url, [first, second])
    assert events == ["first commits", "second holds the lock"]


@pytest.mark.postgres
def _open_and_close(url: str) -> str:
    try:
        open_store(url).close()
    except Exception as err:  # reported to the test, not raised in a worker
        return f"{type(err).__name__}: {err}"
    return "ok"


def test_postgres_stores_opened_at_once_all_start(postgres_url: str) -> None:
    """Processors starting together wait for each other's migration check; each
    must read the schema version, not the result of the lock it waited for."""
    open_store(postgres_url).close()
    context = multiprocessing.get_context("spawn")  # no copies of the test process's threads
    with ProcessPoolExecutor(4, mp_context=context) as pool:
        outcomes = Counter(pool.map(_open_and_close, [postgres_url] * 300))
    assert outcomes == {"ok": 300}


def test_postgres_concurrent_writers_lose_no_point(postgres_url: str) -> None:
    keys = [SeriesKey.of("t", f"m{i}") for i in range(4)]

    def writer(prefix: str) -> Callable[[StateStore], None]:
        def write(store: StateStore) -> None:
            for i in range(25):
                with store.transaction() as tx:
                    # Both writers touch all keys, listed in opposite orders.
                    ordered = keys if prefix == "a" else keys[::-1]
                    locked = list(tx.lock_series(ordered).values())
                    point = Point(f"{prefix}{i}", float(i), float(i))
                    tx.add_points([(series, point) for series in locked])
                    tx.save_series([(series, None) for series in locked])

        return write

    run_concurrently(postgres_url, [writer("a"), writer("b")])
    with open_store(postgres_url) as store:
        for key in keys:
            points = store.series_points(key)
            assert len(points) == 50
            assert [p.timestamp for p in points] == sorted(p.timestamp for p in points)


def run_concurrently(url: str, jobs: list[Callable[[StateStore], None]]) -> None:
    errors: list[BaseException] = []
    stores = [open_store(url) for _ in jobs]

    def guarded(job: Callable[[StateStore], None], store: StateStore) -> None:
        try:
            job(store)
        except BaseException as err:
            errors.append(err)

    threads = [
        threading.Thread(target=guarded, args=pair) for pair in zip(jobs, stores, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for store in stores:
        store.close()
    assert not errors, errors


@pytest.mark.postgres
def test_postgres_connection_lost_is_one_line_without_the_password(postgres_url: str) -> None:
    """`serve` reports a lost store as its one error line: libpq's message has its hint
    on lines of their own, and the URL it was opened with may carry the password."""
    import psycopg

    with_password = postgres_url.replace(
        "postgresql://perfwatch@", "postgresql://perfwatch:s3cret@"
    )
    assert "s3cret" in with_password, "the test server's URL names the user perfwatch"
    with open_store(with_password) as store:
        backend = store._connection.info.backend_pid  # type: ignore[attr-defined]
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (backend,))
        with pytest.raises(StoreUnavailable) as raised:
            add(store, KEY, "r1", 1.0)
    message = str(raised.value)
    assert "\n" not in message
    assert "s3cret" not in message
    assert "***" in message


@pytest.mark.postgres
def test_postgres_store_answers_again_after_its_connection_was_lost(postgres_url: str) -> None:
    """The dashboard keeps one store open: after a database restart its /healthz and pages
    failed for good ("the connection is closed") until the dashboard itself restarted."""
    import psycopg

    with open_store(postgres_url) as store:
        add(store, KEY, "r1", 1.0)
        backend = store._connection.info.backend_pid  # type: ignore[attr-defined]
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (backend,))
        with pytest.raises(StoreUnavailable):
            store.series_count()
        assert store.series_count() == 1
        add(store, KEY, "r2", 2.0)
        assert [point.run_id for point in store.series_points(KEY)] == ["r1", "r2"]
