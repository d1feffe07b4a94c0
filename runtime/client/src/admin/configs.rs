//! Config resources: DescribeConfigs and IncrementalAlterConfigs, as Kafka's
//! `Admin.describeConfigs` / `incrementalAlterConfigs`.
//!
//! Under KIP-1071 a streams group's standby count, session and heartbeat are
//! group configs (`kafka-configs --entity-type groups`): this is how Rill
//! sets them on Apache Kafka 4.4 and on the embedded broker. Topic and group
//! requests go to any broker, a broker's own configs to that broker.

use std::collections::BTreeMap;

use rill_protocol::kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use rill_protocol::kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use rill_protocol::kafka_protocol::messages::{
    DescribeConfigsRequest, IncrementalAlterConfigsRequest,
};
use rill_protocol::{ApiKey, RequestKind, ResponseKind};

use super::{resource_result, unexpected, Admin};
use crate::error::Result;
use crate::rpc::sb;

/// What a config belongs to (Kafka's `ConfigResource`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigResource {
    /// A topic's configs.
    Topic(String),
    /// One broker's settings, by node id.
    Broker(i32),
    /// A consumer or streams group (Kafka 4.x group configs).
    Group(String),
}

impl ConfigResource {
    fn wire(&self) -> (i8, String) {
        match self {
            ConfigResource::Topic(t) => (2, t.clone()),
            ConfigResource::Broker(id) => (4, id.to_string()),
            ConfigResource::Group(g) => (32, g.clone()),
        }
    }
}

impl std::fmt::Display for ConfigResource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigResource::Topic(t) => write!(f, "topic {t}"),
            ConfigResource::Broker(id) => write!(f, "broker {id}"),
            ConfigResource::Group(g) => write!(f, "group {g}"),
        }
    }
}

/// One incremental change (Kafka's `AlterConfigOp`, SET and DELETE).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlterConfigOp {
    /// Sets key to value.
    Set(String, String),
    /// Back to the default (the broker's value for a group config).
    Delete(String),
}

impl Admin {
    async fn config_connection(
        &self,
        resource: &ConfigResource,
    ) -> Result<std::sync::Arc<crate::conn::Connection>> {
        match resource {
            ConfigResource::Broker(id) => self.cluster.connection(*id).await,
            _ => self.cluster.any_connection().await,
        }
    }

    /// Applies `ops` to `resource`'s configs, all or nothing.
    pub fn incremental_alter_configs(
        &self,
        resource: &ConfigResource,
        ops: &[AlterConfigOp],
    ) -> Result<()> {
        self.run("Admin::incremental_alter_configs", async {
            let (kind, name) = resource.wire();
            let configs = ops
                .iter()
                .map(|op| match op {
                    AlterConfigOp::Set(k, v) => AlterableConfig::default()
                        .with_name(sb(k))
                        .with_config_operation(0)
                        .with_value(Some(sb(v))),
                    AlterConfigOp::Delete(k) => AlterableConfig::default()
                        .with_name(sb(k))
                        .with_config_operation(1)
                        .with_value(None),
                })
                .collect();
            let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
                AlterConfigsResource::default()
                    .with_resource_type(kind)
                    .with_resource_name(sb(&name))
                    .with_configs(configs),
            ]);
            let conn = self.config_connection(resource).await?;
            let (_, resp) = conn
                .call(
                    ApiKey::IncrementalAlterConfigs,
                    0,
                    1,
                    RequestKind::IncrementalAlterConfigs(req),
                )
                .await?;
            let ResponseKind::IncrementalAlterConfigs(resp) = resp else {
                return Err(unexpected("IncrementalAlterConfigs"));
            };
            for r in resp.responses {
                resource_result(r.error_code, r.error_message, || {
                    format!("altering the configs of {resource}")
                })?;
            }
            Ok(())
        })
    }

    /// `resource`'s configs, name → value (sensitive values come back
    /// empty, as Kafka sends them).
    pub fn describe_configs(&self, resource: &ConfigResource) -> Result<BTreeMap<String, String>> {
        self.run("Admin::describe_configs", async {
            let (kind, name) = resource.wire();
            let req = DescribeConfigsRequest::default().with_resources(vec![
                DescribeConfigsResource::default()
                    .with_resource_type(kind)
                    .with_resource_name(sb(&name))
                    .with_configuration_keys(None),
            ]);
            let conn = self.config_connection(resource).await?;
            let (_, resp) = conn
                .call(
                    ApiKey::DescribeConfigs,
                    1,
                    4,
                    RequestKind::DescribeConfigs(req),
                )
                .await?;
            let ResponseKind::DescribeConfigs(resp) = resp else {
                return Err(unexpected("DescribeConfigs"));
            };
            let mut out = BTreeMap::new();
            for r in resp.results {
                resource_result(r.error_code, r.error_message, || {
                    format!("describing the configs of {resource}")
                })?;
                for c in r.configs {
                    out.insert(
                        c.name.to_string(),
                        c.value.map(|v| v.to_string()).unwrap_or_default(),
                    );
                }
            }
            Ok(out)
        })
    }
}
