//! TLS record header view and the two cleartext handshake messages the
//! analysis reads: the ClientHello (its `server_name`) and the ServerHello
//! (version and cipher suite). Views over captured bytes, no copies; a hello
//! cut by the snap length yields what its captured part holds.

/// Record content types.
pub const CHANGE_CIPHER_SPEC: u8 = 20;
/// Alert record.
pub const ALERT: u8 = 21;
/// Handshake record.
pub const HANDSHAKE: u8 = 22;
/// Application data record (in TLS 1.3 also every encrypted handshake message).
pub const APPLICATION_DATA: u8 = 23;

/// Largest record body allowed: 2^14 plaintext plus the most expansion TLS 1.2 permits.
pub const MAX_RECORD: u16 = (1 << 14) + 2048;

/// A checked 5-byte record header: known content type, version 3.0–3.4, sane length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHeader<'a>(&'a [u8; 5]);

impl<'a> RecordHeader<'a> {
    /// The header at the start of `p`, if its 5 bytes look like one.
    #[inline]
    pub fn parse(p: &'a [u8]) -> Option<Self> {
        let h: &[u8; 5] = p.get(..5)?.try_into().ok()?;
        let ok = (CHANGE_CIPHER_SPEC..=APPLICATION_DATA).contains(&h[0])
            && h[1] == 3
            && h[2] <= 4
            && u16::from_be_bytes([h[3], h[4]]) <= MAX_RECORD;
        ok.then_some(RecordHeader(h))
    }
    /// Content type.
    #[inline]
    pub fn content_type(&self) -> u8 {
        self.0[0]
    }
    /// Record-layer version (0x0303 for TLS 1.2 and 1.3 alike).
    #[inline]
    pub fn version(&self) -> u16 {
        u16::from_be_bytes([self.0[1], self.0[2]])
    }
    /// Body length (the header's 5 bytes not included).
    #[inline]
    pub fn len(&self) -> u16 {
        u16::from_be_bytes([self.0[3], self.0[4]])
    }
    /// An empty record (legal for application data).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Handshake message types named in labels.
pub fn handshake_name(t: u8) -> Option<&'static str> {
    Some(match t {
        0 => "HelloRequest",
        1 => "ClientHello",
        2 => "ServerHello",
        4 => "NewSessionTicket",
        5 => "EndOfEarlyData",
        8 => "EncryptedExtensions",
        11 => "Certificate",
        12 => "ServerKeyExchange",
        13 => "CertificateRequest",
        14 => "ServerHelloDone",
        15 => "CertificateVerify",
        16 => "ClientKeyExchange",
        20 => "Finished",
        24 => "KeyUpdate",
        _ => return None,
    })
}

/// A cursor over captured handshake bytes: every read is checked, so a hello
/// cut short (or lying about its lengths) ends the walk instead of panicking.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (a, b) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = b;
        Some(a)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }
    /// A vector with a 1- or 2-byte length prefix.
    fn vec8(&mut self) -> Option<&'a [u8]> {
        let n = self.u8()?;
        self.take(usize::from(n))
    }
    fn vec16(&mut self) -> Option<&'a [u8]> {
        let n = self.u16()?;
        self.take(usize::from(n))
    }
    /// Extensions as (type, body), as far as captured.
    fn extensions(mut self) -> impl Iterator<Item = (u16, &'a [u8])> {
        std::iter::from_fn(move || Some((self.u16()?, self.vec16()?)))
    }
}

/// The extensions block of a hello body (`hello` starts at the handshake
/// message header), as far as captured, after skipping `skip` fixed bytes and
/// the variable fields read by `fields`.
fn hello_extensions<'a>(
    hello: &'a [u8],
    kind: u8,
    fields: impl FnOnce(&mut Cursor<'a>) -> Option<()>,
) -> Option<Cursor<'a>> {
    let mut c = Cursor(hello);
    if c.u8()? != kind {
        return None;
    }
    c.take(3 + 2 + 32)?; // length, legacy version, random
    c.vec8()?; // session id
    fields(&mut c)?;
    let n = usize::from(c.u16()?);
    // The block may be cut by the snap length: walk what is there.
    Some(Cursor(&c.0[..n.min(c.0.len())]))
}

/// The `server_name` (SNI) host name of a ClientHello message, if captured.
pub fn client_hello_sni(hello: &[u8]) -> Option<&[u8]> {
    let ext = hello_extensions(hello, 1, |c| {
        c.vec16()?; // cipher suites
        c.vec8().map(|_| ()) // compression methods
    })?;
    let (_, body) = ext.extensions().find(|(t, _)| *t == 0)?;
    let mut list = Cursor(Cursor(body).vec16()?);
    while let Some(kind) = list.u8() {
        let name = list.vec16()?;
        if kind == 0 && !name.is_empty() {
            return Some(name);
        }
    }
    None
}

/// What a ServerHello chose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerHello {
    /// The negotiated version: 0x0304 when `supported_versions` says TLS 1.3.
    pub version: u16,
    /// Cipher suite.
    pub suite: u16,
}

