// The streams-group messages of KIP-1071 as kafka-clients encodes them, for
// the byte-for-byte check of rill-protocol's generated codecs
// (tests/tests/interop.rs `streams_group_messages_match_kafka_clients`).
//
//   encode                        one line per message and version:
//                                 "<Name> <version> <hex>" for a message
//                                 with every field set, then for Kafka's
//                                 defaults ("<Name>/default ...")
//   reencode (<Name> <version> <hex>)...  reads each message with
//                                 kafka-clients and prints what it writes
//                                 back (hex), one line each
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;

import org.apache.kafka.common.message.StreamsGroupDescribeRequestData;
import org.apache.kafka.common.message.StreamsGroupDescribeResponseData;
import org.apache.kafka.common.message.StreamsGroupHeartbeatRequestData;
import org.apache.kafka.common.message.StreamsGroupHeartbeatResponseData;
import org.apache.kafka.common.protocol.ApiMessage;
import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.protocol.MessageUtil;

public class StreamsWire {
    static String hex(ApiMessage m, short v) {
        ByteBuffer b = MessageUtil.toByteBufferAccessor(m, v).buffer();
        byte[] out = new byte[b.remaining()];
        b.get(out);
        return HexFormat.of().formatHex(out);
    }

    static StreamsGroupHeartbeatRequestData heartbeatRequest() {
        var kv = new StreamsGroupHeartbeatRequestData.KeyValue().setKey("cleanup.policy").setValue("compact");
        var changelog = new StreamsGroupHeartbeatRequestData.TopicInfo().setName("app-store-changelog")
            .setPartitions(0).setReplicationFactor((short) 3).setTopicConfigs(new ArrayList<>(List.of(kv)));
        var rep = new StreamsGroupHeartbeatRequestData.TopicInfo().setName("app-rep")
            .setPartitions(4).setReplicationFactor((short) 3).setTopicConfigs(new ArrayList<>(List.of(kv)));
        var sub = new StreamsGroupHeartbeatRequestData.Subtopology().setSubtopologyId("0")
            .setSourceTopics(List.of("in")).setSourceTopicRegex(List.of("in-.*"))
            .setStateChangelogTopics(new ArrayList<>(List.of(changelog)))
            .setRepartitionSinkTopics(List.of("app-rep"))
            .setRepartitionSourceTopics(new ArrayList<>(List.of(rep)))
            .setCopartitionGroups(new ArrayList<>(List.of(new StreamsGroupHeartbeatRequestData.CopartitionGroup()
                .setSourceTopics(List.of((short) 0)).setSourceTopicRegex(List.of((short) 0))
                .setRepartitionSourceTopics(List.of((short) 0)))));
        return new StreamsGroupHeartbeatRequestData().setGroupId("app").setMemberId("m-1").setMemberEpoch(7)
            .setEndpointInformationEpoch(3).setInstanceId("app-0-thread-1").setRackId("rack-a")
            .setRebalanceTimeoutMs(300000)
            .setTopology(new StreamsGroupHeartbeatRequestData.Topology().setEpoch(1)
                .setSubtopologies(new ArrayList<>(List.of(sub))))
            .setActiveTasks(new ArrayList<>(List.of(new StreamsGroupHeartbeatRequestData.TaskIds()
                .setSubtopologyId("0").setPartitions(List.of(0, 2)))))
            .setStandbyTasks(new ArrayList<>(List.of(new StreamsGroupHeartbeatRequestData.TaskIds()
                .setSubtopologyId("0").setPartitions(List.of(1)))))
            .setWarmupTasks(new ArrayList<>())
            .setProcessId("5f0c2a3e-0000-4000-8000-000000000001")
            .setUserEndpoint(new StreamsGroupHeartbeatRequestData.Endpoint().setHost("127.0.0.1").setPort(65000))
            .setClientTags(new ArrayList<>(List.of(new StreamsGroupHeartbeatRequestData.KeyValue()
                .setKey("zone").setValue("a"))))
            .setTaskOffsets(new ArrayList<>(List.of(new StreamsGroupHeartbeatRequestData.TaskOffset()
                .setSubtopologyId("0").setPartition(2).setOffset(1L << 40))))
            .setTaskEndOffsets(new ArrayList<>())
            .setShutdownApplication(true);
    }

