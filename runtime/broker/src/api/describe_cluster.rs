//! DescribeCluster (key 60): the live brokers (and, with v2's
//! `include_fenced_brokers`, stopped ones marked fenced), the controller and
//! the cluster id. Used by Kafka's Admin client.

use rill_protocol::kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use rill_protocol::kafka_protocol::messages::{DescribeClusterRequest, DescribeClusterResponse};
use rill_protocol::ErrorCode;

use super::{broker_id, sb, Ctx};

pub(super) fn handle(ctx: &Ctx<'_>, req: DescribeClusterRequest) -> DescribeClusterResponse {
    let meta = ctx.broker.metadata();
    let mut resp = DescribeClusterResponse::default()
        .with_cluster_id(sb(meta.cluster_id.clone()))
        .with_controller_id(broker_id(meta.controller_id()));
    if ctx.version >= 1 {
        resp.endpoint_type = req.endpoint_type;
        // 1 = brokers; the embedded cluster has no separate controller endpoints.
        if req.endpoint_type != 1 {
            resp.error_code = ErrorCode::UnsupportedEndpointType.code();
            resp.error_message = Some(sb(format!(
                "endpoint type {} is not supported; the embedded cluster only has broker endpoints (1)",
                req.endpoint_type
            )));
            return resp;
        }
    }
    let include_fenced = ctx.version >= 2 && req.include_fenced_brokers;
    resp.brokers = meta
        .nodes
        .values()
        .filter(|n| n.alive || include_fenced)
        .map(|n| {
            let mut b = DescribeClusterBroker::default()
                .with_broker_id(broker_id(n.id))
                .with_host(sb(n.host.clone()))
                .with_port(ctx.port_of(n))
                .with_rack(n.rack.clone().map(sb));
            if ctx.version >= 2 {
                b.is_fenced = !n.alive;
            }
            b
        })
        .collect();
    resp
}
