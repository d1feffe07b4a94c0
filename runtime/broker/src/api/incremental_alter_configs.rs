//! IncrementalAlterConfigs (key 44): group-level configs, as
//! `kafka-configs --alter --entity-type groups` sets them. Kafka 4.4 makes a
//! KIP-1071 streams group's session, heartbeat, initial delay and standby
//! count group configs (a Streams client's own `num.standby.replicas` is
//! ignored under `group.protocol=streams`), so this is how a user of the
//! embedded broker gets standby tasks from its streams coordinator.
//!
//! Invariants: a request changes a group's configs all or nothing (every
//! operation is checked first, `validate_only` stops there); SET and DELETE
//! only (APPEND/SUBTRACT are for list configs, which no honoured key is);
//! keys the broker does not honour are INVALID_CONFIG naming the key, never
//! stored and ignored. Topic and broker configs are not alterable here
//! (INVALID_REQUEST naming the resource). The streams coordinator reads a
//! group's configs at every heartbeat, so a change applies at once.

use std::collections::BTreeMap;

use rill_protocol::kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use rill_protocol::kafka_protocol::messages::{
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};
use rill_protocol::ErrorCode;

use super::{sb, Ctx};
use crate::config::{group_config_def, validate_group_config, validate_group_configs};

use super::resource_type::GROUP;

const SET: i8 = 0;
const DELETE: i8 = 1;

pub(super) fn handle(
    ctx: &Ctx<'_>,
    req: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let mut resp = IncrementalAlterConfigsResponse::default();
    for res in req.resources {
        let name = res.resource_name.to_string();
        let result = match res.resource_type {
            GROUP => alter_group(ctx, &name, &res.configs, req.validate_only),
            other => Err((
                ErrorCode::InvalidRequest,
                format!(
                    "resource type {other} ('{name}') cannot be altered on this broker: only group configs (resource type 32) can"
                ),
            )),
        };
        let mut r = AlterConfigsResourceResponse::default()
            .with_resource_type(res.resource_type)
            .with_resource_name(res.resource_name.clone());
        if let Err((code, msg)) = result {
            r.error_code = code.code();
            r.error_message = Some(sb(msg));
        }
        resp.responses.push(r);
    }
    resp
}

type Ops<'a> = &'a [rill_protocol::kafka_protocol::messages::incremental_alter_configs_request::AlterableConfig];

fn alter_group(
    ctx: &Ctx<'_>,
    group: &str,
    ops: Ops<'_>,
    validate_only: bool,
) -> Result<(), (ErrorCode, String)> {
    if group.is_empty() {
        return Err((ErrorCode::InvalidRequest, "the group id is empty".into()));
    }
    if !ctx.can_group(group) {
        return Err((
            ErrorCode::GroupAuthorizationFailed,
            format!(
                "{} may not alter the configs of group '{group}'",
                ctx.principal
            ),
        ));
    }
    let mut meta = ctx.broker.metadata_mut();
    let mut configs: BTreeMap<String, String> = meta.group_configs(group);
    for op in ops {
        let key = op.name.to_string();
        match op.config_operation {
            SET => {
                let value = op.value.as_ref().map(|v| v.to_string()).unwrap_or_default();
                let n = validate_group_config(&ctx.broker.config, &key, &value)
                    .map_err(|e| (ErrorCode::InvalidConfig, e))?;
                configs.insert(key, n.to_string());
            }
            DELETE => {
                group_config_def(&key).map_err(|e| (ErrorCode::InvalidConfig, e))?;
                configs.remove(&key);
            }
            other => {
                return Err((
                    ErrorCode::InvalidRequest,
                    format!(
                        "operation {other} on group config '{key}' is not supported: group configs take SET (0) and DELETE (1)"
                    ),
                ))
            }
        }
    }
    validate_group_configs(&ctx.broker.config, &configs)
        .map_err(|e| (ErrorCode::InvalidConfig, e))?;
    if validate_only {
        return Ok(());
    }
    meta.set_group_configs(group, configs).map_err(|e| {
        (
            ErrorCode::KafkaStorageError,
            format!("could not save the configs of group '{group}': {e}"),
        )
    })?;
    tracing::info!(group, "group configs altered");
    Ok(())
}