/// The version and cipher suite of a ServerHello message, if captured that far.
pub fn server_hello(hello: &[u8]) -> Option<ServerHello> {
    let legacy = u16::from_be_bytes([*hello.get(4)?, *hello.get(5)?]);
    let mut suite = 0;
    let ext = hello_extensions(hello, 2, |c| {
        suite = c.u16()?;
        c.u8().map(|_| ()) // compression method
    });
    let Some(ext) = ext else {
        // Cut before its extensions: a TLS 1.3 suite still says TLS 1.3.
        return (suite != 0)
            .then_some(ServerHello { version: if suite >> 8 == 0x13 { 0x0304 } else { legacy }, suite });
    };
    let chosen = ext.extensions().find(|(t, _)| *t == 43).and_then(|(_, b)| Cursor(b).u16());
    let version = chosen.unwrap_or(if suite >> 8 == 0x13 { 0x0304 } else { legacy });
    Some(ServerHello { version, suite })
}

/// Length of a TLS 1.3 Finished record's body under `suite`: the message
/// (4-byte header and the transcript hash), its inner content type and the
/// AEAD tag. `None` for suites this does not know.
pub fn tls13_finished_len(suite: u16) -> Option<u16> {
    let (hash, tag) = match suite {
        0x1301 | 0x1303 | 0x1304 => (32, 16),
        0x1302 => (48, 16),
        0x1305 => (32, 8),
        _ => return None,
    };
    Some(4 + hash + 1 + tag)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello message with the given extensions.
    fn client_hello(exts: &[(u16, Vec<u8>)]) -> Vec<u8> {
        let mut b = vec![3, 3];
        b.extend([7u8; 32]);
        b.push(32);
        b.extend([1u8; 32]);
        b.extend([0, 4, 0x13, 1, 0x13, 2]);
        b.extend([1, 0]);
        let mut e = Vec::new();
        for (t, body) in exts {
            e.extend(t.to_be_bytes());
            e.extend((body.len() as u16).to_be_bytes());
            e.extend(body);
        }
        b.extend((e.len() as u16).to_be_bytes());
        b.extend(e);
        let mut m = vec![1, 0, (b.len() >> 8) as u8, b.len() as u8];
        m.extend(b);
        m
    }

    fn sni(name: &[u8]) -> Vec<u8> {
        let mut entry = vec![0];
        entry.extend((name.len() as u16).to_be_bytes());
        entry.extend(name);
        let mut b = (entry.len() as u16).to_be_bytes().to_vec();
        b.extend(entry);
        b
    }

    #[test]
    fn record_headers_are_checked() {
        let h = RecordHeader::parse(&[22, 3, 1, 2, 0, 1]).unwrap();
        assert_eq!((h.content_type(), h.version(), h.len()), (22, 0x0301, 512));
        assert!(RecordHeader::parse(&[24, 3, 3, 0, 5]).is_none(), "unknown type");
        assert!(RecordHeader::parse(&[23, 2, 0, 0, 5]).is_none(), "SSL 2");
        assert!(RecordHeader::parse(&[23, 3, 3, 0x48, 1]).is_none(), "longer than any record");
        assert!(RecordHeader::parse(b"GET /").is_none() && RecordHeader::parse(&[23, 3, 3, 0]).is_none());
    }

    #[test]
    fn the_server_name_is_found_among_other_extensions() {
        let h = client_hello(&[(10, vec![0, 2, 0, 29]), (0, sni(b"tls.test")), (43, vec![2, 3, 4])]);
        assert_eq!(client_hello_sni(&h), Some(&b"tls.test"[..]));
        // No SNI (an IP-address URL), and a hello cut before or inside the extension.
        assert_eq!(client_hello_sni(&client_hello(&[(10, vec![0, 2, 0, 29])])), None);
        let cut = h.len() - 12;
        assert_eq!(client_hello_sni(&h[..cut]), None);
        assert_eq!(client_hello_sni(&h[..10]), None);
        // Lengths that lie point past the end: no name, no panic.
        let mut bad = client_hello(&[(0, sni(b"x.test"))]);
        let at = bad.len() - 6 - 2;
        bad[at] = 0xff;
        assert_eq!(client_hello_sni(&bad), None);
        assert_eq!(client_hello_sni(&[2, 0, 0, 4]), None, "not a ClientHello");
    }

    #[test]
    fn the_server_hello_names_version_and_suite() {
        let mut b = vec![2, 0, 0, 0, 3, 3];
        b.extend([9u8; 32]);
        b.push(0);
        b.extend([0x13, 2, 0]);
        b.extend([0, 6, 0, 43, 0, 2, 3, 4]);
        assert_eq!(server_hello(&b), Some(ServerHello { version: 0x0304, suite: 0x1302 }));
        // Cut before the extensions: the 1.3 suite still tells.
        assert_eq!(server_hello(&b[..6 + 32 + 1 + 2]), Some(ServerHello { version: 0x0304, suite: 0x1302 }));
        b[6 + 32 + 1] = 0xc0;
        b[6 + 32 + 2] = 0x2f;
        assert_eq!(server_hello(&b[..6 + 32 + 3]), Some(ServerHello { version: 0x0303, suite: 0xc02f }));
        assert_eq!(tls13_finished_len(0x1302), Some(69));
        assert_eq!(tls13_finished_len(0x1301), Some(53));
        assert_eq!(tls13_finished_len(0xc02f), None);
    }
}
