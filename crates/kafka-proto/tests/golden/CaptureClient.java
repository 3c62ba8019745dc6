// Apache Kafka 3.9 Java client for the golden capture: exercises as many Kafka
// APIs as the Java client naturally uses. Every step is bounded by a timeout;
// a failing step is reported and the rest still run (error responses are
// useful vectors too).
//
// Usage (Java 17 source-launch, jars from scripts/kafka/fetch-kafka.sh):
//   java -cp "$LIBS/*" CaptureClient.java BOOTSTRAP [SASL_BOOTSTRAP]
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.*;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.apache.kafka.common.serialization.*;

public class CaptureClient {
    static final String TOPIC = "golden-java";
    static final String TMP_TOPIC = "golden-java-tmp";
    static final String GROUP = "golden-java-group";
    static final long T = 15; // seconds per step
    static String bs;
    static final List<String> failed = new ArrayList<>();

    interface Step { void run() throws Exception; }

    static void step(String name, Step s) {
        long t0 = System.nanoTime();
        try {
            s.run();
            System.out.printf("java: %-32s ok (%.1fs)%n", name, (System.nanoTime() - t0) / 1e9);
        } catch (Throwable e) {
            failed.add(name);
            System.out.printf("java: %-32s FAILED: %s%n", name, e);
        }
        System.out.flush();
    }

    /** Broker errors are fine (they are vectors); only report them. */
    static void get(KafkaFuture<?> f) throws Exception {
        try {
            f.get(T, TimeUnit.SECONDS);
        } catch (java.util.concurrent.ExecutionException e) {
            System.out.println("   (broker error, kept as vector): " + e.getCause());
        }
    }

    /** The deprecated whole-resource AlterConfigs (API 33), still sent by older tools. */
    @SuppressWarnings("deprecation")
    static void alterConfigs(Admin admin) throws Exception {
        get(admin.alterConfigs(Map.of(
            new ConfigResource(ConfigResource.Type.TOPIC, TMP_TOPIC),
            new Config(List.of(new ConfigEntry("retention.ms", "7200000"))))).all());
    }

    static Properties common() {
        Properties p = new Properties();
        p.put("bootstrap.servers", bs);
        p.put("client.id", "golden-java");
        p.put("request.timeout.ms", "10000");
        p.put("default.api.timeout.ms", "15000");
        return p;
    }

    static byte[] payload(String tag, int i) {
        byte[] b = new byte[100];
        Arrays.fill(b, (byte) 'x');
        byte[] h = String.format("%s-%03d-", tag, i).getBytes(StandardCharsets.UTF_8);
        System.arraycopy(h, 0, b, 0, h.length);
        return b;
    }

    public static void main(String[] args) throws Exception {
        bs = args[0];
        String saslBs = args.length > 1 ? args[1] : null;
        Admin admin = Admin.create(common());
        TopicPartition tp = new TopicPartition(TOPIC, 0);

        step("createTopics", () -> get(admin.createTopics(List.of(
            new NewTopic(TOPIC, 1, (short) 1), new NewTopic(TMP_TOPIC, 2, (short) 1))).all()));

        step("producer (5 codecs, defaults)", () -> {
            for (String codec : List.of("none", "gzip", "snappy", "lz4", "zstd")) {
                Properties p = common();
                // Defaults otherwise: acks=all, enable.idempotence=true -> InitProducerId.
                p.put("compression.type", codec);
                p.put("linger.ms", "50");
                try (Producer<String, byte[]> pr = new KafkaProducer<>(p, new StringSerializer(), new ByteArraySerializer())) {
                    List<java.util.concurrent.Future<RecordMetadata>> fs = new ArrayList<>();
                    for (int i = 0; i < 10; i++) {
                        ProducerRecord<String, byte[]> r = new ProducerRecord<>(TOPIC, "k" + i, payload(codec, i));
                        r.headers().add("codec", codec.getBytes(StandardCharsets.UTF_8));
                        fs.add(pr.send(r));
                    }
                    for (var f : fs) f.get(T, TimeUnit.SECONDS);
                }
            }
        });

        step("transactional producer", () -> {
            Properties p = common();
            p.put("transactional.id", "golden-java-txn");
            try (KafkaProducer<String, byte[]> pr = new KafkaProducer<>(p, new StringSerializer(), new ByteArraySerializer())) {
                pr.initTransactions();
                pr.beginTransaction();
                for (int i = 0; i < 3; i++) pr.send(new ProducerRecord<>(TOPIC, payload("txn", i)));
                pr.sendOffsetsToTransaction(Map.of(tp, new OffsetAndMetadata(1)),
                    new ConsumerGroupMetadata(GROUP + "-txn"));
                pr.commitTransaction();
                pr.beginTransaction();
                pr.send(new ProducerRecord<>(TOPIC, "aborted".getBytes(StandardCharsets.UTF_8)));
                pr.abortTransaction();
            }
        });

        step("consumer group (classic)", () -> consume(GROUP, "classic"));
        // KIP-848 protocol (ConsumerGroupHeartbeat); the capture broker enables it.
        step("consumer group (consumer proto)", () -> consume(GROUP + "-848", "consumer"));

        step("consumer offsets lookups", () -> {
            Properties p = common();
            p.put("group.id", GROUP);
            try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
                Duration d = Duration.ofSeconds(T);
                System.out.println("   beginning " + c.beginningOffsets(List.of(tp), d));
                System.out.println("   end " + c.endOffsets(List.of(tp), d));
                System.out.println("   forTimes " + c.offsetsForTimes(Map.of(tp, System.currentTimeMillis() - 60000), d));
                System.out.println("   committed " + c.committed(Set.of(tp), d));
            }
        });

