//! Secrets and how they are kept out of sight: [`Password`] prints
//! `[hidden]` (as Kafka's `Password` type), and [`is_secret_key`] names the
//! properties whose values never appear in errors or `Debug` output.
//!
//! A leaf module (nothing here uses the rest of the crate), so the error
//! type and the configuration can both depend on it.

/// What is printed instead of a secret.
pub const HIDDEN: &str = "[hidden]";

/// Whether a property holds a secret whose value must never be printed
/// (passwords, private keys, JAAS lines, OAuth client secrets).
pub fn is_secret_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    k.contains("password")
        || k.contains("jaas.config")
        || k.contains("secret")
        || k.ends_with("keystore.key")
        || k.ends_with("sasl.oauthbearer.token")
        || k.contains("bearer.token")
        || k.ends_with("admin.token")
}

/// A secret string. Prints as `[hidden]`.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Password(String);

impl Password {
    /// Wraps a secret.
    pub fn new(s: impl Into<String>) -> Password {
        Password(s.into())
    }

    /// The secret itself (for the wire only).
    pub fn value(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(HIDDEN)
    }
}

impl std::fmt::Display for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(HIDDEN)
    }
}
