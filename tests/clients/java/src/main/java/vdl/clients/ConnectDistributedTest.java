package vdl.clients;

import static vdl.clients.ClientTest.check;
import static vdl.clients.ClientTest.step;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.connect.cli.ConnectDistributed;
import org.apache.kafka.connect.runtime.Connect;

/**
 * Kafka Connect 3.9 in distributed mode, run in this process against the cluster (issue 35).
 *
 * <ol>
 *   <li>A worker starts and creates its internal topics itself, with Connect's defaults: the
 *       config topic with 1 partition, offsets with 25, status with 5, all replication factor 3
 *       and cleanup.policy=compact (checked through the Admin client). The test then sets
 *       segment.ms=1000 on the three, so their records leave the active segment and the log
 *       cleaner has something to compact.
 *   <li>A FileStreamSource connector reads a file into a topic and a FileStreamSink connector
 *       writes that topic to another file (both created through the worker's REST API); the
 *       file is written in chunks; the output file ends up equal to the input, and the source's
 *       offset read back from the offsets topic is the input's size; the sink's group committed
 *       every record. The source is reconfigured (batch.size=100), which writes its config,
 *       task config and commit to the config topic again under the same keys.
 *   <li>Against vdl (system property vdl.metrics): the log cleaner compacted something
 *       (vdl_cleaner_passes_total and vdl_cleaner_removed_records_total grow) and cleaned the
 *       config topic after the reconfiguration (vdl_partition_last_clean_timestamp_seconds).
 *       The test sets min.cleanable.dirty.ratio=0.01 on the internal topics for that.
 *   <li>The worker stops, more lines are appended, a new worker starts: it finds both connectors
 *       in the config topic (nothing is submitted again; the source with batch.size=100), the
 *       source resumes at its committed
 *       offset: the output equals the input exactly (nothing lost, nothing read twice) and the
 *       topic holds exactly one record per line.
 * </ol>
 *
 * Usage: ConnectDistributedTest BOOTSTRAP PREFIX N (N lines before the restart, N/4 after).
 * Exits 0 on success, 1 with a message on failure. Every wait is bounded.
 */
public final class ConnectDistributedTest {
    private static final Duration STEP_TIMEOUT = Duration.ofSeconds(60);
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final HttpClient HTTP = HttpClient.newHttpClient();

    public static void main(String[] args) {
        if (args.length != 3) {
            System.err.println("usage: ConnectDistributedTest BOOTSTRAP PREFIX N");
            System.exit(2);
        }
        try {
            run(args[0], args[1] + "-connect", Math.max(8, Math.min(Integer.parseInt(args[2]), 2000)));
            System.out.println("java Kafka Connect test: OK (default compacted internal topics,"
                    + " file source and sink end to end, restart resumes at the committed offset)");
            System.exit(0);
        } catch (Throwable t) {
            System.err.println("java Kafka Connect test: FAILED: " + t);
            t.printStackTrace();
            System.exit(1);
        }
    }

