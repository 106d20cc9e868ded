//! The statement pieces' placeholders, as each engine numbers them.

use super::{Builder, numbered};

#[test]
fn a_built_statement_has_bare_placeholders_numbered_in_order_for_postgres() {
    let mut b = Builder::new("INSERT INTO t (a, b) ");
    b.push_values([(1i64, "x"), (2, "y")], |row, (a, s)| {
        row.push_bind(a).push_bind(s.to_string());
    });
    b.push(" ON CONFLICT DO NOTHING WHERE a > ").push_bind(0i64);
    let q = b.build();
    // Bare, not ?N: SQLite searches a list of named ones once per value bound.
    assert_eq!(
        q.sql,
        "INSERT INTO t (a, b) VALUES (?, ?), (?, ?) ON CONFLICT DO NOTHING WHERE a > ?"
    );
    assert_eq!(q.args.len(), 5);
    assert_eq!(
        numbered(&q.sql),
        "INSERT INTO t (a, b) VALUES ($1, $2), ($3, $4) ON CONFLICT DO NOTHING WHERE a > $5"
    );
}

#[test]
fn placeholders_are_numbered_as_sqlite_numbers_them() {
    assert_eq!(numbered("a = ? AND b = ?"), "a = $1 AND b = $2");
    assert_eq!(
        numbered("a = ?1 OR ?1 IS NULL, ?2"),
        "a = $1 OR $1 IS NULL, $2"
    );
    assert_eq!(numbered("?2, ?, ?1, ?"), "$2, $3, $1, $4");
    assert_eq!(numbered("x = '?' AND y = ?"), "x = '?' AND y = $1");
    assert_eq!(numbered("x = 'it''s ?' || ?"), "x = 'it''s ?' || $1");
    assert_eq!(numbered("\"a?\" = ?10"), "\"a?\" = $10");
}
