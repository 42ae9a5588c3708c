//! The report's connection rows while a file is analysed: numbers and
//! endpoints, not strings. A busy capture closes connections by the
//! hundred thousand and the report keeps the costliest 1,024; formatting
//! each one's endpoints and id as it closed cost more than the rest of its
//! analysis (bench/RESULTS.md), so only the kept rows become text, at the end.

use super::conn_label;
use crate::record;
use crate::tcp::ConnId;
use crate::wire::Endpoint;

/// Rows kept before trimming to the costliest.
const ROWS_MAX: usize = 4096;
const ROWS_KEEP: usize = 1024;

/// One connection's row: [`record::Connection`] before its strings are made.
pub(crate) struct Row {
    /// The file's tag (with several files) and the connection's number: its id.
    pub(crate) tag: Option<usize>,
    pub(crate) id: ConnId,
    pub(crate) client: Endpoint,
    pub(crate) server: Endpoint,
    /// Every field but `id`, `client` and `server`, which are left empty.
    pub(crate) rest: record::Connection,
}

impl Row {
    /// The row as the report gives it.
    pub(crate) fn record(self) -> record::Connection {
        record::Connection {
            id: conn_label(self.tag, self.id),
            client: self.client.to_string(),
            server: self.server.to_string(),
            ..self.rest
        }
    }

    /// Orders rows as the report lists them: most time lost first, then by
    /// file and number (as the ids read, "2" before "10").
    pub(crate) fn report_order(a: &Row, b: &Row) -> std::cmp::Ordering {
        let num = |r: &Row| (r.tag.unwrap_or(0), r.id);
        b.rest.time_lost_ms.total_cmp(&a.rest.time_lost_ms).then(num(a).cmp(&num(b)))
    }
}

/// The rows of a file (or of one shard's part of it).
#[derive(Default)]
pub(crate) struct Rows {
    pub(crate) rows: Vec<Row>,
    /// Rows left out so far.
    pub(crate) omitted: u64,
}

impl Rows {
    /// Adds a closed connection's row, trimming to the costliest now and then.
    pub(crate) fn push(&mut self, row: Row) {
        self.rows.push(row);
        if self.rows.len() >= ROWS_MAX {
            self.trim();
        }
    }

    /// Connections counted: kept and left out.
    pub(crate) fn count(&self) -> u64 {
        self.rows.len() as u64 + self.omitted
    }

    /// Keeps the [`ROWS_KEEP`] costliest rows (first seen first on ties), in
    /// no order: the report sorts what is left. The order is total (first
    /// frames differ), so the rows kept do not depend on the order they came in.
    fn trim(&mut self) {
        let rows = &mut self.rows;
        if rows.len() > ROWS_KEEP {
            rows.select_nth_unstable_by(ROWS_KEEP - 1, |a, b| {
                b.rest.time_lost_ms.total_cmp(&a.rest.time_lost_ms).then(a.rest.first_frame.cmp(&b.rest.first_frame))
            });
            self.omitted += (rows.len() - ROWS_KEEP) as u64;
            rows.truncate(ROWS_KEEP);
        }
    }

    /// Once rows were left out, the report keeps the costliest [`ROWS_KEEP`]
    /// of all (not of those left when the last trim happened): the same rows
    /// however the connections were split between shards.
    pub(crate) fn finish(&mut self) {
        if self.omitted > 0 || self.rows.len() >= ROWS_MAX {
            self.trim();
        }
    }

    /// Another file's or shard's rows.
    pub(crate) fn extend(&mut self, other: Rows) {
        self.rows.extend(other.rows);
        self.omitted += other.omitted;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(first_frame: u64, lost_ms: u64) -> Row {
        let ep = Endpoint { ip: [10, 0, 0, 1].into(), port: 80 };
        Row {
            tag: None,
            id: first_frame as ConnId,
            client: ep,
            server: ep,
            rest: record::Connection {
                id: String::new(),
                client: String::new(),
                server: String::new(),
                server_name: None,
                roles_from: "handshake",
                packets: 1,
                bytes_to_server: 0,
                bytes_to_client: 0,
                exchanges: 0,
                stalls: 0,
                retransmissions: 0,
                time_lost_ms: lost_ms as f64,
                rtt_ms: None,
                capture_point: "unknown",
                rtt_to_client_ms: None,
                rtt_to_server_ms: None,
                first_frame,
                duration_ms: 0.0,
            },
        }
    }

    /// The rows kept are the costliest, the earliest among equals, whatever
    /// order the connections closed in.
    #[test]
    fn the_costliest_rows_are_kept_in_any_order_of_closing() {
        // 10,000 connections; connection n lost n % 7 ms.
        let all: Vec<u64> = (1..=10_000).collect();
        let mut want: Vec<(u64, u64)> = all.iter().map(|&f| (f % 7, f)).collect();
        want.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        want.truncate(ROWS_KEEP);
        want.sort_by_key(|w| w.1);
        let mut shuffled = all.clone();
        shuffled.sort_by_key(|&f| (f * 7919) % 10_007);
        for order in [all.clone(), all.iter().rev().copied().collect(), shuffled] {
            let mut rows = Rows::default();
            for f in order {
                rows.push(row(f, f % 7));
                assert!(rows.rows.len() < ROWS_MAX);
            }
            rows.finish();
            let mut kept: Vec<(u64, u64)> =
                rows.rows.iter().map(|r| (r.rest.time_lost_ms as u64, r.rest.first_frame)).collect();
            kept.sort_by_key(|k| k.1);
            assert_eq!(kept, want);
            assert_eq!((rows.count(), rows.rows.len()), (10_000, ROWS_KEEP));
        }
    }

    /// The report lists rows by time lost, then by file and number as
    /// numbers; ids become text only then.
    #[test]
    fn rows_are_listed_by_time_lost_then_file_and_number() {
        let mut rows = vec![row(10, 1), row(2, 1), row(5, 3)];
        rows[0].tag = Some(1);
        rows[1].tag = Some(1);
        rows[2].tag = Some(2);
        rows.push(row(3, 1));
        rows.sort_by(Row::report_order);
        let ids: Vec<String> = rows.into_iter().map(|r| r.record().id).collect();
        assert_eq!(ids, ["2:5", "3", "1:2", "1:10"]);
    }
}
