//! The tools' HTTP client for apps' REST APIs: plain HTTP, or HTTPS when
//! the URL given says `https://`, with the certificates checked against
//! `rest.ssl.truststore.location` from `--command-config` (the app's own
//! key) or the system's CA certificates.
//!
//! Invariant: one `rill` process runs one command against one
//! application, so the scheme and trust settings are set once, from that
//! command's URL and properties, and every call (including probes of the
//! other instances' endpoints) uses them.

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

struct Settings {
    scheme: &'static str,
    tls: Option<Arc<rustls::ClientConfig>>,
}

static SETTINGS: OnceLock<Settings> = OnceLock::new();

/// Sets the scheme from the command's URL and the trust store; returns the
/// base URL (`scheme://host:port`, no trailing slash).
pub fn configure(url: &str, truststore: Option<&Path>) -> Result<String, String> {
    let u = url.trim_end_matches('/');
    let (scheme, rest) = if let Some(r) = u.strip_prefix("https://") {
        ("https", r)
    } else if let Some(r) = u.strip_prefix("http://") {
        ("http", r)
    } else {
        ("http", u)
    };
    let tls = if scheme == "https" {
        Some(
            rill_client::security::https_client_config(truststore)
                .map_err(|e| format!("rest.ssl.truststore.location {e}"))?,
        )
    } else {
        None
    };
    let _ = SETTINGS.set(Settings { scheme, tls });
    Ok(format!("{}://{rest}", self::scheme()))
}

/// `http` or `https`.
pub fn scheme() -> &'static str {
    SETTINGS.get().map_or("http", |s| s.scheme)
}

/// An agent with the configured trust settings.
pub fn agent(timeout: Duration) -> ureq::Agent {
    let b = ureq::AgentBuilder::new().timeout(timeout);
    match SETTINGS.get().and_then(|s| s.tls.clone()) {
        Some(tls) => b.tls_config(tls).build(),
        None => b.build(),
    }
}
