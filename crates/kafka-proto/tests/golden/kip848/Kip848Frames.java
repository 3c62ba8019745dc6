import java.nio.ByteBuffer;
import java.util.List;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.message.*;
import org.apache.kafka.common.protocol.*;

/** Prints the bodies Kafka 4.1.1's own classes encode for KIP-848's messages, in hex. */
public class Kip848Frames {
    static void print(String label, ApiMessage m, short version) {
        ObjectSerializationCache cache = new ObjectSerializationCache();
        int size = m.size(cache, version);
        ByteBuffer buf = ByteBuffer.allocate(size);
        m.write(new ByteBufferAccessor(buf), cache, version);
        StringBuilder sb = new StringBuilder();
        for (byte b : buf.array()) sb.append(String.format("%02x", b));
        System.out.println(label + " v" + version + " " + sb);
    }
    public static void main(String[] a) {
        Uuid t = new Uuid(0x0102030405060708L, 0x090a0b0c0d0e0f10L);
        var req = new ConsumerGroupHeartbeatRequestData().setGroupId("g").setMemberId("m1").setMemberEpoch(0)
            .setInstanceId(null).setRackId("r").setRebalanceTimeoutMs(30000)
            .setSubscribedTopicNames(List.of("a", "b")).setSubscribedTopicRegex("x.*").setServerAssignor("uniform")
            .setTopicPartitions(List.of(new ConsumerGroupHeartbeatRequestData.TopicPartitions().setTopicId(t).setPartitions(List.of(0, 2))));
        print("hb_req", req, (short) 1);
        print("hb_req", req.setSubscribedTopicRegex(null), (short) 0);
        var resp = new ConsumerGroupHeartbeatResponseData().setErrorCode((short) 0).setMemberId("m1").setMemberEpoch(5)
            .setHeartbeatIntervalMs(5000).setAssignment(new ConsumerGroupHeartbeatResponseData.Assignment()
                .setTopicPartitions(List.of(new ConsumerGroupHeartbeatResponseData.TopicPartitions().setTopicId(t).setPartitions(List.of(1, 3)))));
        print("hb_resp", resp, (short) 1);
        print("hb_resp_null", new ConsumerGroupHeartbeatResponseData().setErrorCode((short) 110).setErrorMessage("fenced").setMemberEpoch(-1), (short) 0);
        var tp = new ConsumerGroupDescribeResponseData.TopicPartitions().setTopicId(t).setTopicName("a").setPartitions(List.of(0));
        var member = new ConsumerGroupDescribeResponseData.Member().setMemberId("m1").setInstanceId("i").setMemberEpoch(3)
            .setClientId("c").setClientHost("/127.0.0.1").setSubscribedTopicNames(List.of("a"))
            .setAssignment(new ConsumerGroupDescribeResponseData.Assignment().setTopicPartitions(List.of(tp)))
            .setTargetAssignment(new ConsumerGroupDescribeResponseData.Assignment().setTopicPartitions(List.of(tp)))
            .setMemberType((byte) 1);
        var desc = new ConsumerGroupDescribeResponseData().setGroups(List.of(new ConsumerGroupDescribeResponseData.DescribedGroup()
            .setGroupId("g").setGroupState("Stable").setGroupEpoch(3).setAssignmentEpoch(3).setAssignorName("uniform")
            .setMembers(List.of(member))));
        print("desc_resp", desc, (short) 0);
        print("desc_resp", desc, (short) 1);
        print("desc_req", new ConsumerGroupDescribeRequestData().setGroupIds(List.of("g", "h")).setIncludeAuthorizedOperations(true), (short) 1);
        var dg = new DescribeGroupsResponseData().setGroups(List.of(new DescribeGroupsResponseData.DescribedGroup()
            .setGroupId("g").setErrorCode((short) 69).setErrorMessage("Group g is not a classic group.").setGroupState("Dead")));
        print("dg_resp", dg, (short) 6);
    }
}
