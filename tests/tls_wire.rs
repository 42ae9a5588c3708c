//! TLS on the wire in `analyze`: records named in the ladder, the server's
//! TLS name (SNI), and exchanges counted without the handshake or session
//! tickets, on real captures: tests/data/rtt/tls_two_records.pcap (TRUTH.md)
//! and tests/data/tls/tls_resume.pcap (made by tests/data/tls/make.sh; EXPECTED.md).

mod common;

use common::data;
use serde_json::Value;
use std::process::Command;

fn analyze(args: &[&str]) -> (String, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_tcpdoctor")).arg("analyze").args(args).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut json = vec!["--json"];
    json.extend(args);
    let j = Command::new(env!("CARGO_BIN_EXE_tcpdoctor")).arg("analyze").args(&json).output().unwrap();
    (String::from_utf8(out.stdout).unwrap(), serde_json::from_slice(&j.stdout).expect("JSON"))
}

/// Each row's TLS label by frame ("" for rows without one).
fn labels(ladder: &Value) -> Vec<(u64, String)> {
    let rows = ladder["rows"].as_array().unwrap();
    rows.iter().map(|r| (r["frame"].as_u64().unwrap(), r["tls"]["label"].as_str().unwrap_or("").to_string())).collect()
}

fn label_of(l: &[(u64, String)], frame: u64) -> &str {
    &l.iter().find(|r| r.0 == frame).unwrap_or_else(|| panic!("frame {frame} in {l:?}")).1
}

/// 30 GETs over one TLS 1.3 connection (TRUTH.md): 30 exchanges, not 31 (the
/// handshake is no request); every response held by Nagle, 29 as two records
/// and the first behind the server's session ticket.
#[test]
fn tls_two_records_counts_the_requests_not_the_handshake() {
    let path = data("rtt/tls_two_records.pcap");
    let (text, j) = analyze(&[path.to_str().unwrap()]);
    let f = &j["findings"][0];
    assert_eq!(f["kind"], "nagle_delayed_ack", "{f}");
    assert_eq!((f["exchanges"].as_u64(), f["stalls"].as_u64()), (Some(30), Some(30)), "{f}");
    assert_eq!((f["tls_records"].as_u64(), f["tls_ticket"].as_u64()), (Some(29), Some(1)), "{f}");
    let s = f["summary"].as_str().unwrap();
    assert!(s.starts_with("Nagle + delayed ACK: 30 of 30 responses from 198.18.0.2:8443 (server)"), "{s}");
    assert!(
        s.contains("the header and body went out as two TLS records, the second held by Nagle until the ACK"),
        "{s}"
    );
    assert!(s.contains("1 response waited behind the server's TLS session ticket"), "{s}");
    let b = &j["breakdown"][0];
    assert_eq!(b["exchanges"], 30);
    // ~64 ms per request at the client (curl): a round trip and the ACK timer; the server thinks < 1 ms.
    let (total, think) = (b["total_ms"].as_f64().unwrap(), b["think_ms"].as_f64().unwrap());
    assert!((60.0..70.0).contains(&total) && think < 1.0, "{b}");
    assert_eq!(j["connections"][0]["exchanges"], 30);
    assert!(j["connections"][0]["server_name"].is_null(), "curl sends no SNI for an address");
    assert!(text.contains("30 of 30 responses"), "{text}");
}

#[test]
fn tls_two_records_ladder_names_each_record() {
    let path = data("rtt/tls_two_records.pcap");
    let (text, j) = analyze(&[path.to_str().unwrap(), "--flow", "1", "--ladder-rows", "40"]);
    let l = labels(&j["ladder"]);
    assert_eq!(label_of(&l, 4), "TLS handshake (ClientHello) 517 B");
    // The snap length (200) cut the server's flight after its second record.
    assert_eq!(
        label_of(&l, 6),
        "TLS handshake (ServerHello) 127 B, TLS change_cipher_spec 6 B, 619 B not read (records not captured)"
    );
    assert_eq!(label_of(&l, 8), "TLS change_cipher_spec 6 B, TLS application data (Finished) 74 B");
    assert_eq!(label_of(&l, 9), "TLS application data 103 B");
    assert_eq!(label_of(&l, 10), "TLS application data (session ticket) 255 B");
    assert_eq!(label_of(&l, 15), "TLS application data 133 B");
    assert_eq!(label_of(&l, 17), "TLS application data 622 B");
    assert_eq!(label_of(&l, 1), "", "no TLS label on a SYN");
    let row = j["ladder"]["rows"].as_array().unwrap().iter().find(|r| r["frame"] == 8).unwrap();
    let recs = &row["tls"]["records"];
    assert_eq!(recs[1]["content_type"], "application data");
    assert_eq!((recs[1]["message"].as_str(), recs[1]["length"].as_u64()), (Some("Finished"), Some(74)));
    assert!(text.contains("|  TLS application data 133 B  small segment, unacknowledged"), "{text}");
}

