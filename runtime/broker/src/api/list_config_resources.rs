//! ListConfigResources (key 74; KIP-1142 renamed v0's
//! ListClientMetricsResources): the config resources of the asked types,
//! as `kafka-configs --describe --entity-type groups` lists groups and
//! checks that a named one exists. v0 lists client-metrics subscriptions
//! only (this broker has none); v1 adds topics, brokers, broker loggers and
//! groups — the groups that have configs, not every group. An empty type
//! list is every type of the version; a type outside it makes the answer
//! UNSUPPORTED_VERSION, as Kafka's.

use rill_protocol::kafka_protocol::messages::list_config_resources_response::ConfigResource;
use rill_protocol::kafka_protocol::messages::{
    ListConfigResourcesRequest, ListConfigResourcesResponse,
};
use rill_protocol::ErrorCode;

use super::{sb, Ctx};

use super::resource_type::{BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP, TOPIC};

pub(super) fn handle(
    ctx: &Ctx<'_>,
    req: ListConfigResourcesRequest,
) -> ListConfigResourcesResponse {
    let served: &[i8] = if ctx.version == 0 {
        &[CLIENT_METRICS]
    } else {
        &[TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP]
    };
    let types: &[i8] = if req.resource_types.is_empty() {
        served
    } else {
        &req.resource_types
    };
    let mut resp = ListConfigResourcesResponse::default();
    if types.iter().any(|t| !served.contains(t)) {
        resp.error_code = ErrorCode::UnsupportedVersion.code();
        return resp;
    }
    let meta = ctx.broker.metadata();
    let mut out = Vec::new();
    let mut push = |name: String, ty: i8| {
        out.push(
            ConfigResource::default()
                .with_resource_name(sb(name))
                .with_resource_type(ty),
        )
    };
    if types.contains(&GROUP) {
        for g in meta.groups_with_configs().filter(|g| ctx.can_group(g)) {
            push(g.to_string(), GROUP);
        }
    }
    for ty in [BROKER_LOGGER, BROKER] {
        if types.contains(&ty) {
            for n in meta.alive_nodes() {
                push(n.id.to_string(), ty);
            }
        }
    }
    if types.contains(&TOPIC) {
        for t in meta.topics().filter(|t| ctx.can_topic(&t.name)) {
            push(t.name.clone(), TOPIC);
        }
    }
    resp.config_resources = out;
    resp
}