    static void run(String bootstrap, String prefix, int n) throws Exception {
        String configs = prefix + "-configs";
        String offsets = prefix + "-offsets";
        String status = prefix + "-status";
        String data = prefix + "-data";
        Path dir = Files.createTempDirectory("vdl-connect-test");
        Path input = dir.resolve("input.txt");
        Path output = dir.resolve("output.txt");
        Files.createFile(input);

        Map<String, String> worker = new HashMap<>();
        worker.put("bootstrap.servers", bootstrap);
        worker.put("group.id", prefix);
        worker.put("config.storage.topic", configs);
        worker.put("offset.storage.topic", offsets);
        worker.put("status.storage.topic", status);
        worker.put("key.converter", "org.apache.kafka.connect.storage.StringConverter");
        worker.put("value.converter", "org.apache.kafka.connect.storage.StringConverter");
        worker.put("offset.flush.interval.ms", "500");
        worker.put("listeners", "http://127.0.0.1:0");
        worker.put("rest.advertised.host.name", "127.0.0.1");
        worker.put("plugin.discovery", "service_load");
        // Partitions and replication factors of the internal topics: Connect's defaults
        // (config 1, offsets 25, status 5; replication factor 3).

        try (Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap))) {
            admin.createTopics(List.of(new NewTopic(data, 1, (short) 3))).all().get();
            step("starting a Connect worker (group " + prefix + ")");

            Connect<?> connect = startWorker(worker);
            step("Connect worker started, REST at " + connect.rest().serverUrl());
            checkInternalTopic(admin, configs, 1);
            checkInternalTopic(admin, offsets, 25);
            checkInternalTopic(admin, status, 5);
            step("internal topics created by Connect: " + configs + " 1, " + offsets + " 25, "
                    + status + " 5 partitions, replication factor 3, cleanup.policy=compact");
            List<AlterConfigOp> roll = List.of(
                    new AlterConfigOp(new ConfigEntry("segment.ms", "1000"), AlterConfigOp.OpType.SET),
                    new AlterConfigOp(new ConfigEntry("min.cleanable.dirty.ratio", "0.01"),
                            AlterConfigOp.OpType.SET));
            Map<ConfigResource, Collection<AlterConfigOp>> alter = new HashMap<>();
            for (String t : List.of(configs, offsets, status)) {
                alter.put(new ConfigResource(ConfigResource.Type.TOPIC, t), roll);
            }
            admin.incrementalAlterConfigs(alter).all().get();

            String base = connect.rest().serverUrl().toString();
            putConnector(base, "file-source", Map.of(
                    "connector.class", "org.apache.kafka.connect.file.FileStreamSourceConnector",
                    "tasks.max", "1", "file", input.toString(), "topic", data));
            putConnector(base, "file-sink", Map.of(
                    "connector.class", "org.apache.kafka.connect.file.FileStreamSinkConnector",
                    "tasks.max", "1", "file", output.toString(), "topics", data));
            awaitRunning(base, "file-source");
            awaitRunning(base, "file-sink");
            step("file-source and file-sink connectors and their tasks RUNNING");

            long cleanerPassesBefore = Waits.vdlCounter("vdl_cleaner_passes_total");
            long removedBefore = Waits.vdlCounter("vdl_cleaner_removed_records_total");
            // In chunks, so the source commits several offsets for its file (records with the
            // same key in different segments of the offsets topic: something to compact).
            List<String> lines = new ArrayList<>();
            int chunks = 4;
            for (int c = 0; c < chunks; c++) {
                List<String> chunk = new ArrayList<>();
                for (int i = c * n / chunks; i < (c + 1) * n / chunks; i++) {
                    chunk.add("line-" + i);
                }
                append(input, chunk);
                lines.addAll(chunk);
                awaitOutput(output, lines);
                awaitSourceOffset(bootstrap, offsets, input, Files.size(input));
                if (c + 1 < chunks) {
                    Thread.sleep(1100); // past segment.ms: the next offset lands in a new segment
                }
            }
            step(n + " lines went file -> source -> " + data + " -> sink -> file, in order;"
                    + " the offsets topic holds the source's position " + Files.size(input));
            awaitSinkCommitted(admin, "connect-file-sink", new TopicPartition(data, 0), n);
            step("the sink's group connect-file-sink committed " + n);

            // A changed source config: the config topic gets the connector's config, its task's
            // config and a commit again, under the keys it already holds.
            long reconfiguredFrom = System.currentTimeMillis() / 1000;
            putConnector(base, "file-source", Map.of(
                    "connector.class", "org.apache.kafka.connect.file.FileStreamSourceConnector",
                    "tasks.max", "1", "file", input.toString(), "topic", data, "batch.size", "100"));
            awaitRunning(base, "file-source");
            String updated = base;
            Waits.until("the worker runs file-source with batch.size=100", STEP_TIMEOUT,
                    () -> "100".equals(get(updated + "connectors/file-source/config").path("batch.size").asText()));
            step("file-source reconfigured (batch.size=100)");
            // Its records are in the config topic by now; they leave the active segment within
            // segment.ms (1 s) plus vdl's roll check (0.5 s): from 2 s on, nothing cleanable
            // left in the config topic means the cleaner has cleaned them.
            long sealedBy = System.currentTimeMillis() + 2000;

            if (cleanerPassesBefore >= 0) {
                String labels = "{topic=\"" + configs + "\",partition=\"0\"}";
                Waits.until("the vdl log cleaner compacts the internal topics, " + configs
                        + " after the reconfiguration", STEP_TIMEOUT,
                        () -> Waits.vdlCounter("vdl_cleaner_passes_total") > cleanerPassesBefore
                                && Waits.vdlCounter("vdl_cleaner_removed_records_total") > removedBefore
                                && Waits.vdlMax("vdl_partition_last_clean_timestamp_seconds" + labels)
                                        >= reconfiguredFrom
                                && System.currentTimeMillis() >= sealedBy
                                && Waits.vdlMax("vdl_partition_cleaned_bytes" + labels) > 0
                                && Waits.vdlMax("vdl_partition_cleanable_bytes" + labels) == 0);
                step("vdl's log cleaner compacted: passes " + cleanerPassesBefore + " -> "
                        + Waits.vdlCounter("vdl_cleaner_passes_total") + ", records removed "
                        + removedBefore + " -> " + Waits.vdlCounter("vdl_cleaner_removed_records_total")
                        + "; " + configs + " cleaned after the reconfiguration");
            }

            connect.stop();
            step("worker stopped");
            List<String> more = new ArrayList<>();
            for (int i = n; i < n + n / 4; i++) {
                more.add("line-" + i);
            }
            append(input, more);
            lines.addAll(more);

            connect = startWorker(worker);
            base = connect.rest().serverUrl().toString();
            String restarted = base;
            Waits.until("the restarted worker lists both connectors from the config topic",
                    STEP_TIMEOUT, () -> {
                        JsonNode list = get(restarted + "connectors");
                        return list != null && list.toString().contains("\"file-source\"")
                                && list.toString().contains("\"file-sink\"");
                    });
            awaitRunning(base, "file-source");
            awaitRunning(base, "file-sink");
            String batch = get(base + "connectors/file-source/config").path("batch.size").asText();
            check("100".equals(batch), "the restarted worker has file-source with batch.size=" + batch
                    + ", not the latest config (100)");
            step("a new worker read both connectors back from " + configs
                    + " (file-source with its latest config) and runs them");
            awaitOutput(output, lines);
            awaitSourceOffset(bootstrap, offsets, input, Files.size(input));
            long end = admin.listOffsets(Map.of(new TopicPartition(data, 0), OffsetSpec.latest()))
                    .all().get().get(new TopicPartition(data, 0)).offset();
            check(end == lines.size(), data + " holds " + end + " records for " + lines.size()
                    + " lines: the source did not resume at its committed offset");
            step("after the restart the source resumed at its committed offset: " + lines.size()
                    + " lines in the output, exactly once, " + end + " records in " + data);
            connect.stop();
        }
    }

    static Connect<?> startWorker(Map<String, String> props) throws Exception {
        Connect<?> connect = new ConnectDistributed().startConnect(props);
        String base = connect.rest().serverUrl().toString();
        Waits.until("the Connect worker answers on " + base, STEP_TIMEOUT,
                () -> get(base + "connectors") != null);
        return connect;
    }

    static void checkInternalTopic(Admin admin, String topic, int partitions) throws Exception {
        Waits.until(topic + " exists", STEP_TIMEOUT,
                () -> admin.listTopics().names().get().contains(topic));
        TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
        check(d.partitions().size() == partitions,
                topic + " has " + d.partitions().size() + " partitions, not " + partitions);
        d.partitions().forEach(p -> check(p.replicas().size() == 3,
                topic + "-" + p.partition() + " has " + p.replicas().size() + " replicas, not 3"));
        ConfigResource r = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        Config c = admin.describeConfigs(List.of(r)).all().get().get(r);
        String policy = c.get("cleanup.policy").value();
        check("compact".equals(policy), topic + " has cleanup.policy=" + policy + ", not compact");
    }

    /** PUT /connectors/NAME/config, retried while the worker is still joining its group. */
    static void putConnector(String base, String name, Map<String, String> config) throws Exception {
        String body = JSON.writeValueAsString(config);
        Waits.until("PUT connector " + name, STEP_TIMEOUT, () -> {
            HttpResponse<String> r = HTTP.send(HttpRequest.newBuilder(URI.create(base + "connectors/" + name + "/config"))
                    .header("Content-Type", "application/json")
                    .PUT(HttpRequest.BodyPublishers.ofString(body)).timeout(Duration.ofSeconds(30)).build(),
                    HttpResponse.BodyHandlers.ofString());
            if (r.statusCode() / 100 != 2) {
                step("PUT " + name + ": " + r.statusCode() + " " + r.body());
            }
            return r.statusCode() / 100 == 2;
        });
    }

    static void awaitRunning(String base, String name) throws Exception {
        Waits.until(name + " and its task RUNNING", STEP_TIMEOUT, () -> {
            JsonNode s = get(base + "connectors/" + name + "/status");
            if (s == null || !"RUNNING".equals(s.path("connector").path("state").asText())) {
                return false;
            }
            JsonNode tasks = s.path("tasks");
            if (tasks.size() == 1 && "FAILED".equals(tasks.get(0).path("state").asText())) {
                throw new AssertionError(name + " task failed: " + tasks.get(0).path("trace").asText());
            }
            return tasks.size() == 1 && "RUNNING".equals(tasks.get(0).path("state").asText());
        });
    }

    /** The JSON answer of a GET, or null when the worker answers with an error status. */
    static JsonNode get(String url) throws Exception {
        HttpResponse<String> r = HTTP.send(HttpRequest.newBuilder(URI.create(url)).timeout(Duration.ofSeconds(30)).build(),
                HttpResponse.BodyHandlers.ofString());
        return r.statusCode() == 200 ? JSON.readTree(r.body()) : null;
    }

    static void append(Path file, List<String> lines) throws Exception {
        Files.write(file, (String.join("\n", lines) + "\n").getBytes(StandardCharsets.UTF_8),
                StandardOpenOption.APPEND);
    }

    /** Waits until the output file has exactly as many lines as {@code expected}, then compares. */
    static void awaitOutput(Path output, List<String> expected) throws Exception {
        Waits.until("the sink's file has " + expected.size() + " lines", STEP_TIMEOUT,
                () -> Files.exists(output) && Files.readAllLines(output).size() >= expected.size());
        List<String> got = Files.readAllLines(output);
        check(got.equals(expected), "the sink's file is not the source's lines in order: "
                + got.size() + " lines, first difference at "
                + firstDifference(got, expected));
    }

    static int firstDifference(List<String> a, List<String> b) {
        int i = 0;
        while (i < a.size() && i < b.size() && a.get(i).equals(b.get(i))) {
            i++;
        }
        return i;
    }

    /**
     * Reads the offsets topic from the beginning until the source connector's latest offset
     * for {@code file} (key ["file-source",{"filename":FILE}], value {"position":P}) is
     * {@code position}.
     */
    static void awaitSourceOffset(String bootstrap, String topic, Path file, long position) throws Exception {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
            List<TopicPartition> parts = new ArrayList<>();
            c.partitionsFor(topic).forEach(i -> parts.add(new TopicPartition(topic, i.partition())));
            c.assign(parts);
            c.seekToBeginning(parts);
            long[] latest = {-1};
            Waits.until("the source's offset " + position + " in " + topic, STEP_TIMEOUT, () -> {
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) {
                    if (r.key() == null || r.value() == null) {
                        continue;
                    }
                    JsonNode key = JSON.readTree(r.key());
                    if ("file-source".equals(key.path(0).asText())
                            && file.toString().equals(key.path(1).path("filename").asText())) {
                        latest[0] = JSON.readTree(r.value()).path("position").asLong(-1);
                    }
                }
                return latest[0] == position;
            });
        }
    }

    static void awaitSinkCommitted(Admin admin, String group, TopicPartition tp, long n) throws Exception {
        Waits.until("group " + group + " commits " + n + " on " + tp, STEP_TIMEOUT, () -> {
            OffsetAndMetadata o = admin.listConsumerGroupOffsets(group)
                    .partitionsToOffsetAndMetadata().get().get(tp);
            return o != null && o.offset() == n;
        });
    }
}
