package vdl.clients;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Apache Kafka's Java client (3.9) against a running vdl cluster.
 *
 * <ol>
 *   <li>CreateTopics through the Admin client.
 *   <li>A producer with default settings: in 3.x that means acks=all and enable.idempotence=true,
 *       so it starts with InitProducerId and sends sequenced batches. N records, each
 *       acknowledged at offset i.
 *   <li>A consumer group (subscribe, poll, commitSync) reads all N back in order.
 *   <li>A second member of the same group finds the committed offset N and nothing left to read.
 *   <li>Then {@link MultiPartition}: a 6-partition topic (keyed produce, a group of two members,
 *       a rebalance when one leaves) and CreatePartitions growing a topic from 2 to 4.
 * </ol>
 *
 * Usage: ClientTest BOOTSTRAP TOPIC N (the multi-partition part also creates TOPIC-p6 and
 * TOPIC-grow). Exits 0 on success, 1 with a message on any failure.
 * Every step is bounded by a timeout.
 */
public final class ClientTest {
    private static final Duration STEP_TIMEOUT = Duration.ofSeconds(60);
    static final long START = System.nanoTime();

    static void check(boolean ok, String what) {
        if (!ok) {
            throw new AssertionError(what);
        }
    }

    public static void main(String[] args) {
        if (args.length != 3) {
            System.err.println("usage: ClientTest BOOTSTRAP TOPIC N");
            System.exit(2);
        }
        String bootstrap = args[0];
        String topic = args[1];
        int n = Integer.parseInt(args[2]);
        try {
            run(bootstrap, topic, n);
            System.out.println("java client test: OK (" + n + " records produced with default"
                    + " (idempotent) settings, consumed and committed by a group)");
            MultiPartition.run(bootstrap, topic);
            System.out.println("java client multi-partition test: OK (" + MultiPartition.PARTITIONS
                    + "-partition topic: keyed produce, a two-member group, rebalance on leave;"
                    + " CreatePartitions 2 -> 4)");
            System.exit(0);
        } catch (Throwable t) {
            System.err.println("java client test: FAILED: " + t);
            t.printStackTrace();
            System.exit(1);
        }
    }

    static void run(String bootstrap, String topic, int n) throws Exception {
        // 1. The topic, replicated on the three nodes.
        Properties ap = new Properties();
        ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        ap.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 30000);
        try (Admin admin = Admin.create(ap)) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 3)))
                    .all().get(STEP_TIMEOUT.toSeconds(), TimeUnit.SECONDS);
            step("created topic " + topic);
        }

        // 2. Producer, default settings apart from the address and serializers.
        Properties pp = new Properties();
        pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        List<String> values = new ArrayList<>();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(pp)) {
            List<Future<RecordMetadata>> acks = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                String v = "java-" + i;
                values.add(v);
                acks.add(producer.send(new ProducerRecord<>(topic, "k" + (i % 7), v)));
            }
            producer.flush();
            for (int i = 0; i < n; i++) {
                RecordMetadata md = acks.get(i).get(STEP_TIMEOUT.toSeconds(), TimeUnit.SECONDS);
                check(md.offset() == i, "record " + i + " acknowledged at offset " + md.offset());
            }
            step("produced " + n + " records (default producer settings: idempotent, acks=all)");
        }

        // 3. A consumer group reads everything, in order, and commits.
        String group = "java-group-" + topic;
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(consumerProps(bootstrap, group))) {
            consumer.subscribe(List.of(topic));
            List<ConsumerRecord<String, String>> got = new ArrayList<>();
            long deadline = System.nanoTime() + STEP_TIMEOUT.toNanos();
            while (got.size() < n && System.nanoTime() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    got.add(r);
                }
            }
            check(got.size() == n, "consumed " + got.size() + " of " + n + " records");
            for (int i = 0; i < n; i++) {
                check(got.get(i).offset() == i, "record " + i + " at offset " + got.get(i).offset());
                check(got.get(i).value().equals(values.get(i)),
                        "record " + i + " is " + got.get(i).value() + ", expected " + values.get(i));
            }
            consumer.commitSync(Duration.ofSeconds(30));
            Map<TopicPartition, OffsetAndMetadata> c = consumer.committed(Set.of(tp), Duration.ofSeconds(30));
            check(c.get(tp) != null && c.get(tp).offset() == n, "committed offset " + c.get(tp));
            step("group " + group + " consumed " + n + " records in order and committed offset " + n);
        }

        // 4. A new member of the group resumes at the commit: nothing left to read.
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(consumerProps(bootstrap, group))) {
            Map<TopicPartition, OffsetAndMetadata> c = consumer.committed(Set.of(tp), Duration.ofSeconds(30));
            check(c.get(tp) != null && c.get(tp).offset() == n, "committed offset after rejoin " + c.get(tp));
            consumer.subscribe(List.of(topic));
            int extra = 0;
            long until = System.nanoTime() + Duration.ofSeconds(3).toNanos();
            while (System.nanoTime() < until) {
                extra += consumer.poll(Duration.ofMillis(500)).count();
            }
            check(extra == 0, "a resumed member read " + extra + " records again");
            step("a new member of " + group + " resumed at offset " + n);
        }
    }

    static Properties consumerProps(String bootstrap, String group) {
        Properties cp = new Properties();
        cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        cp.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        cp.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 30000);
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        return cp;
    }

    static void step(String what) {
        System.out.printf("  [%5.1fs] %s%n", (System.nanoTime() - START) / 1e9, what);
    }
}
