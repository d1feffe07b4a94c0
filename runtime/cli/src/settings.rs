//! How `rill` subcommands take Kafka properties, as Kafka's own tools do.
//!
//! - The tools (`instances`, `shutdown`, `groups …`, `topics …`) take
//!   `--command-config FILE`, a Kafka properties file with admin-client
//!   settings (security, timeouts, `bootstrap.servers`) and, for the
//!   commands that call an app's REST API, `rest.admin.token` and
//!   `rest.ssl.truststore.location` (the app's own keys; an `https://` URL
//!   uses HTTPS); `--set KEY=VALUE` goes over the file and the command's flags
//!   (`--bootstrap-server`, `--token`) over both. Any other key is refused
//!   with the key and where it came from named.
//! - `rill broker` takes broker properties instead (`server.properties`
//!   keys): `--config FILE` and `--set KEY=VALUE`, under its flags.

use std::path::PathBuf;

use clap::Args;
use rill_client::{parse_key_value, Admin, ClientConfig, ClientKind};

/// The REST bearer token's key, the same as the app's (`rest.admin.token`).
pub const REST_TOKEN: &str = "rest.admin.token";

/// The CA of apps' REST certificates (HTTPS), the same key as the app's.
pub const REST_TRUSTSTORE: &str = "rest.ssl.truststore.location";

/// `--set`'s parser: a clap error that quotes the argument.
pub fn parse_set(arg: &str) -> Result<(String, String), String> {
    parse_key_value(arg)
        .map_err(|_| format!("{arg:?} is not KEY=VALUE (e.g. --set request.timeout.ms=60000)"))
}

/// A properties file's pairs (in key order), or a sentence naming the file.
pub fn read_properties(path: &std::path::Path) -> Result<Vec<(String, String)>, String> {
    let props = ClientConfig::from_properties_file(path).map_err(|e| e.to_string())?;
    Ok(props
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect())
}

/// The tools' Kafka properties.
#[derive(Args, Debug, Clone, Default)]
pub struct CommandConfig {
    /// Kafka properties file: admin client settings (security, timeouts,
    /// bootstrap.servers) and rest.admin.token.
    #[arg(long = "command-config", value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// One property over the file (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE", value_parser = parse_set)]
    pub set: Vec<(String, String)>,
    /// How long a cluster call may take in all, in milliseconds
    /// (`default.api.timeout.ms`, 60000 unless set; a bootstrap server that
    /// refuses connections fails within 3 s either way).
    #[arg(long = "timeout", value_name = "MS")]
    pub timeout_ms: Option<u64>,
}

impl CommandConfig {
    /// The file's properties with `--set` over them, every key checked.
    fn properties(&self) -> Result<ClientConfig, String> {
        let mut props = ClientConfig::new();
        let mut sources: Vec<(String, Vec<(String, String)>)> = Vec::new();
        if let Some(path) = &self.file {
            sources.push((
                format!("--command-config {}", path.display()),
                read_properties(path)?,
            ));
        }
        sources.push(("--set".to_string(), self.set.clone()));
        for (origin, pairs) in sources {
            for (k, v) in pairs {
                if k != REST_TOKEN && k != REST_TRUSTSTORE && !ClientKind::Admin.knows(&k) {
                    return Err(format!(
                        "{origin}: {k} is not an admin client setting (the tools read those and {REST_TOKEN})"
                    ));
                }
                props.insert(k, v);
            }
        }
        Ok(props)
    }

    /// An admin client: the properties, with `bootstrap` (the flag) over them.
    pub fn admin(&self, bootstrap: Option<&str>) -> Result<Admin, String> {
        let mut props = self.properties()?;
        props.remove(REST_TOKEN);
        props.remove(REST_TRUSTSTORE);
        if let Some(b) = bootstrap {
            props.insert("bootstrap.servers", b);
        }
        if let Some(ms) = self.timeout_ms {
            props.insert("default.api.timeout.ms", ms.to_string());
        }
        let Some(servers) = props.get("bootstrap.servers").map(str::to_string) else {
            return Err("no cluster given: pass --bootstrap-server HOST:PORT or set bootstrap.servers in --command-config".into());
        };
        Admin::new(&props).map_err(|e| format!("connecting to {servers}: {e}"))
    }

    /// The base URL of an app's REST API (`http://` unless the URL says
    /// `https://`), with the HTTP client set up for it (HTTPS trusts
    /// `rest.ssl.truststore.location` when given).
    pub fn rest_base(&self, url: &str) -> Result<String, String> {
        let props = self.properties()?;
        let trust = props.get(REST_TRUSTSTORE).map(std::path::PathBuf::from);
        crate::http::configure(url, trust.as_deref())
    }

    /// The REST bearer token: the flag's (or `RILL_REST_TOKEN`), else
    /// `rest.admin.token` from the properties.
    pub fn token(&self, flag: Option<&str>) -> Result<Option<String>, String> {
        if let Some(t) = flag {
            return Ok(Some(t.to_string()));
        }
        Ok(self.properties()?.get(REST_TOKEN).map(str::to_string))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_take_admin_keys_and_the_rest_token_and_name_anything_else() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tools.properties");
        std::fs::write(
            &file,
            "bootstrap.servers=127.0.0.1:1\nrequest.timeout.ms=1000\nrest.admin.token=s3cret\n",
        )
        .unwrap();
        let c = CommandConfig {
            file: Some(file.clone()),
            set: vec![("request.timeout.ms".into(), "2000".into())],
            timeout_ms: None,
        };
        let props = c.properties().unwrap();
        assert_eq!(props.get("request.timeout.ms"), Some("2000"));
        assert_eq!(c.token(None).unwrap().as_deref(), Some("s3cret"));
        assert_eq!(c.token(Some("flag")).unwrap().as_deref(), Some("flag"));
        std::fs::write(&file, "group.id=tools\n").unwrap();
        let e = c.properties().unwrap_err();
        assert!(
            e.contains("group.id") && e.contains("tools.properties"),
            "{e}"
        );
        let none = CommandConfig::default();
        let e = none.admin(None).err().expect("no bootstrap anywhere");
        assert!(e.contains("--bootstrap-server"), "{e}");
    }
}
