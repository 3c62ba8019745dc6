package vdl.clients;

import static vdl.clients.ClientTest.check;
import static vdl.clients.ClientTest.step;

import java.io.FileOutputStream;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.connect.cli.ConnectDistributed;
import org.apache.kafka.connect.runtime.Connect;

/**
 * Kafka Connect 3.9 distributed with exactly-once source support (KIP-618, issue 36), across a
 * worker crash.
 *
 * <ol>
 *   <li>A worker with exactly.once.source.support=enabled runs in a child JVM (Connect's own
 *       ConnectDistributed main, a properties file). A FileStreamSource connector with
 *       exactly.once.support=required (the connector says it supports it; otherwise Connect
 *       refuses it) and transaction.boundary=poll reads a file into a 1-partition topic: each
 *       poll (the lines read since the last one) is one transaction holding its records and
 *       the source's offset, written to the offsets topic in the same transaction. (The
 *       default batch.size, 2000 lines: with a small one, FileStreamSource leaves lines read
 *       past the batch in its buffer until the file grows again, on any broker.)
 *   <li>The file grows by 20 lines every 100 ms; once a quarter of them is appended and some
 *       are committed, the worker is killed (SIGKILL, no shutdown), mid-stream (whether a
 *       transaction is open at that instant is up to timing; the steps say how far the log
 *       went).
 *   <li>A second worker (in this JVM) joins the same Connect cluster: it takes over the
 *       connector and its task once the dead worker's session expires, fences the dead task's
 *       transactional producer (Admin fenceProducers), and the task resumes at the offset
 *       committed with the last committed transaction. More lines are appended.
 *   <li>The topic read with read_committed holds every line exactly once, in order.
 * </ol>
 *
 * Usage: ConnectEosTest BOOTSTRAP PREFIX N. Exits 0 on success, 1 with a message on failure.
 * Every wait is bounded.
 */
public final class ConnectEosTest {
    private static final Duration STEP_TIMEOUT = Duration.ofSeconds(60);

    public static void main(String[] args) {
        if (args.length != 3) {
            System.err.println("usage: ConnectEosTest BOOTSTRAP PREFIX N");
            System.exit(2);
        }
        try {
            run(args[0], args[1] + "-connect-eos", Math.max(80, Math.min(Integer.parseInt(args[2]), 2000)));
            System.out.println("java Kafka Connect exactly-once source test: OK (FileStreamSource"
                    + " with exactly.once.support=required; a worker killed mid-stream; every line"
                    + " exactly once read_committed after the takeover)");
            System.exit(0);
        } catch (Throwable t) {
            System.err.println("java Kafka Connect exactly-once source test: FAILED: " + t);
            t.printStackTrace();
            System.exit(1);
        }
    }

