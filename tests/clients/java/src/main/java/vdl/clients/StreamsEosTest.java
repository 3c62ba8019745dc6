package vdl.clients;

import static vdl.clients.ClientTest.check;
import static vdl.clients.ClientTest.step;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.LongDeserializer;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.state.KeyValueStore;

/**
 * Kafka Streams 3.9 with processing.guarantee=exactly_once_v2 (issue 36), across a crash.
 *
 * <ol>
 *   <li>A count per key (RocksDB store "counts", record cache off, so every input record makes
 *       one output record: the key's new count) over a 3-partition input topic, written to an
 *       output topic. Under exactly-once, each key's output read with read_committed is exactly
 *       1, 2, ..., its count: a duplicate or a lost record shows as a repeated or a missing
 *       number.
 *   <li>The first instance runs in a child JVM. Once part of its output is committed, a record
 *       with the key "crash" is produced: the instance counts it, writes the count to the
 *       changelog and the output topic (inside its open transaction), waits 3 s so the producer
 *       has sent those records, and halts its JVM (no close, no commit, no abort).
 *   <li>A second instance starts on the same state directory (so the same transactional.id):
 *       it fences the dead one, whose open transaction is aborted; under EOS the unclean
 *       shutdown left no checkpoint, so it restores the store from the changelog read_committed,
 *       and resumes at the committed input offsets, counting the rest of the input.
 *   <li>Read with read_committed, the output holds each key's counts 1..count exactly once,
 *       "crash" with one count 1; read with read_uncommitted, it holds "crash"'s aborted count
 *       too (so the abort really filtered something).
 * </ol>
 *
 * Usage: StreamsEosTest BOOTSTRAP PREFIX N. Exits 0 on success, 1 with a message on failure.
 * (The child JVM runs this class with "instance" as its first argument.)
 */
public final class StreamsEosTest {
    private static final Duration STEP_TIMEOUT = Duration.ofSeconds(60);
    private static final int KEYS = 20;
    private static final String CRASH_KEY = "crash";
    /** The exit status of the instance that halts itself on the "crash" record. */
    private static final int CRASH_EXIT = 137;

    public static void main(String[] args) {
        if (args.length == 6 && args[0].equals("instance")) {
            runInstance(args[1], args[2], args[3], args[4], args[5]);
            return;
        }
        if (args.length != 3) {
            System.err.println("usage: StreamsEosTest BOOTSTRAP PREFIX N");
            System.exit(2);
        }
        try {
            run(args[0], args[1] + "-streams-eos", Math.max(KEYS, Integer.parseInt(args[2])));
            System.out.println("java Kafka Streams exactly_once_v2 test: OK (a count's output"
                    + " exactly once read_committed across a crash mid-transaction; the crashed"
                    + " transaction aborted, the store restored from the changelog)");
            System.exit(0);
        } catch (Throwable t) {
            System.err.println("java Kafka Streams exactly_once_v2 test: FAILED: " + t);
            t.printStackTrace();
            System.exit(1);
        }
    }

