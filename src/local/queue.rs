//! Embedded queue on SQLite with the SQS semantics the worker relies on: long polling, visibility
//! timeout, receive counts, redrive to a dead-letter queue; durable across process restarts.

use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::config::DbConfig;
use rusqlite::{Connection, OptionalExtension, params};
use tokio::sync::Notify;

use crate::ports::{Message, Queue, QueueCounts, QueueError};

/// How often a long poll looks again when nothing in this process woke it
/// (another process sent, or a visibility timeout ran out).
const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// The database file holding every embedded queue of a data directory.
#[derive(Clone)]
pub(crate) struct QueueDb {
    conn: Arc<Mutex<Connection>>,
    changed: Arc<Notify>,
    /// When the write-ahead log was last folded into the file and emptied (ms since the epoch).
    last_checkpoint_ms: Arc<AtomicI64>,
}

/// How often, at most, an empty receive folds the write-ahead log into the database file and empties it: a deleted
/// message's body (overwritten in place by `secure_delete`) then leaves the log too.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

impl std::fmt::Debug for QueueDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("QueueDb")
    }
}

/// Per-queue settings, as SQS keeps them on the queue.
#[derive(Debug, Clone)]
pub(crate) struct QueueSettings {
    pub visibility_timeout: Duration,
    /// Receives after which a message moves to the dead-letter queue instead.
    pub max_receive_count: u32,
    pub dead_letter_queue: String,
}

impl QueueDb {
    pub(crate) fn open(path: &Path) -> Result<Self, QueueError> {
        let conn =
            Connection::open(path).map_err(|e| QueueError::caused(&format!("cannot open {}", path.display()), e))?;
        // secure_delete: a deleted message's body (the prompt) is overwritten, not left in free pages of the file.
        // One plan per statement whatever its bound values: else every receive (a new `now`) prepares it again.
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true).map_err(db_error)?;
        conn.execute_batch(
            "PRAGMA journal_mode = WAL;
             PRAGMA synchronous = NORMAL;
             PRAGMA busy_timeout = 5000;
             PRAGMA secure_delete = ON;
             CREATE TABLE IF NOT EXISTS messages (
                 id INTEGER PRIMARY KEY AUTOINCREMENT,
                 queue TEXT NOT NULL,
                 body TEXT NOT NULL,
                 sent_at_ms INTEGER NOT NULL,
                 visible_at_ms INTEGER NOT NULL,
                 receive_count INTEGER NOT NULL DEFAULT 0,
                 attributes TEXT
             );
             DROP INDEX IF EXISTS messages_by_queue;
             CREATE INDEX IF NOT EXISTS messages_by_visibility ON messages (queue, visible_at_ms, id);",
        )
        .map_err(db_error)?;
        Ok(QueueDb {
            conn: Arc::new(Mutex::new(conn)),
            changed: Arc::new(Notify::new()),
            last_checkpoint_ms: Arc::new(AtomicI64::new(0)),
        })
    }

    /// A handle on one named queue of this database.
    pub(crate) fn queue(&self, name: &str, settings: QueueSettings) -> LocalQueue {
        LocalQueue { db: self.clone(), name: name.to_owned(), settings }
    }

    /// Makes every message received but not deleted visible again, in every queue of the file: for a process that
    /// holds the data directory alone, whose leases all belong to a process that is gone. Messages sent with a delay
    /// (never received) keep it. How many were taken back.
    pub(crate) fn take_back_leases(&self) -> Result<usize, QueueError> {
        let conn = self.lock()?;
        let now = now_ms();
        let taken = conn
            .execute(
                "UPDATE messages SET visible_at_ms = ?1 WHERE visible_at_ms > ?1 AND receive_count > 0",
                params![now],
            )
            .map_err(db_error)?;
        self.changed.notify_waiters();
        Ok(taken)
    }

    fn lock(&self) -> Result<MutexGuard<'_, Connection>, QueueError> {
        self.conn.lock().map_err(|_| QueueError::unavailable("queue database lock poisoned"))
    }

    /// Folds the write-ahead log into the file and truncates it, at most every [`CHECKPOINT_EVERY`]; a failure
    /// (another process reading) only postpones it.
    fn checkpoint(&self) {
        let now = now_ms();
        let last = self.last_checkpoint_ms.load(Ordering::Relaxed);
        if now - last < CHECKPOINT_EVERY.as_millis() as i64
            || self.last_checkpoint_ms.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_err()
        {
            return;
        }
        if let Ok(conn) = self.lock() {
            let _ = conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);");
        }
    }
}

