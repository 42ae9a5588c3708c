//! TLS on the client side (`bench`, `diagnose`): rustls with the ring
//! provider, SNI from the URL's host (none for an address, as browsers and
//! curl do), ALPN `http/1.1`, and certificate problems in words.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::sync::Arc;

/// Which server certificates to accept.
#[derive(Clone, Debug, Default)]
pub enum Trust {
    /// Those signed by a CA in the system's store (as curl does by default).
    #[default]
    System,
    /// Those signed by one of these CAs only (`--cacert FILE`, or the lab's own).
    Roots(Vec<CertificateDer<'static>>),
    /// Any (`-k/--insecure`): the connection is encrypted but the server unchecked.
    Insecure,
}

impl Trust {
    /// How certificates are checked, in words (for reports).
    pub fn words(&self) -> &'static str {
        match self {
            Trust::System => "checked against the system's CA store",
            Trust::Roots(_) => "checked against --cacert",
            Trust::Insecure => "not checked (-k)",
        }
    }
}

/// The certificates in a PEM file's bytes (`--cacert`); an error when there is none.
pub fn parse_pem(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("not a PEM certificate file ({e})"))?;
    if certs.is_empty() {
        return Err("no PEM certificate in it (expected -----BEGIN CERTIFICATE-----)".into());
    }
    Ok(certs)
}

/// Everything a connection to one https URL needs, built once per run.
#[derive(Clone, Debug)]
pub struct Target {
    /// The client configuration, its session cache shared by every connection.
    pub config: Arc<ClientConfig>,
    /// The name checked in the certificate (and sent as SNI when it is a DNS name).
    pub name: ServerName<'static>,
    /// How certificates are checked, in words.
    pub trust: &'static str,
    /// The host as the URL names it (for messages).
    pub host: String,
}

impl Target {
    /// Builds the configuration for `host`. Fails when the host is no valid
    /// name or no CA certificate can be loaded.
    pub fn new(host: &str, trust: &Trust) -> Result<Target, String> {
        let name = ServerName::try_from(host.to_string())
            .map_err(|_| format!("{host} is not a valid TLS server name or address"))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS set-up: {e}"))?;
        let mut config = match trust {
            Trust::Insecure => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(
                    provider.signature_verification_algorithms,
                )))
                .with_no_client_auth(),
            Trust::Roots(certs) => builder.with_root_certificates(roots(certs.iter().cloned())?).with_no_client_auth(),
            Trust::System => {
                let found = rustls_native_certs::load_native_certs();
                let store = roots(found.certs).map_err(|_| {
                    let why = found.errors.first().map(|e| format!(" ({e})")).unwrap_or_default();
                    format!(
                        "no CA certificate found in the system's store{why}: install ca-certificates, \
or name the server's CA with --cacert FILE, or skip the check with -k"
                    )
                })?;
                builder.with_root_certificates(store).with_no_client_auth()
            }
        };
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Target { config: Arc::new(config), name, trust: trust.words(), host: host.to_string() })
    }

    /// A new client connection (its ClientHello queued).
    pub fn connect(&self) -> Result<rustls::ClientConnection, rustls::Error> {
        rustls::ClientConnection::new(self.config.clone(), self.name.clone())
    }
}

fn roots(certs: impl IntoIterator<Item = CertificateDer<'static>>) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    let (added, _) = store.add_parsable_certificates(certs);
    if added == 0 {
        return Err("no usable CA certificate".into());
    }
    Ok(store)
}