    static StreamsGroupHeartbeatResponseData heartbeatResponse(short v) {
        var r = new StreamsGroupHeartbeatResponseData().setThrottleTimeMs(1).setErrorCode((short) 0)
            .setErrorMessage("none").setMemberId("m-1").setMemberEpoch(8).setHeartbeatIntervalMs(5000)
            .setTaskOffsetIntervalMs(60000)
            .setStatus(new ArrayList<>(List.of(new StreamsGroupHeartbeatResponseData.Status()
                .setStatusCode((byte) 1).setStatusDetail("missing source topic in"))))
            .setActiveTasks(new ArrayList<>(List.of(new StreamsGroupHeartbeatResponseData.TaskIds()
                .setSubtopologyId("0").setPartitions(List.of(0, 1)))))
            .setStandbyTasks(new ArrayList<>()).setWarmupTasks(new ArrayList<>())
            .setEndpointInformationEpoch(2)
            .setPartitionsByUserEndpoint(new ArrayList<>(List.of(new StreamsGroupHeartbeatResponseData.EndpointToPartitions()
                .setUserEndpoint(new StreamsGroupHeartbeatResponseData.Endpoint().setHost("h").setPort(9))
                .setActivePartitions(new ArrayList<>(List.of(new StreamsGroupHeartbeatResponseData.TopicPartition()
                    .setTopic("in").setPartitions(List.of(0)))))
                .setStandbyPartitions(new ArrayList<>()))));
        if (v == 0) r.setAcceptableRecoveryLagLegacy(10000);
        else r.setAcceptableRecoveryLag(10000L).setTopologyDescriptionRequired(true);
        return r;
    }

    static StreamsGroupDescribeRequestData describeRequest(short v) {
        var d = new StreamsGroupDescribeRequestData().setGroupIds(List.of("app", "other"))
            .setIncludeAuthorizedOperations(true);
        if (v >= 1) d.setIncludeTopologyDescription(true);
        return d;
    }

    static StreamsGroupDescribeResponseData describeResponse(short v) {
        var tasks = new StreamsGroupDescribeResponseData.TaskIds().setSubtopologyId("0").setPartitions(List.of(0, 1));
        var assignment = new StreamsGroupDescribeResponseData.Assignment()
            .setActiveTasks(new ArrayList<>(List.of(tasks))).setStandbyTasks(new ArrayList<>())
            .setWarmupTasks(new ArrayList<>());
        var member = new StreamsGroupDescribeResponseData.Member().setMemberId("m-1").setMemberEpoch(4)
            .setInstanceId("app-0-thread-1").setRackId(null).setClientId("app-client").setClientHost("/127.0.0.1")
            .setTopologyEpoch(1).setProcessId("p-1")
            .setUserEndpoint(new StreamsGroupDescribeResponseData.Endpoint().setHost("127.0.0.1").setPort(8080))
            .setClientTags(new ArrayList<>(List.of(new StreamsGroupDescribeResponseData.KeyValue().setKey("zone").setValue("a"))))
            .setTaskOffsets(new ArrayList<>(List.of(new StreamsGroupDescribeResponseData.TaskOffset()
                .setSubtopologyId("0").setPartition(1).setOffset(42))))
            .setTaskEndOffsets(new ArrayList<>())
            .setAssignment(assignment).setTargetAssignment(assignment.duplicate()).setIsClassic(false);
        var sub = new StreamsGroupDescribeResponseData.Subtopology().setSubtopologyId("0")
            .setSourceTopics(List.of("in")).setRepartitionSinkTopics(List.of())
            .setStateChangelogTopics(new ArrayList<>(List.of(new StreamsGroupDescribeResponseData.TopicInfo()
                .setName("app-store-changelog").setPartitions(2).setReplicationFactor((short) 1)
                .setTopicConfigs(new ArrayList<>()))))
            .setRepartitionSourceTopics(new ArrayList<>());
        var g = new StreamsGroupDescribeResponseData.DescribedGroup().setGroupId("app").setGroupState("Stable")
            .setGroupEpoch(4).setAssignmentEpoch(4)
            .setTopology(new StreamsGroupDescribeResponseData.Topology().setEpoch(1)
                .setSubtopologies(new ArrayList<>(List.of(sub))))
            .setMembers(new ArrayList<>(List.of(member))).setAuthorizedOperations(0x0f);
        if (v >= 1) {
            var node = new StreamsGroupDescribeResponseData.TopologyDescriptionNode().setName("KSTREAM-SOURCE-0000000000")
                .setNodeType((byte) 0).setSourceTopics(List.of("in")).setSinkTopic(null)
                .setStores(List.of()).setSuccessors(List.of("KSTREAM-MAPVALUES-0000000001"));
            g.setTopologyDescription(new StreamsGroupDescribeResponseData.TopologyDescription()
                .setSubtopologies(new ArrayList<>(List.of(new StreamsGroupDescribeResponseData.TopologyDescriptionSubtopology()
                    .setSubtopologyId("0").setNodes(new ArrayList<>(List.of(node))))))
                .setGlobalStores(new ArrayList<>()))
                .setTopologyDescriptionStatus((byte) 1).setAssignorName("sticky");
        }
        var missing = new StreamsGroupDescribeResponseData.DescribedGroup().setGroupId("other")
            .setErrorCode((short) 69).setErrorMessage("Group other not found.");
        return new StreamsGroupDescribeResponseData().setThrottleTimeMs(0)
            .setGroups(new ArrayList<>(List.of(g, missing)));
    }