/// Two connections, the second resumed, 5 GETs each; SNI tls.test (EXPECTED.md).
#[test]
fn resumed_sessions_count_exchanges_and_name_the_server() {
    let path = data("tls/tls_resume.pcap");
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("r.html");
    let (text, j) = analyze(&[path.to_str().unwrap(), "--html", html.to_str().unwrap()]);
    let conns = j["connections"].as_array().unwrap();
    assert_eq!(conns.len(), 2);
    for c in conns {
        assert_eq!((c["exchanges"].as_u64(), c["server_name"].as_str()), (Some(5), Some("tls.test")), "{c}");
    }
    let b = &j["breakdown"][0];
    assert_eq!((b["exchanges"].as_u64(), b["server_name"].as_str()), (Some(10), Some("tls.test")));
    let f = &j["findings"][0];
    assert_eq!((f["exchanges"].as_u64(), f["server_name"].as_str()), (Some(10), Some("tls.test")), "{f}");
    assert!(f["summary"].as_str().unwrap().contains("127.0.0.1:18443 (server, TLS name tls.test)"), "{f}");
    assert!(text.contains("127.0.0.1:18443 tls.test"), "{text}");
    // The full handshake: two tickets, the first sent before any request.
    let (_, one) = analyze(&[path.to_str().unwrap(), "--flow", "1"]);
    let l = labels(&one["ladder"]);
    assert_eq!(label_of(&l, 4), "TLS handshake (ClientHello) 242 B");
    assert!(label_of(&l, 6).starts_with("TLS handshake (ServerHello) 127 B, TLS change_cipher_spec 6 B, TLS application data (encrypted handshake) 28 B"), "{l:?}");
    assert_eq!(label_of(&l, 9), "TLS application data (session ticket) 255 B");
    assert_eq!(label_of(&l, 11), "TLS application data (session ticket) 255 B");
    assert_eq!(label_of(&l, 13), "TLS application data 133 B, TLS application data 622 B");
    // The resumed one: a shorter hello (a pre-shared key), a short flight, one ticket.
    let (_, two) = analyze(&[path.to_str().unwrap(), "--flow", "2"]);
    let l = labels(&two["ladder"]);
    assert_eq!(label_of(&l, 39), "TLS handshake (ClientHello) 518 B");
    assert_eq!(label_of(&l, 46), "TLS application data (session ticket) 255 B");
    assert_eq!(label_of(&l, 73), "TLS application data (encrypted alert) 24 B");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains("TLS handshake (ClientHello) 242 B") && page.contains("tls.test"),
        "HTML names records and server"
    );
}

/// A server name is network text: control characters are shown escaped, never sent to the terminal.
#[test]
fn a_server_name_with_control_characters_is_escaped() {
    let mut bytes = std::fs::read(data("tls/tls_resume.pcap")).unwrap();
    let at: Vec<usize> = bytes.windows(8).enumerate().filter(|(_, w)| w == b"tls.test").map(|(i, _)| i).collect();
    assert!(!at.is_empty());
    for i in at {
        bytes[i..i + 8].copy_from_slice(b"t\x1b]0;pwn");
    }
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("evil.pcap");
    std::fs::write(&p, bytes).unwrap();
    let (text, j) = analyze(&[p.to_str().unwrap()]);
    assert!(!text.contains('\x1b') && text.contains("t\\x1b]0;pwn"), "{text}");
    assert_eq!(j["connections"][0]["server_name"], "t\u{1b}]0;pwn");
}
