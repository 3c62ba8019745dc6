package vdl.clients;

import static vdl.clients.ClientTest.check;
import static vdl.clients.ClientTest.step;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.LongDeserializer;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StoreQueryParameters;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.QueryableStoreTypes;
import org.apache.kafka.streams.state.ReadOnlyKeyValueStore;

/**
 * A Kafka Streams 3.9 application with a KTable, at-least-once (issue 35).
 *
 * <ol>
 *   <li>Input: N records over 20 keys in a 3-partition topic. The application counts records per
 *       key into a KTable (store "counts", RocksDB) and writes its changes to an output topic.
 *   <li>Streams creates the store's changelog topic itself: APP-counts-changelog, 3 partitions,
 *       cleanup.policy=compact (checked through the Admin client).
 *   <li>The store (interactive query) and the output topic's latest value per key both equal the
 *       counts computed here.
 *   <li>The application closes and a new instance starts with an empty state directory: it
 *       restores the table from the compacted changelog (the store has every count again before
 *       new input), then counts N/2 more records on top.
 * </ol>
 *
 * Usage: StreamsKTableTest BOOTSTRAP PREFIX N. Exits 0 on success, 1 with a message on failure.
 */
public final class StreamsKTableTest {
    private static final Duration STEP_TIMEOUT = Duration.ofSeconds(60);
    private static final int KEYS = 20;

    public static void main(String[] args) {
        if (args.length != 3) {
            System.err.println("usage: StreamsKTableTest BOOTSTRAP PREFIX N");
            System.exit(2);
        }
        try {
            run(args[0], args[1] + "-streams", Math.max(KEYS, Integer.parseInt(args[2])));
            System.out.println("java Kafka Streams test: OK (KTable count, compacted changelog"
                    + " created by Streams, restore from the changelog into a fresh state)");
            System.exit(0);
        } catch (Throwable t) {
            System.err.println("java Kafka Streams test: FAILED: " + t);
            t.printStackTrace();
            System.exit(1);
        }
    }

    static void run(String bootstrap, String prefix, int n) throws Exception {
        String input = prefix + "-input";
        String output = prefix + "-counts";
        String app = prefix + "-app";
        String changelog = app + "-counts-changelog";
        Map<String, Long> expected = new HashMap<>();

        try (Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap))) {
            admin.createTopics(List.of(new NewTopic(input, 3, (short) 3), new NewTopic(output, 3, (short) 3)))
                    .all().get();
            produce(bootstrap, input, 0, n, expected);
            step(n + " records over " + KEYS + " keys produced to " + input);

            KafkaStreams streams = start(bootstrap, app, input, output);
            awaitStore(streams, expected, "the KTable counts every key");
            awaitOutput(bootstrap, output, expected);
            step("store \"counts\" and " + output + " hold the count of every key");

            Waits.until(changelog + " exists", STEP_TIMEOUT,
                    () -> admin.listTopics().names().get().contains(changelog));
            TopicDescription d = admin.describeTopics(List.of(changelog)).allTopicNames().get().get(changelog);
            check(d.partitions().size() == 3, changelog + " has " + d.partitions().size() + " partitions");
            ConfigResource r = new ConfigResource(ConfigResource.Type.TOPIC, changelog);
            Config c = admin.describeConfigs(List.of(r)).all().get().get(r);
            check("compact".equals(c.get("cleanup.policy").value()),
                    changelog + " has cleanup.policy=" + c.get("cleanup.policy").value());
            step("Streams created " + changelog + ": 3 partitions, cleanup.policy=compact");

            streams.close(Duration.ofSeconds(30));
            step("application closed");
            streams = start(bootstrap, app, input, output);
            awaitStore(streams, expected, "a fresh instance restores the table from " + changelog);
            step("a new instance with an empty state directory restored every count from " + changelog);
            produce(bootstrap, input, n, n / 2, expected);
            awaitStore(streams, expected, "the restored table counts the new records on top");
            awaitOutput(bootstrap, output, expected);
            step(n / 2 + " more records counted on top of the restored table");
            streams.close(Duration.ofSeconds(30));
        }
    }

    static void produce(String bootstrap, String topic, int from, int count, Map<String, Long> expected)
            throws Exception {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            for (int i = from; i < from + count; i++) {
                // Keys in an uneven mix, so the counts differ from key to key.
                String key = "key-" + (i * 7 + i / 3) % KEYS;
                producer.send(new ProducerRecord<>(topic, key, "v" + i));
                expected.merge(key, 1L, Long::sum);
            }
            producer.flush();
        }
    }

    /** A running instance of the application with a new, empty state directory. */
    static KafkaStreams start(String bootstrap, String app, String input, String output) throws Exception {
        StreamsBuilder b = new StreamsBuilder();
        KTable<String, Long> counts = b.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
                .groupByKey()
                .count(Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as("counts")
                        .withKeySerde(Serdes.String()).withValueSerde(Serdes.Long()));
        counts.toStream().to(output, Produced.with(Serdes.String(), Serdes.Long()));
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, app);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.AT_LEAST_ONCE);
        p.put(StreamsConfig.STATE_DIR_CONFIG, Files.createTempDirectory("vdl-streams-test").toString());
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        // Streams does not leave its group on close: the next instance waits for the old
        // member's session to expire (Kafka's minimum, 6 s, instead of the default 45 s).
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 6000);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 1000);
        KafkaStreams streams = new KafkaStreams(b.build(), p);
        streams.setUncaughtExceptionHandler(e -> {
            System.err.println("streams thread failed: " + e);
            e.printStackTrace();
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        streams.start();
        Waits.until("the Streams application is RUNNING", STEP_TIMEOUT, () -> {
            check(streams.state() != KafkaStreams.State.ERROR
                    && streams.state() != KafkaStreams.State.PENDING_ERROR, "Streams in state " + streams.state());
            return streams.state() == KafkaStreams.State.RUNNING;
        });
        return streams;
    }

    static void awaitStore(KafkaStreams streams, Map<String, Long> expected, String what) throws Exception {
        Waits.until(what, STEP_TIMEOUT, () -> {
            check(streams.state() != KafkaStreams.State.ERROR, "Streams in state ERROR");
            ReadOnlyKeyValueStore<String, Long> store = streams.store(
                    StoreQueryParameters.fromNameAndType("counts", QueryableStoreTypes.keyValueStore()));
            for (Map.Entry<String, Long> e : expected.entrySet()) {
                if (!e.getValue().equals(store.get(e.getKey()))) {
                    return false;
                }
            }
            return store.approximateNumEntries() >= 0;
        });
    }

    /** Reads the output topic from the start until each key's latest value is its count. */
    static void awaitOutput(String bootstrap, String topic, Map<String, Long> expected) throws Exception {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, LongDeserializer.class.getName());
        try (KafkaConsumer<String, Long> c = new KafkaConsumer<>(p)) {
            List<org.apache.kafka.common.TopicPartition> parts = c.partitionsFor(topic).stream()
                    .map(i -> new org.apache.kafka.common.TopicPartition(topic, i.partition())).toList();
            c.assign(parts);
            c.seekToBeginning(parts);
            Map<String, Long> latest = new HashMap<>();
            Waits.until(topic + " has every key's count", STEP_TIMEOUT, () -> {
                for (ConsumerRecord<String, Long> r : c.poll(Duration.ofMillis(200))) {
                    latest.put(r.key(), r.value());
                }
                return latest.equals(expected);
            });
        }
    }
}
