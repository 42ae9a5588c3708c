use super::*;

/// A record of `ctype` with a `len`-byte body starting with `first`.
fn rec(ctype: u8, len: usize, first: u8) -> Vec<u8> {
    let mut r = vec![ctype, 3, 3, (len >> 8) as u8, len as u8];
    r.push(first);
    r.extend(std::iter::repeat_n(0xaa, len - 1));
    r
}

/// A ServerHello record choosing TLS 1.3 and `suite`.
fn server_hello(suite: u16) -> Vec<u8> {
    let mut b = vec![3, 3];
    b.extend([9u8; 32]);
    b.push(0);
    b.extend(suite.to_be_bytes());
    b.push(0);
    b.extend([0, 6, 0, 43, 0, 2, 3, 4]);
    let mut m = vec![2, 0, (b.len() >> 8) as u8, b.len() as u8];
    m.extend(b);
    let mut r = vec![22, 3, 3, 0, m.len() as u8];
    r.extend(m);
    r
}

/// Feeds whole segments of one side, in order, from relative sequence `seq`.
struct Feed {
    t: Tls,
    next: [i64; 2],
    frame: u64,
}

impl Feed {
    fn new() -> Feed {
        Feed { t: Tls::default(), next: [1, 1], frame: 0 }
    }
    fn seg(&mut self, side: usize, bytes: &[u8], snap: usize) -> TlsSegment {
        self.frame += 1;
        let seq = self.next[side];
        self.next[side] += bytes.len() as i64;
        let ack = Some(self.next[1 - side]);
        let cut = &bytes[..bytes.len().min(snap)];
        self.t.segment(side, self.frame, seq, bytes.len() as u32, cut, ack)
    }
}

/// The handshake of a TLS 1.3 connection (AES-256-GCM-SHA384) and its requests.
fn handshake(f: &mut Feed) -> [TlsSegment; 3] {
    let hello = f.seg(0, &rec(22, 512, 1), 1 << 20);
    let mut flight = server_hello(0x1302);
    flight.extend(rec(20, 1, 1));
    flight.extend(rec(23, 2000, 0));
    let flight = f.seg(1, &flight, 1 << 20);
    let mut fin = rec(20, 1, 1);
    fin.extend(rec(23, 69, 0));
    [hello, flight, f.seg(0, &fin, 1 << 20)]
}

#[test]
fn handshake_records_are_not_application_data() {
    let mut f = Feed::new();
    let [hello, flight, fin] = handshake(&mut f);
    assert_eq!(hello.label(), "TLS handshake (ClientHello) 517 B");
    assert_eq!(
        flight.label(),
        "TLS handshake (ServerHello) 55 B, TLS change_cipher_spec 6 B, TLS application data (encrypted handshake) 2005 B"
    );
    assert_eq!(fin.label(), "TLS change_cipher_spec 6 B, TLS application data (Finished) 74 B");
    assert_eq!((hello.app, flight.app, fin.app), (0, 0, 0));
    // The request is application data.
    let get = f.seg(0, &rec(23, 98, 0), 1 << 20);
    assert_eq!((get.app, get.label().as_str()), (103, "TLS application data 103 B"));
}

#[test]
fn records_span_segments_and_segments_hold_several() {
    let mut f = Feed::new();
    handshake(&mut f);
    f.seg(0, &rec(23, 98, 0), 1 << 20);
    // A 16 KiB record across three segments, then two records in one segment with the third cut in its header.
    let big = rec(23, 16401 - 5, 0);
    let a = f.seg(1, &big[..1448], 1 << 20);
    let b = f.seg(1, &big[1448..2896], 1 << 20);
    let mut rest = big[2896..].to_vec();
    rest.extend(rec(23, 30, 0));
    rest.extend(&rec(23, 40, 0)[..3]);
    let c = f.seg(1, &rest, 1 << 20);
    assert_eq!(a.label(), "TLS application data 16401 B");
    assert_eq!(b.label(), "TLS application data 16401 B, continued");
    assert_eq!(c.label(), "TLS application data 16401 B, continued, TLS application data 35 B");
    assert!(a.starts && !a.ends && !b.starts && !c.ends);
    // The split header is completed by the next segment.
    let d = f.seg(1, &rec(23, 40, 0)[3..], 1 << 20);
    assert_eq!((d.label().as_str(), d.starts, d.ends), ("TLS application data 45 B", false, true));
}