/// One embedded queue. SQLite calls are short and synchronous (each statement prepared once per connection),
/// so a receive that returns has claimed its messages and one that is dropped has claimed none (safe to cancel).
#[derive(Debug, Clone)]
pub struct LocalQueue {
    db: QueueDb,
    name: String,
    settings: QueueSettings,
}

impl LocalQueue {
    /// Messages in this queue with their `ErrorReason` attribute (for a test's dead-letter inspection).
    #[cfg(feature = "test-support")]
    pub fn peek_all(&self) -> Result<Vec<(String, Option<String>)>, QueueError> {
        let conn = self.db.lock()?;
        let mut stmt = conn
            .prepare(
                "SELECT body, json_extract(attributes, '$.ErrorReason') FROM messages WHERE queue = ?1 ORDER BY id",
            )
            .map_err(db_error)?;
        let rows = stmt.query_map(params![self.name], |row| Ok((row.get(0)?, row.get(1)?))).map_err(db_error)?;
        rows.collect::<Result<_, _>>().map_err(db_error)
    }

    /// Claims up to `max` visible messages, oldest-visible first: fresh messages in the order sent, a message
    /// given back after those already waiting (best-effort order, like an SQS standard queue). The index on
    /// (queue, visible_at_ms, id) leads straight to them, past none of the messages in flight.
    fn claim(&self, max: usize) -> Result<Vec<Message>, QueueError> {
        let now = now_ms();
        let mut conn = self.db.lock()?;
        let tx = conn.transaction().map_err(db_error)?;
        let mut claimed = Vec::new();
        {
            let mut select = tx
                .prepare_cached(
                    "SELECT id, body, sent_at_ms, receive_count FROM messages
                     WHERE queue = ?1 AND visible_at_ms <= ?2 ORDER BY visible_at_ms, id",
                )
                .map_err(db_error)?;
            // The index yields rows in order, so taking `max` stops the scan there.
            let candidates: Vec<(i64, String, i64, u32)> = select
                .query_map(params![self.name, now], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
                .map_err(db_error)?
                .take(max)
                .collect::<Result<_, _>>()
                .map_err(db_error)?;
            let visible_until = now + self.settings.visibility_timeout.as_millis() as i64;
            let mut claim = tx
                .prepare_cached("UPDATE messages SET visible_at_ms = ?1, receive_count = ?2 WHERE id = ?3")
                .map_err(db_error)?;
            for (id, body, sent_at_ms, receive_count) in candidates {
                if receive_count >= self.settings.max_receive_count {
                    let attributes = serde_json::json!({
                        "ErrorReason": format!("received {receive_count} times without being deleted (maxReceiveCount)"),
                        "OriginalQueue": self.name,
                    });
                    move_to(&tx, id, &self.settings.dead_letter_queue, &attributes.to_string(), now)?;
                    continue;
                }
                let receive_count = receive_count + 1;
                claim.execute(params![visible_until, receive_count, id]).map_err(db_error)?;
                claimed.push(Message { body, receipt: format!("{id}:{receive_count}"), receive_count, sent_at_ms });
            }
        }
        tx.commit().map_err(db_error)?;
        Ok(claimed)
    }

    fn notify(&self) {
        self.db.changed.notify_waiters();
    }

    /// Inserts every body in one transaction: all are queued, or none.
    fn insert<'a>(&self, bodies: impl IntoIterator<Item = &'a str>) -> Result<(), QueueError> {
        let now = now_ms();
        let mut conn = self.db.lock()?;
        let tx = conn.transaction().map_err(db_error)?;
        {
            let mut insert = tx
                .prepare_cached("INSERT INTO messages (queue, body, sent_at_ms, visible_at_ms) VALUES (?1, ?2, ?3, ?3)")
                .map_err(db_error)?;
            for body in bodies {
                insert.execute(params![self.name, body, now]).map_err(db_error)?;
            }
        }
        tx.commit().map_err(db_error)?;
        self.notify();
        Ok(())
    }
}

#[async_trait]
impl Queue for LocalQueue {
    async fn send(&self, body: &str) -> Result<(), QueueError> {
        self.insert([body])
    }