    static void run(String bootstrap, String prefix, int n) throws Exception {
        String input = prefix + "-input";
        String output = prefix + "-counts";
        String app = prefix + "-app";
        Path stateDir = Files.createTempDirectory("vdl-streams-eos");
        Map<String, Long> expected = new HashMap<>();

        try (Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap))) {
            admin.createTopics(List.of(new NewTopic(input, 3, (short) 3), new NewTopic(output, 3, (short) 3)))
                    .all().get();
        }
        produce(bootstrap, input, 0, n / 2, expected);
        step(n / 2 + " records over " + KEYS + " keys produced to " + input);

        Process first = new ProcessBuilder(List.of(
                Path.of(System.getProperty("java.home"), "bin", "java").toString(), "-Xmx256m",
                "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                "-cp", System.getProperty("java.class.path"), StreamsEosTest.class.getName(),
                "instance", bootstrap, app, input, output, stateDir.toString()))
                .inheritIO().start();
        try {
            List<ConsumerRecord<String, Long>> committed = new ArrayList<>();
            try (KafkaConsumer<String, Long> c = outputConsumer(bootstrap, output, "read_committed")) {
                Waits.until("the first instance (child JVM) commits output", STEP_TIMEOUT, () -> {
                    check(first.isAlive(), "the first instance exited with " + (first.isAlive() ? "" : first.exitValue()));
                    c.poll(Duration.ofMillis(200)).forEach(committed::add);
                    return committed.size() >= n / 4;
                });
            }
            step("the first instance (exactly_once_v2, child JVM) committed " + committed.size()
                    + "+ output records");
            produce(bootstrap, input, n / 2, 1, expected, CRASH_KEY);
            produce(bootstrap, input, n / 2 + 1, n - n / 2, expected);
            check(first.waitFor(STEP_TIMEOUT.toSeconds(), TimeUnit.SECONDS),
                    "the first instance did not halt on the \"" + CRASH_KEY + "\" record");
            check(first.exitValue() == CRASH_EXIT, "the first instance exited with "
                    + first.exitValue() + ", not " + CRASH_EXIT + " (halted on \"" + CRASH_KEY + "\")");
            step("the first instance halted mid-transaction on the \"" + CRASH_KEY + "\" record");
        } finally {
            first.destroyForcibly();
        }

        KafkaStreams second = start(bootstrap, app, input, output, stateDir.toString(), false);
        step("a second instance started on the same state directory");
        long total = expected.values().stream().mapToLong(Long::longValue).sum();
        List<ConsumerRecord<String, Long>> committed;
        try {
            try (KafkaConsumer<String, Long> c = outputConsumer(bootstrap, output, "read_committed")) {
                List<ConsumerRecord<String, Long>> seen = new ArrayList<>();
                Waits.until("the output holds " + total + " committed records", STEP_TIMEOUT, () -> {
                    check(second.state() != KafkaStreams.State.ERROR, "Streams in state ERROR");
                    c.poll(Duration.ofMillis(200)).forEach(seen::add);
                    return seen.size() >= total;
                });
            }
        } finally {
            second.close(Duration.ofSeconds(30));
        }
        step("the second instance restored the store and counted the rest; closed");

        committed = readToEnd(bootstrap, output, "read_committed");
        Map<String, List<Long>> perKey = new HashMap<>();
        committed.forEach(r -> perKey.computeIfAbsent(r.key(), k -> new ArrayList<>()).add(r.value()));
        check(perKey.keySet().equals(expected.keySet()),
                "keys in the output " + perKey.keySet() + ", not " + expected.keySet());
        for (Map.Entry<String, Long> e : expected.entrySet()) {
            List<Long> want = new ArrayList<>();
            for (long i = 1; i <= e.getValue(); i++) {
                want.add(i);
            }
            List<Long> got = perKey.get(e.getKey());
            check(got.equals(want), "key " + e.getKey() + ": committed counts " + got
                    + ", not exactly 1.." + e.getValue() + " (a duplicate or a lost record)");
        }
        check(committed.size() == total, committed.size() + " committed output records, not " + total);
        step("read_committed: " + committed.size() + " output records, each key's counts exactly"
                + " 1..count (" + (n + 1) + " input records, none lost, none twice)");

        List<ConsumerRecord<String, Long>> all = readToEnd(bootstrap, output, "read_uncommitted");
        long crashOnes = all.stream().filter(r -> r.key().equals(CRASH_KEY) && r.value() == 1L).count();
        check(crashOnes >= 2, "read_uncommitted shows \"" + CRASH_KEY + "\"=1 " + crashOnes
                + " times: the crashed instance's output was not in the log");
        step("read_uncommitted: " + all.size() + " records, the crashed transaction's \"" + CRASH_KEY
                + "\"=1 among them (" + (all.size() - committed.size()) + " aborted records filtered)");
    }

    /** The child JVM: one instance that halts on the "crash" record; prints nothing on success. */
    static void runInstance(String bootstrap, String app, String input, String output, String stateDir) {
        try {
            start(bootstrap, app, input, output, stateDir, true);
            Thread.sleep(STEP_TIMEOUT.toMillis() * 2);
            System.err.println("streams EOS instance: no \"" + CRASH_KEY + "\" record within "
                    + STEP_TIMEOUT.toSeconds() * 2 + " s");
            Runtime.getRuntime().halt(3);
        } catch (Throwable t) {
            System.err.println("streams EOS instance failed: " + t);
            t.printStackTrace();
            Runtime.getRuntime().halt(1);
        }
    }

    static void produce(String bootstrap, String topic, int from, int count, Map<String, Long> expected)
            throws Exception {
        produce(bootstrap, topic, from, count, expected, null);
    }

    /** Produces records {@code from..from+count} (keyed over KEYS keys, or all with {@code key}). */
    static void produce(String bootstrap, String topic, int from, int count, Map<String, Long> expected,
            String key) throws Exception {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            List<java.util.concurrent.Future<?>> acks = new ArrayList<>();
            for (int i = from; i < from + count; i++) {
                String k = key != null ? key : "key-" + (i * 7 + i / 3) % KEYS;
                acks.add(producer.send(new ProducerRecord<>(topic, k, "v" + i)));
                expected.merge(k, 1L, Long::sum);
            }
            // Idempotent (the default): each partition in send order.
            for (java.util.concurrent.Future<?> ack : acks) {
                ack.get();
            }
        }
    }

    /**
     * A running exactly_once_v2 instance of the count; with {@code crashOnKey}, one whose stream
     * thread halts the JVM 3 s after it has sent the "crash" key's count to the output topic.
     */
    static KafkaStreams start(String bootstrap, String app, String input, String output, String stateDir,
            boolean crashOnKey) throws Exception {
        StreamsBuilder b = new StreamsBuilder();
        KStream<String, Long> counts = b.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
                .groupByKey()
                .count(Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as("counts")
                        .withKeySerde(Serdes.String()).withValueSerde(Serdes.Long()))
                .toStream();
        // The sink first: its record is in the producer when the second branch halts the JVM.
        counts.to(output, Produced.with(Serdes.String(), Serdes.Long()));
        if (crashOnKey) {
            counts.foreach((k, v) -> {
                if (CRASH_KEY.equals(k)) {
                    try {
                        Thread.sleep(3000); // the producer sends within linger.ms (100 ms)
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                    }
                    Runtime.getRuntime().halt(CRASH_EXIT);
                }
            });
        }
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, app);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        // The crashed instance stays a group member until its session expires (Kafka's minimum,
        // 6 s). Its open transaction is aborted when the second instance (same state directory,
        // so same transactional.id) fences it, not by timeout; the timeout is twice Streams'
        // default, so a first transaction held up by a new changelog partition still without a
        // leader (on vdl up to ~5 s after creation) is not aborted under it.
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 6000);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 1000);
        p.put(StreamsConfig.producerPrefix(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG), 20000);
        KafkaStreams streams = new KafkaStreams(b.build(), p);
        streams.setUncaughtExceptionHandler(e -> {
            System.err.println("streams thread failed: " + e);
            e.printStackTrace();
            return StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        streams.start();
        Waits.until("the Streams application is RUNNING", STEP_TIMEOUT, () -> {
            check(streams.state() != KafkaStreams.State.ERROR
                    && streams.state() != KafkaStreams.State.PENDING_ERROR, "Streams in state " + streams.state());
            return streams.state() == KafkaStreams.State.RUNNING;
        });
        return streams;
    }

    /** A consumer of every partition of {@code topic} from its start, with this isolation level. */
    static KafkaConsumer<String, Long> outputConsumer(String bootstrap, String topic, String isolation) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, LongDeserializer.class.getName());
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation.toLowerCase(Locale.ROOT));
        KafkaConsumer<String, Long> c = new KafkaConsumer<>(p);
        List<TopicPartition> parts = c.partitionsFor(topic).stream()
                .map(i -> new TopicPartition(topic, i.partition())).toList();
        c.assign(parts);
        c.seekToBeginning(parts);
        return c;
    }

    /**
     * Every record of {@code topic} up to its end offsets for this isolation level (the last
     * stable offset for read_committed), in partition order.
     */
    static List<ConsumerRecord<String, Long>> readToEnd(String bootstrap, String topic, String isolation)
            throws Exception {
        List<ConsumerRecord<String, Long>> out = new ArrayList<>();
        try (KafkaConsumer<String, Long> c = outputConsumer(bootstrap, topic, isolation)) {
            Map<TopicPartition, Long> end = c.endOffsets(c.assignment());
            Waits.until(topic + " read to its end (" + isolation + ")", STEP_TIMEOUT, () -> {
                c.poll(Duration.ofMillis(200)).forEach(out::add);
                for (Map.Entry<TopicPartition, Long> e : end.entrySet()) {
                    if (c.position(e.getKey()) < e.getValue()) {
                        return false;
                    }
                }
                return true;
            });
        }
        return out;
    }
}