#[test]
fn headers_beyond_the_snap_length_are_unread_and_found_again() {
    let mut f = Feed::new();
    handshake(&mut f);
    f.seg(0, &rec(23, 98, 0), 1 << 20);
    // Header record then body record in one segment, captured 134 bytes deep.
    let mut two = rec(23, 128, 0);
    two.extend(rec(23, 617, 0));
    let s = f.seg(1, &two, 134);
    assert_eq!(s.label(), "TLS application data 133 B, 622 B not read (records not captured)");
    assert_eq!(s.app, 755, "after the handshake unread bytes are application data");
    // The next segment starts a record: in step again.
    let s = f.seg(1, &rec(23, 128, 0), 134);
    assert_eq!((s.label().as_str(), s.starts), ("TLS application data 133 B", true));
    // Not TLS at all: out of step, nothing invented.
    let s = f.seg(1, b"HTTP/1.1 200 OK\r\n", 1 << 20);
    assert!(s.starts && s.n == 0 && s.unread == 17, "{s:?}");
}

#[test]
fn two_equal_tickets_after_the_handshake_are_not_a_response() {
    let mut f = Feed::new();
    handshake(&mut f);
    f.seg(0, &rec(23, 98, 0), 1 << 20);
    // The first ticket alone: counted as response until the second confirms it.
    let t1 = f.seg(1, &rec(23, 250, 0), 1 << 20);
    assert_eq!((t1.app, t1.label().as_str()), (255, "TLS application data 255 B"));
    let mut rest = rec(23, 250, 0);
    rest.extend(rec(23, 128, 0));
    let t2 = f.seg(1, &rest, 1 << 20);
    assert_eq!(t2.label(), "TLS application data (session ticket) 255 B, TLS application data 133 B");
    assert_eq!(t2.app, 133);
    assert_eq!((f.t.take_confirmed(), f.t.take_unstart()), (Some([5, 5]), true));
    assert_eq!(f.t.hold(1, 5), TlsHold::Ticket, "a hold behind the first ticket");
    // Later records of the ticket's length are responses.
    assert_eq!(f.seg(1, &rec(23, 250, 0), 1 << 20).app, 255);
}

#[test]
fn a_ticket_sent_before_any_request_was_acknowledged_is_one() {
    let mut f = Feed::new();
    handshake(&mut f);
    let t = f.seg(1, &rec(23, 250, 0), 1 << 20);
    assert_eq!((t.app, t.label().as_str()), (0, "TLS application data (session ticket) 255 B"));
    // A lone first record of a server with no tickets stays a response.
    let mut g = Feed::new();
    handshake(&mut g);
    g.seg(0, &rec(23, 98, 0), 1 << 20);
    assert_eq!(g.seg(1, &rec(23, 128, 0), 1 << 20).app, 133);
    assert_eq!(g.seg(1, &rec(23, 617, 0), 1 << 20).app, 622);
    assert!(!g.t.take_unstart());
}

#[test]
fn a_hold_between_two_records_is_named() {
    let mut f = Feed::new();
    handshake(&mut f);
    f.seg(0, &rec(23, 98, 0), 1 << 20);
    f.seg(1, &rec(23, 500, 0), 1 << 20);
    f.seg(1, &rec(23, 900, 0), 1 << 20);
    f.seg(0, &rec(23, 98, 0), 1 << 20);
    f.seg(1, &rec(23, 128, 0), 1 << 20);
    f.seg(1, &rec(23, 617, 0), 1 << 20);
    assert_eq!(f.t.hold(1, f.frame - 1), TlsHold::Records);
    assert_eq!(f.t.hold(1, f.frame - 3), TlsHold::None, "not the segment before");
}

#[test]
fn the_server_name_is_read_from_a_hello_across_segments() {
    let name = b"tls.test";
    let mut list = vec![0, (name.len() + 3) as u8, 0, 0, name.len() as u8];
    list.extend(name);
    let mut exts = Vec::new();
    // A 1500-byte padding extension first, so the name lies in the second segment.
    exts.extend([0, 21, 0x05, 0xdc]);
    exts.extend(std::iter::repeat_n(0u8, 1500));
    exts.extend([0, 0, 0, list.len() as u8]);
    exts.extend(&list);
    let mut b = vec![3, 3];
    b.extend([7u8; 32]);
    b.extend([0, 0, 2, 0x13, 1, 1, 0]);
    b.extend((exts.len() as u16).to_be_bytes());
    b.extend(exts);
    let mut m = vec![1, 0, (b.len() >> 8) as u8, b.len() as u8];
    m.extend(b);
    let mut r = vec![22, 3, 1, (m.len() >> 8) as u8, m.len() as u8];
    r.extend(m);
    let mut f = Feed::new();
    f.seg(0, &r[..1000], 1 << 20);
    assert_eq!(f.t.sni, None);
    f.seg(0, &r[1000..], 1 << 20);
    assert_eq!(f.t.sni.as_deref(), Some("tls.test"));
}