    async fn send_many(&self, bodies: &[String]) -> Vec<Result<(), QueueError>> {
        let outcome = self.insert(bodies.iter().map(String::as_str));
        bodies.iter().map(|_| outcome.clone()).collect()
    }

    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<Message>, QueueError> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let changed = self.db.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let messages = self.claim(max)?;
            let now = tokio::time::Instant::now();
            if !messages.is_empty() {
                return Ok(messages);
            }
            if now >= deadline {
                self.db.checkpoint();
                return Ok(messages);
            }
            let nap = POLL_INTERVAL.min(deadline - now);
            let _ = tokio::time::timeout(nap, changed).await;
        }
    }

    async fn change_visibility(&self, receipt: &str, timeout: Duration) -> Result<(), QueueError> {
        let (id, receive_count) = parse_receipt(receipt)?;
        let visible_at = now_ms() + timeout.as_millis() as i64;
        let updated = self
            .db
            .lock()?
            .prepare_cached(
                "UPDATE messages SET visible_at_ms = ?1 WHERE id = ?2 AND queue = ?3 AND receive_count = ?4",
            )
            .and_then(|mut update| update.execute(params![visible_at, id, self.name, receive_count]))
            .map_err(db_error)?;
        if updated == 0 {
            return Err(QueueError::ReceiptExpired);
        }
        if timeout.is_zero() {
            self.notify();
        }
        Ok(())
    }

    async fn delete(&self, receipt: &str) -> Result<(), QueueError> {
        let (id, _) = parse_receipt(receipt)?;
        self.db
            .lock()?
            .prepare_cached("DELETE FROM messages WHERE id = ?1 AND queue = ?2")
            .and_then(|mut delete| delete.execute(params![id, self.name]))
            .map_err(db_error)?;
        Ok(())
    }

    async fn dead_letter(&self, message: &Message, reason: &str) -> Result<(), QueueError> {
        let (id, _) = parse_receipt(&message.receipt)?;
        let attributes = serde_json::json!({ "ErrorReason": reason, "OriginalQueue": self.name });
        let conn = self.db.lock()?;
        let current: Option<String> = conn
            .query_row("SELECT queue FROM messages WHERE id = ?1", params![id], |r| r.get(0))
            .optional()
            .map_err(db_error)?;
        if current.as_deref() == Some(self.name.as_str()) {
            move_to(&conn, id, &self.settings.dead_letter_queue, &attributes.to_string(), now_ms())?;
        }
        Ok(())
    }

    async fn counts(&self) -> Result<QueueCounts, QueueError> {
        let now = now_ms();
        self.db
            .lock()?
            .query_row(
                "SELECT COALESCE(SUM(visible_at_ms <= ?2), 0),
                        COALESCE(SUM(visible_at_ms > ?2 AND receive_count > 0), 0),
                        COALESCE(SUM(visible_at_ms > ?2 AND receive_count = 0), 0)
                 FROM messages WHERE queue = ?1",
                params![self.name, now],
                |r| {
                    let count = |i| r.get::<_, i64>(i).map(|n| n.max(0) as u64);
                    Ok(QueueCounts { visible: count(0)?, in_flight: count(1)?, delayed: count(2)? })
                },
            )
            .map_err(db_error)
    }

    /// A receive claims its messages in one synchronous transaction, so dropping it claims none.
    fn receive_is_cancel_safe(&self) -> bool {
        true
    }

    fn receive_is_remote(&self) -> bool {
        false
    }
}

fn move_to(conn: &Connection, id: i64, queue: &str, attributes: &str, now: i64) -> Result<(), QueueError> {
    conn.prepare_cached(
        "UPDATE messages SET queue = ?1, attributes = ?2, visible_at_ms = ?3, receive_count = 0 WHERE id = ?4",
    )
    .and_then(|mut update| update.execute(params![queue, attributes, now, id]))
    .map_err(db_error)?;
    Ok(())
}

fn parse_receipt(receipt: &str) -> Result<(i64, u32), QueueError> {
    receipt
        .split_once(':')
        .and_then(|(id, count)| Some((id.parse().ok()?, count.parse().ok()?)))
        .ok_or(QueueError::ReceiptExpired)
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn db_error(e: rusqlite::Error) -> QueueError {
    QueueError::caused("queue database", e)
}