    static void run(String bootstrap, String prefix, int n) throws Exception {
        String data = prefix + "-data";
        Path dir = Files.createTempDirectory("vdl-connect-eos");
        Path input = dir.resolve("input.txt");
        Files.createFile(input);

        Map<String, String> worker = new HashMap<>();
        worker.put("bootstrap.servers", bootstrap);
        worker.put("group.id", prefix);
        worker.put("config.storage.topic", prefix + "-configs");
        worker.put("offset.storage.topic", prefix + "-offsets");
        worker.put("status.storage.topic", prefix + "-status");
        worker.put("key.converter", "org.apache.kafka.connect.storage.StringConverter");
        worker.put("value.converter", "org.apache.kafka.connect.storage.StringConverter");
        worker.put("exactly.once.source.support", "enabled");
        worker.put("rest.advertised.host.name", "127.0.0.1");
        worker.put("plugin.discovery", "service_load");
        // The dead worker's tasks move as soon as its session (6 s) expires, not after the
        // incremental cooperative protocol's default delay of 5 minutes.
        worker.put("scheduled.rebalance.max.delay.ms", "0");
        worker.put("session.timeout.ms", "6000");
        worker.put("heartbeat.interval.ms", "1000");
        worker.put("offset.flush.interval.ms", "500");

        try (Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap))) {
            admin.createTopics(List.of(new NewTopic(data, 1, (short) 3))).all().get();
        }

        int port;
        try (ServerSocket s = new ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress())) {
            port = s.getLocalPort();
        }
        Map<String, String> first = new HashMap<>(worker);
        first.put("listeners", "http://127.0.0.1:" + port);
        Path props = dir.resolve("worker-1.properties");
        Properties p = new Properties();
        p.putAll(first);
        try (FileOutputStream out = new FileOutputStream(props.toFile())) {
            p.store(out, "ConnectEosTest's first worker");
        }
        Process child = new ProcessBuilder(List.of(
                Path.of(System.getProperty("java.home"), "bin", "java").toString(), "-Xmx256m",
                "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                "-cp", System.getProperty("java.class.path"), ConnectDistributed.class.getName(),
                props.toString())).inheritIO().start();
        List<String> lines = new ArrayList<>();
        try {
            String base = "http://127.0.0.1:" + port + "/";
            Waits.until("the first worker (child JVM) answers on " + base, STEP_TIMEOUT, () -> {
                check(child.isAlive(), "the first worker exited with " + (child.isAlive() ? "" : child.exitValue()));
                return ConnectDistributedTest.get(base + "connectors") != null;
            });
            step("a worker with exactly.once.source.support=enabled runs in a child JVM");
            ConnectDistributedTest.putConnector(base, "eos-source", Map.of(
                    "connector.class", "org.apache.kafka.connect.file.FileStreamSourceConnector",
                    "tasks.max", "1", "file", input.toString(), "topic", data,
                    "exactly.once.support", "required", "transaction.boundary", "poll"));
            ConnectDistributedTest.awaitRunning(base, "eos-source");
            step("eos-source (FileStreamSource, exactly.once.support=required,"
                    + " transaction.boundary=poll) and its task RUNNING");

            // 20 lines every 100 ms; the worker is killed once a quarter of the lines is
            // appended and some are committed, while the source is still busy; the appends go on.
            try (KafkaConsumer<String, String> c = consumer(bootstrap, data, "read_committed")) {
                List<String> committed = new ArrayList<>();
                boolean killed = false;
                for (int i = 0; i < n / 2 || !killed; i += 20) {
                    if (i < n / 2) {
                        appendLines(input, lines, i, Math.min(i + 20, n / 2));
                    }
                    Thread.sleep(100);
                    if (!killed) {
                        check(child.isAlive(), "the first worker exited");
                        c.poll(Duration.ofMillis(1)).forEach(r -> committed.add(r.value()));
                        if (lines.size() >= n / 4 && !committed.isEmpty()) {
                            child.destroyForcibly();
                            killed = true;
                            step("the first worker killed (SIGKILL) with " + committed.size()
                                    + "+ lines committed, " + lines.size() + " appended");
                        }
                    }
                    check(i < n * 10, "no line of " + data + " committed by the first worker");
                }
            }
        } finally {
            child.destroyForcibly();
        }
        check(child.waitFor(30, java.util.concurrent.TimeUnit.SECONDS), "the first worker did not die");
        step(lines.size() + " lines appended; " + data + " ends at offset " + endOffset(bootstrap, data));

        Map<String, String> second = new HashMap<>(worker);
        second.put("listeners", "http://127.0.0.1:0");
        Connect<?> connect = ConnectDistributedTest.startWorker(second);
        try {
            String base = connect.rest().serverUrl().toString();
            String me = connect.rest().serverUrl().getHost() + ":" + connect.rest().serverUrl().getPort();
            Waits.until("the second worker runs eos-source's task", STEP_TIMEOUT, () -> {
                var s = ConnectDistributedTest.get(base + "connectors/eos-source/status");
                var task = s == null ? null : s.path("tasks").path(0);
                if (task != null && "FAILED".equals(task.path("state").asText())) {
                    throw new AssertionError("eos-source's task failed: " + task.path("trace").asText());
                }
                return task != null && "RUNNING".equals(task.path("state").asText())
                        && me.equals(task.path("worker_id").asText());
            });
            step("a second worker took over eos-source and runs its task");
            appendLines(input, lines, n / 2, n);
            List<String> got = new ArrayList<>();
            try (KafkaConsumer<String, String> c = consumer(bootstrap, data, "read_committed")) {
                try {
                    Waits.until(data + " holds " + n + " committed lines", STEP_TIMEOUT, () -> {
                        c.poll(Duration.ofMillis(200)).forEach(r -> got.add(r.value()));
                        return got.size() >= n;
                    });
                } catch (AssertionError e) {
                    throw new AssertionError(e.getMessage() + ": " + got.size() + " read, the last "
                            + (got.isEmpty() ? "none" : got.get(got.size() - 1)) + "; " + data + " ends at "
                            + endOffset(bootstrap, data) + "; status "
                            + ConnectDistributedTest.get(base + "connectors/eos-source/status"));
                }
                Thread.sleep(1000); // anything committed twice would follow now
                c.poll(Duration.ofMillis(500)).forEach(r -> got.add(r.value()));
            }
            check(got.equals(lines), "read_committed " + data + " is not every line once in order: "
                    + got.size() + " records for " + n + " lines, first difference at "
                    + ConnectDistributedTest.firstDifference(got, lines));
            long end = endOffset(bootstrap, data);
            step("read_committed: " + data + " holds the " + n + " lines exactly once, in order ("
                    + end + " offsets: records of aborted transactions and markers too)");
        } finally {
            connect.stop();
        }
    }

    /** Appends lines {@code from..to} ("line-I") to the file and to {@code lines}. */
    static void appendLines(Path file, List<String> lines, int from, int to) throws Exception {
        List<String> chunk = new ArrayList<>();
        for (int i = from; i < to; i++) {
            chunk.add("line-" + i);
        }
        ConnectDistributedTest.append(file, chunk);
        lines.addAll(chunk);
    }

    static KafkaConsumer<String, String> consumer(String bootstrap, String topic, String isolation) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        KafkaConsumer<String, String> c = new KafkaConsumer<>(p);
        TopicPartition tp = new TopicPartition(topic, 0);
        c.assign(List.of(tp));
        c.seekToBeginning(List.of(tp));
        return c;
    }

    static long endOffset(String bootstrap, String topic) throws Exception {
        try (Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap))) {
            TopicPartition tp = new TopicPartition(topic, 0);
            return admin.listOffsets(Map.of(tp, OffsetSpec.latest())).all().get().get(tp).offset();
        }
    }
}