        step("describeCluster", () -> get(admin.describeCluster().clusterId()));
        step("listTopics", () -> get(admin.listTopics().names()));
        step("describeTopics", () -> get(admin.describeTopics(List.of(TOPIC)).allTopicNames()));
        step("describeConfigs", () -> get(admin.describeConfigs(List.of(
            new ConfigResource(ConfigResource.Type.TOPIC, TOPIC),
            new ConfigResource(ConfigResource.Type.BROKER, "0"))).all()));
        step("alterConfigs (deprecated)", () -> alterConfigs(admin));
        step("incrementalAlterConfigs", () -> get(admin.incrementalAlterConfigs(Map.of(
            new ConfigResource(ConfigResource.Type.TOPIC, TMP_TOPIC),
            List.of(new AlterConfigOp(new ConfigEntry("retention.ms", "3600000"), AlterConfigOp.OpType.SET)))).all()));
        step("createPartitions", () -> get(admin.createPartitions(Map.of(TMP_TOPIC, NewPartitions.increaseTo(3))).all()));
        step("listConsumerGroups", () -> get(admin.listConsumerGroups().all()));
        step("describeConsumerGroups", () -> get(admin.describeConsumerGroups(List.of(GROUP, GROUP + "-848")).all()));
        step("listConsumerGroupOffsets", () -> get(admin.listConsumerGroupOffsets(GROUP).partitionsToOffsetAndMetadata()));
        step("alterConsumerGroupOffsets", () -> get(admin.alterConsumerGroupOffsets(GROUP + "-admin",
            Map.of(tp, new OffsetAndMetadata(3))).all()));
        step("deleteConsumerGroupOffsets", () -> get(admin.deleteConsumerGroupOffsets(GROUP + "-admin", Set.of(tp)).all()));
        step("listOffsets earliest/latest/ts/max", () -> {
            get(admin.listOffsets(Map.of(tp, OffsetSpec.earliest())).all());
            get(admin.listOffsets(Map.of(tp, OffsetSpec.latest())).all());
            get(admin.listOffsets(Map.of(tp, OffsetSpec.forTimestamp(System.currentTimeMillis() - 60000))).all());
            get(admin.listOffsets(Map.of(tp, OffsetSpec.maxTimestamp())).all());
        });
        step("deleteRecords", () -> get(admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(2))).all()));
        step("describeLogDirs", () -> get(admin.describeLogDirs(List.of(0)).allDescriptions()));
        step("describeProducers", () -> get(admin.describeProducers(List.of(tp)).all()));
        step("listTransactions", () -> get(admin.listTransactions().all()));
        step("describeTransactions", () -> get(admin.describeTransactions(List.of("golden-java-txn")).all()));
        step("describeFeatures", () -> get(admin.describeFeatures().featureMetadata()));
        step("describeMetadataQuorum", () -> get(admin.describeMetadataQuorum().quorumInfo()));
        step("describeClientQuotas", () -> get(admin.describeClientQuotas(ClientQuotaFilter.all()).entities()));
        step("describeUserScramCredentials", () -> get(admin.describeUserScramCredentials().all()));
        step("describeAcls (no authorizer)", () -> get(admin.describeAcls(AclBindingFilter.ANY).values()));
        step("listPartitionReassignments", () -> get(admin.listPartitionReassignments().reassignments()));
        step("electLeaders", () -> get(admin.electLeaders(ElectionType.PREFERRED, Set.of(tp)).all()));
        step("deleteConsumerGroups", () -> get(admin.deleteConsumerGroups(List.of(GROUP + "-admin")).all()));
        step("deleteTopics", () -> get(admin.deleteTopics(List.of(TMP_TOPIC)).all()));
        admin.close(Duration.ofSeconds(T));

        if (saslBs != null) {
            step("SASL PLAIN admin + producer", () -> {
                Properties p = common();
                p.put("bootstrap.servers", saslBs);
                p.put("security.protocol", "SASL_PLAINTEXT");
                p.put("sasl.mechanism", "PLAIN");
                p.put("sasl.jaas.config", "org.apache.kafka.common.security.plain.PlainLoginModule required "
                    + "username=\"alice\" password=\"alice-secret\";");
                try (Admin a = Admin.create(p)) {
                    get(a.describeCluster().clusterId());
                }
                try (Producer<String, byte[]> pr = new KafkaProducer<>(p, new StringSerializer(), new ByteArraySerializer())) {
                    pr.send(new ProducerRecord<>(TOPIC, payload("sasl", 0))).get(T, TimeUnit.SECONDS);
                }
            });
        }
        System.out.println("java: done, failed steps: " + (failed.isEmpty() ? "none" : failed));
        // Fail loudly so capture.sh does not write a partial set of fixtures.
        System.exit(failed.isEmpty() ? 0 : 1);
    }

    static void consume(String group, String protocol) throws Exception {
        Properties p = common();
        p.put("group.id", group);
        p.put("group.protocol", protocol);
        p.put("auto.offset.reset", "earliest");
        p.put("enable.auto.commit", "false");
        if (protocol.equals("classic")) {
            p.put("session.timeout.ms", "10000");
            // Short interval + a minimum poll time below, so a Heartbeat is sent.
            p.put("heartbeat.interval.ms", "500");
        }
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            c.subscribe(List.of(TOPIC));
            int got = 0;
            long start = System.currentTimeMillis();
            long deadline = start + 25_000;
            while ((got < 50 || System.currentTimeMillis() < start + 2_500)
                   && System.currentTimeMillis() < deadline) {
                got += c.poll(Duration.ofMillis(500)).count();
            }
            if (got == 0) throw new IllegalStateException("consumed nothing");
            c.commitSync(Duration.ofSeconds(T));
            System.out.println("   " + protocol + " consumed " + got);
        } // close() -> LeaveGroup (classic) / leave heartbeat (consumer)
    }
}
