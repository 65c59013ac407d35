//! TLS for `mqtts://` brokers: a rustls client configuration with the `ring` provider, the CA
//! file (or the system's roots) and an optional client certificate.

use crate::config::TlsFiles;
use rustls::RootCertStore;
use std::io::BufReader;
use std::path::Path;
use std::sync::Arc;

/// Builds the client configuration; errors name the file, never key material.
pub fn client_config(files: &TlsFiles) -> Result<Arc<rustls::ClientConfig>, String> {
    let mut roots = RootCertStore::empty();
    match &files.ca_file {
        Some(path) => {
            for cert in read_certs(path)? {
                roots
                    .add(cert)
                    .map_err(|e| format!("{}: unusable CA certificate: {e}", path.display()))?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            for cert in found.certs {
                let _ = roots.add(cert);
            }
            if roots.is_empty() {
                return Err(
                    "no system CA certificates found; set mqtt.ca_file to the broker's CA".into(),
                );
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?
        .with_root_certificates(roots);
    let config = match (&files.client_cert_file, &files.client_key_file) {
        (Some(cert), Some(key)) => {
            let chain = read_certs(cert)?;
            let file = std::fs::File::open(key)
                .map_err(|e| format!("cannot read {}: {e}", key.display()))?;
            let key_der = rustls_pemfile::private_key(&mut BufReader::new(file))
                .map_err(|e| format!("{}: {e}", key.display()))?
                .ok_or_else(|| format!("{}: no private key in the file", key.display()))?;
            builder
                .with_client_auth_cert(chain, key_der)
                .map_err(|e| format!("client certificate {}: {e}", cert.display()))?
        }
        _ => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

fn read_certs(path: &Path) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, String> {
    let file =
        std::fs::File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let certs: Vec<_> = rustls_pemfile::certs(&mut BufReader::new(file))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{}: no PEM certificate in the file",
            path.display()
        ));
    }
    Ok(certs)
}
