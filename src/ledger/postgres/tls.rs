//! TLS to PostgreSQL with rustls, with libpq's meaning of `sslmode`: `disable` never encrypts;
//! `prefer` (the default) encrypts when the server offers it and `require` always does, both
//! without checking the server's certificate (as libpq does without a root certificate); with
//! a CA file (`--ledger-ca`), TLS is required and the server's certificate must chain to it and
//! name the host connected to (libpq's `verify-full`). A unix socket is never encrypted.

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::error::{Error, Result};

/// The connector for a ledger: verifying against the CA file when one is given.
pub(crate) fn connector(ca_file: Option<&Path>) -> Result<MakeRustlsConnect> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|err| Error::Usage(format!("TLS for the shared ledger: {err}")))?;
    let config = match ca_file {
        Some(path) => {
            let shown = path.display();
            let mut roots = RootCertStore::empty();
            let certs = CertificateDer::pem_file_iter(path).map_err(|err| {
                Error::Usage(format!(
                    "--ledger-ca {shown}: cannot read it: {err}\nhint: a PEM file of the CA that signed the PostgreSQL server's certificate"
                ))
            })?;
            for cert in certs {
                let cert = cert.map_err(|err| {
                    Error::Usage(format!("--ledger-ca {shown}: not a PEM certificate: {err}"))
                })?;
                roots.add(cert).map_err(|err| {
                    Error::Usage(format!("--ledger-ca {shown}: unusable certificate: {err}"))
                })?;
            }
            if roots.is_empty() {
                return Err(Error::Usage(format!(
                    "--ledger-ca {shown}: holds no certificate\nhint: a PEM file of the CA that signed the PostgreSQL server's certificate"
                )));
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        None => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Unverified(provider)))
            .with_no_client_auth(),
    };
    Ok(MakeRustlsConnect::new(config))
}

/// Encryption without authentication, libpq's `sslmode=require`: the certificate chain is not
/// checked, the handshake's signatures are.
#[derive(Debug)]
struct Unverified(Arc<CryptoProvider>);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