/// `-k`: accepts any certificate, but still checks that the server holds its
/// key (the handshake signature), so the session is what it claims to be.
#[derive(Debug)]
struct AcceptAnyCertificate(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

/// Whether a handshake failed on the server's certificate (which no retry fixes).
pub fn is_certificate(e: &rustls::Error) -> bool {
    matches!(e, rustls::Error::InvalidCertificate(_))
}

/// A TLS failure in words; certificate problems name what is wrong and what to do.
pub fn describe(e: &rustls::Error, host: &str) -> String {
    use CertificateError as C;
    let what = match e {
        rustls::Error::InvalidCertificate(c) => match c {
            C::Expired => "expired".to_string(),
            C::ExpiredContext { time, not_after } => {
                format!("expired {} ago", age(time.as_secs().saturating_sub(not_after.as_secs())))
            }
            C::NotValidYet => "not valid yet".to_string(),
            C::NotValidYetContext { time, not_before } => {
                format!("not valid yet (for another {})", age(not_before.as_secs().saturating_sub(time.as_secs())))
            }
            C::UnknownIssuer => "unknown issuer: it is not signed by a CA this host trusts (self-signed?)".to_string(),
            C::NotValidForName => format!("wrong name: it is not for {host}"),
            C::NotValidForNameContext { presented, .. } => {
                // webpki says `DnsName("a.test")`; the name alone reads better.
                let names: Vec<&str> = presented
                    .iter()
                    .map(|p| p.strip_prefix("DnsName(\"").and_then(|p| p.strip_suffix("\")")).unwrap_or(p))
                    .collect();
                format!("wrong name: it is for {}, not {host}", names.join(", "))
            }
            C::Revoked => "revoked".to_string(),
            C::BadSignature => "bad signature".to_string(),
            C::BadEncoding => "unreadable (bad encoding)".to_string(),
            C::InvalidPurpose | C::InvalidPurposeContext { .. } => "not made for TLS servers".to_string(),
            // `openssl req -x509` makes such certificates by default; webpki takes none as a server's own.
            C::Other(o) if format!("{o:?}").contains("CaUsedAsEndEntity") => {
                return "the server's certificate is a CA certificate (basicConstraints CA:TRUE) used as its own, \
which is refused even with --cacert; give the server a certificate without CA:TRUE (or one signed by that CA), \
or skip the check with -k/--insecure"
                    .to_string();
            }
            other => format!("{other:?}"),
        },
        rustls::Error::AlertReceived(a) => return format!("the server ended the TLS handshake ({a:?} alert)"),
        rustls::Error::InvalidMessage(_) => {
            return "the server did not answer in TLS (is this port HTTPS? try http://)".to_string();
        }
        rustls::Error::NoApplicationProtocol => {
            return "the server speaks no HTTP/1.1 over TLS (ALPN: no protocol in common)".to_string();
        }
        other => return format!("TLS: {other}"),
    };
    format!("the server's certificate is {what}; trust its CA with --cacert FILE, or skip the check with -k/--insecure")
}

/// `3 days`, `5 h`, `40 s`.
fn age(secs: u64) -> String {
    match secs {
        s if s >= 2 * 86_400 => format!("{} days", s / 86_400),
        s if s >= 7200 => format!("{} h", s / 3600),
        s => format!("{s} s"),
    }
}

/// A TLS error carried inside an `io::Error` (rustls's blocking helpers wrap them).
pub fn from_io(e: &std::io::Error) -> Option<&rustls::Error> {
    e.get_ref()?.downcast_ref::<rustls::Error>()
}

/// What one connection negotiated.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Negotiated {
    /// `TLSv1.3`, `TLSv1.2`.
    pub version: String,
    /// `TLS13_AES_256_GCM_SHA384`…
    pub cipher_suite: String,
    /// The ALPN protocol the server chose, if any.
    pub alpn: Option<String>,
}

impl Negotiated {
    /// Reads a connection whose handshake is complete.
    pub fn of(c: &rustls::ClientConnection) -> Negotiated {
        Negotiated {
            version: c.protocol_version().map(|v| version_name(v).to_string()).unwrap_or_default(),
            cipher_suite: c.negotiated_cipher_suite().map(|s| format!("{:?}", s.suite())).unwrap_or_default(),
            alpn: c.alpn_protocol().map(|p| String::from_utf8_lossy(p).into_owned()),
        }
    }
}

fn version_name(v: rustls::ProtocolVersion) -> &'static str {
    match v {
        rustls::ProtocolVersion::TLSv1_3 => "TLSv1.3",
        rustls::ProtocolVersion::TLSv1_2 => "TLSv1.2",
        _ => "TLS (other)",
    }
}

/// Whether a completed handshake resumed an earlier session.
pub fn resumed(c: &rustls::ClientConnection) -> bool {
    c.handshake_kind() == Some(rustls::HandshakeKind::Resumed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certificate_problems_in_words() {
        let c = |e| rustls::Error::InvalidCertificate(e);
        assert!(describe(&c(CertificateError::UnknownIssuer), "h").contains("unknown issuer"));
        let d = describe(
            &c(CertificateError::ExpiredContext {
                time: UnixTime::since_unix_epoch(std::time::Duration::from_secs(10 * 86_400)),
                not_after: UnixTime::since_unix_epoch(std::time::Duration::from_secs(86_400)),
            }),
            "h",
        );
        assert!(d.contains("expired 9 days ago") && d.contains("-k"), "{d}");
        let d = describe(
            &c(CertificateError::NotValidForNameContext {
                expected: ServerName::try_from("a.test").unwrap(),
                presented: vec!["DnsName(\"b.test\")".into()],
            }),
            "a.test",
        );
        assert!(d.contains("wrong name: it is for b.test, not a.test"), "{d}");
        assert!(is_certificate(&c(CertificateError::Expired)));
        assert!(!is_certificate(&rustls::Error::NoApplicationProtocol));
    }

    #[test]
    fn pem_files_and_names() {
        assert!(parse_pem(b"hello").unwrap_err().contains("no PEM certificate"));
        assert!(Target::new("127.0.0.1", &Trust::Insecure).is_ok());
        assert!(matches!(Target::new("::1", &Trust::Insecure).unwrap().name, ServerName::IpAddress(_)));
        assert!(Target::new("bad name!", &Trust::Insecure).is_err());
        assert!(Target::new("h", &Trust::Roots(vec![CertificateDer::from(vec![1, 2, 3])])).is_err());
    }
}