    static ApiMessage read(String name, short v, byte[] bytes) {
        var in = new ByteBufferAccessor(ByteBuffer.wrap(bytes));
        switch (name) {
            case "StreamsGroupHeartbeatRequest": return new StreamsGroupHeartbeatRequestData(in, v);
            case "StreamsGroupHeartbeatResponse": return new StreamsGroupHeartbeatResponseData(in, v);
            case "StreamsGroupDescribeRequest": return new StreamsGroupDescribeRequestData(in, v);
            case "StreamsGroupDescribeResponse": return new StreamsGroupDescribeResponseData(in, v);
            default: throw new IllegalArgumentException("unknown message " + name);
        }
    }

    public static void main(String[] args) {
        if (args.length == 1 && args[0].equals("encode")) {
            for (short v = 0; v <= 1; v++) {
                System.out.println("StreamsGroupHeartbeatRequest " + v + " " + hex(heartbeatRequest(), v));
                System.out.println("StreamsGroupHeartbeatResponse " + v + " " + hex(heartbeatResponse(v), v));
                System.out.println("StreamsGroupDescribeRequest " + v + " " + hex(describeRequest(v), v));
                System.out.println("StreamsGroupDescribeResponse " + v + " " + hex(describeResponse(v), v));
                System.out.println("StreamsGroupHeartbeatRequest/default " + v + " " + hex(new StreamsGroupHeartbeatRequestData(), v));
                System.out.println("StreamsGroupHeartbeatResponse/default " + v + " " + hex(new StreamsGroupHeartbeatResponseData(), v));
                System.out.println("StreamsGroupDescribeRequest/default " + v + " " + hex(new StreamsGroupDescribeRequestData(), v));
                System.out.println("StreamsGroupDescribeResponse/default " + v + " " + hex(new StreamsGroupDescribeResponseData(), v));
            }
        } else if (args.length >= 4 && args.length % 3 == 1 && args[0].equals("reencode")) {
            for (int i = 1; i < args.length; i += 3) {
                short v = Short.parseShort(args[i + 1]);
                System.out.println(hex(read(args[i], v, HexFormat.of().parseHex(args[i + 2])), v));
            }
        } else {
            System.err.println("usage: StreamsWire encode | reencode (<Name> <version> <hex>)...");
            System.exit(2);
        }
    }
}
