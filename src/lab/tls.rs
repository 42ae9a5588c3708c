//! HTTPS for the lab servers: a certificate generated at start (rcgen) for
//! `localhost`, `127.0.0.1` and `::1`, and the rustls server configuration.
//! Each `write` of a lab server then becomes one TLS record, so the Nagle
//! server sends header and body as two records: the same stall, encrypted.

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::io::Write;
use std::net::IpAddr;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::Arc;

/// A self-signed certificate and the server configuration that presents it.
pub struct Cert {
    config: Arc<rustls::ServerConfig>,
    der: CertificateDer<'static>,
    pem: String,
    addresses: Vec<IpAddr>,
}

impl Cert {
    /// Generates a key pair and a certificate for `localhost`, the loopback
    /// addresses and `ip` (the address the servers listen on, e.g. behind `--rtt`).
    pub fn generate(ip: IpAddr) -> Result<Cert, String> {
        let mut addresses: Vec<IpAddr> = vec![[127, 0, 0, 1].into(), std::net::Ipv6Addr::LOCALHOST.into()];
        if !addresses.contains(&ip) {
            addresses.push(ip);
        }
        let names: Vec<String> =
            std::iter::once("localhost".to_string()).chain(addresses.iter().map(|a| a.to_string())).collect();
        let made = rcgen::generate_simple_self_signed(names).map_err(|e| format!("cannot make a certificate: {e}"))?;
        let der = made.cert.der().clone();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(made.signing_key.serialize_der()));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .and_then(|b| b.with_no_client_auth().with_single_cert(vec![der.clone()], key))
            .map_err(|e| format!("cannot set up TLS: {e}"))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Cert { config: Arc::new(config), der, pem: made.cert.pem(), addresses })
    }

    /// The addresses it is valid for, in words.
    pub fn addresses(&self) -> String {
        self.addresses.iter().map(IpAddr::to_string).collect::<Vec<_>>().join(", ")
    }

    /// The server configuration.
    pub fn config(&self) -> Arc<rustls::ServerConfig> {
        self.config.clone()
    }

    /// The certificate, to trust it in this process.
    pub fn der(&self) -> CertificateDer<'static> {
        self.der.clone()
    }

    /// Writes the certificate (PEM, public) for `--cacert`, into a new
    /// directory of random name (never one that exists, so nothing can be
    /// planted there); readable by all, writable by this user only. The
    /// directory goes when the returned guard is dropped.
    pub fn write_pem(&self) -> Result<(tempfile::TempDir, PathBuf), String> {
        let dir = tempfile::Builder::new()
            .prefix("tcpdoctor-lab-tls-")
            .permissions(std::fs::Permissions::from_mode(0o755))
            .tempdir()
            .map_err(|e| format!("cannot create a directory for the lab's certificate: {e}"))?;
        let path = dir.path().join("cert.pem");
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::File::options().write(true).create_new(true).mode(0o644).open(&path)?;
            f.write_all(self.pem.as_bytes())
        };
        write().map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        Ok((dir, path))
    }
}
