package vdl.clients;

import static vdl.clients.ClientTest.check;
import static vdl.clients.ClientTest.step;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.connect.runtime.Connect;

/**
 * Debezium's PostgreSQL connector on Kafka Connect 3.9 in distributed mode, against the cluster
 * (issue 35: "so ... Debezium run on vdl"), deployed as CDC users deploy it: the connector's
 * jars in a plugin directory (system property vdl.debezium.plugin.path, worker plugin.path),
 * Connect's internal topics created by the worker (compacted), the table's topic created by
 * Connect's topic.creation (3 partitions, replication factor 3, cleanup.policy=compact).
 *
 * <ol>
 *   <li>A PostgreSQL server of its own ({@link PostgresServer}: initdb from the system property
 *       vdl.pg.bin, 127.0.0.1, a free port, wal_level=logical); a table public.customers with a
 *       primary key and S rows.
 *   <li>A worker starts; the connector (plugin pgoutput, snapshot.mode initial) is created
 *       through the REST API: every row arrives as a snapshot event (op "r") keyed by its id.
 *   <li>INSERT, UPDATE and DELETE (one row inserted, updated and deleted): each key's events
 *       arrive in the order of the statements: c, u, d followed by a tombstone (null value,
 *       same key); the events carry the row's new values (after) or the deleted id (before).
 *   <li>The test waits until the connector's offset in the offsets topic covers the last event
 *       (its lsn is at least the largest source.lsn seen), stops the worker, changes rows while
 *       no worker runs, starts a new worker: it reads the connector and its offset back (no new
 *       snapshot), and streams the changes made while it was down, none lost.
 *   <li>What is asserted over the whole topic at the end: per key, the distinct events (an event
 *       is its op and source.lsn) are exactly the expected sequence, in order; an event may
 *       appear again (at-least-once) only if its lsn is above the offset committed before the
 *       stop: anything at or below it appearing twice fails the test. The number of such
 *       re-deliveries is printed.
 * </ol>
 *
 * Usage: DebeziumPostgresTest BOOTSTRAP PREFIX N (S = N/10 rows, between 10 and 100). Exits 0
 * on success, 1 with a message on failure. Every wait is bounded.
 */
public final class DebeziumPostgresTest {
    private static final Duration STEP_TIMEOUT = Duration.ofSeconds(60);
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final String CONNECTOR = "pg-source";

    public static void main(String[] args) {
        if (args.length != 3) {
            System.err.println("usage: DebeziumPostgresTest BOOTSTRAP PREFIX N");
            System.exit(2);
        }
        try {
            run(args[0], args[1] + "-dbz", Math.max(10, Math.min(Integer.parseInt(args[2]) / 10, 100)));
            System.out.println("java Debezium PostgreSQL test: OK (snapshot, c/u/d and tombstones in"
                    + " order per key, a worker restart resumes from the stored offset, nothing lost)");
            System.exit(0);
        } catch (Throwable t) {
            System.err.println("java Debezium PostgreSQL test: FAILED: " + t);
            t.printStackTrace();
            System.exit(1);
        }
    }

    static void run(String bootstrap, String prefix, int rows) throws Exception {
        String pgBin = System.getProperty("vdl.pg.bin");
        String pluginPath = System.getProperty("vdl.debezium.plugin.path");
        check(pgBin != null && pluginPath != null,
                "system properties vdl.pg.bin and vdl.debezium.plugin.path are needed (run-java.sh sets them)");
        String offsets = prefix + "-offsets";
        String topic = prefix + ".public.customers";
        // The rows the table should hold, and each key's expected events ("r", "c", "u", "d",
        // "t" for a tombstone).
        Map<Integer, String> table = new TreeMap<>();
        Map<Integer, List<String>> expected = new TreeMap<>();

        PostgresServer pg = PostgresServer.start(pgBin);
        boolean ok = false;
        try (pg; Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap))) {
            pg.sql("CREATE TABLE customers (id integer PRIMARY KEY, name text NOT NULL);"
                    + " INSERT INTO customers SELECT i, 'name-' || i FROM generate_series(1, " + rows + ") i");
            for (int i = 1; i <= rows; i++) {
                table.put(i, "name-" + i);
                expected.computeIfAbsent(i, k -> new ArrayList<>()).add("r");
            }
            step("PostgreSQL " + pg.sql("SHOW server_version") + " on 127.0.0.1:" + pg.port() + " (pid "
                    + pg.pid() + ", wal_level=" + pg.sql("SHOW wal_level") + "), public.customers with "
                    + rows + " rows");

            Map<String, String> worker = new HashMap<>();
            worker.put("bootstrap.servers", bootstrap);
            worker.put("group.id", prefix);
            worker.put("config.storage.topic", prefix + "-configs");
            worker.put("offset.storage.topic", offsets);
            worker.put("status.storage.topic", prefix + "-status");
            worker.put("key.converter", "org.apache.kafka.connect.json.JsonConverter");
            worker.put("value.converter", "org.apache.kafka.connect.json.JsonConverter");
            worker.put("key.converter.schemas.enable", "false");
            worker.put("value.converter.schemas.enable", "false");
            worker.put("offset.flush.interval.ms", "500");
            worker.put("listeners", "http://127.0.0.1:0");
            worker.put("rest.advertised.host.name", "127.0.0.1");
            worker.put("plugin.path", pluginPath);
            worker.put("plugin.discovery", "service_load");

            // Debezium 3.6 is built against Kafka 4.x: its CloudEventsConverter (not used here)
            // fails to load on Connect 3.9, which logs an ERROR while scanning the plugin.
            step("starting a Connect worker; expect one ERROR for io.debezium.converters.CloudEventsConverter"
                    + " (Debezium 3.6 reflects on a Kafka 4 JsonConverter method) per start");
            Connect<?> connect = ConnectDistributedTest.startWorker(worker);
            String base = connect.rest().serverUrl().toString();
            step("Connect worker started (plugin.path " + pluginPath + "), REST at " + base);
            ConnectDistributedTest.checkInternalTopic(admin, prefix + "-configs", 1);
            ConnectDistributedTest.checkInternalTopic(admin, offsets, 25);
            ConnectDistributedTest.checkInternalTopic(admin, prefix + "-status", 5);
            step("internal topics created by Connect: configs 1, offsets 25, status 5 partitions,"
                    + " replication factor 3, cleanup.policy=compact");

            Map<String, String> config = new LinkedHashMap<>();
            config.put("connector.class", "io.debezium.connector.postgresql.PostgresConnector");
            config.put("tasks.max", "1");
            config.put("database.hostname", "127.0.0.1");
            config.put("database.port", String.valueOf(pg.port()));
            config.put("database.user", "postgres");
            config.put("database.password", "unused-trust-auth");
            config.put("database.dbname", "postgres");
            config.put("topic.prefix", prefix);
            config.put("plugin.name", "pgoutput");
            config.put("slot.name", "vdl_debezium");
            config.put("publication.name", "vdl_debezium");
            config.put("table.include.list", "public.customers");
            config.put("snapshot.mode", "initial");
            config.put("topic.creation.default.partitions", "3");
            config.put("topic.creation.default.replication.factor", "3");
            config.put("topic.creation.default.cleanup.policy", "compact");
            ConnectDistributedTest.putConnector(base, CONNECTOR, config);
            ConnectDistributedTest.awaitRunning(base, CONNECTOR);
            step("connector " + CONNECTOR + " (" + connectorVersion(base) + ") and its task RUNNING");

            try (ChangeEvents events = new ChangeEvents(bootstrap, topic, admin)) {
                events.await(expected, "the snapshot's " + rows + " r events");
                events.checkSequences(expected, Long.MAX_VALUE);
                checkTableTopic(admin, topic);
                step(rows + " snapshot events (op r) in " + topic + ", one per row; " + topic
                        + " created by Connect: 3 partitions, replication factor 3, cleanup.policy=compact");

                int next = rows + 1;
                int added = Math.max(4, rows / 2);
                changes(pg, table, expected, next, added);
                next += added;
                events.await(expected, "the streamed changes");
                events.checkSequences(expected, Long.MAX_VALUE);
                events.checkValues(table);
                step("streamed: " + events.count("c") + " c, " + events.count("u") + " u, " + events.count("d")
                        + " d, " + events.count("t") + " tombstones; each key's events in order,"
                        + " values as written");

                long maxLsn = events.maxLsn();
                long committed = awaitCommittedLsn(bootstrap, offsets, maxLsn);
                step("the offsets topic holds " + CONNECTOR + "'s offset lsn " + committed
                        + " >= the last event's " + maxLsn);
                connect.stop();
                step("worker stopped; changing rows while no worker runs");
                changes(pg, table, expected, next, added);

                connect = ConnectDistributedTest.startWorker(worker);
                base = connect.rest().serverUrl().toString();
                ConnectDistributedTest.awaitRunning(base, CONNECTOR);
                step("a new worker read " + CONNECTOR + " back from the config topic and runs it");
                events.await(expected, "the changes made while no worker ran");
                int again = events.checkSequences(expected, committed);
                events.checkValues(table);
                step("after the restart: no new snapshot, every change made while stopped arrived in order"
                        + " per key (" + events.total() + " records in " + topic + " for " + expected.size()
                        + " keys: " + events.count("r") + " r, " + events.count("c") + " c, " + events.count("u")
                        + " u, " + events.count("d") + " d, " + events.count("t") + " tombstones); re-delivered events (all above the committed lsn " + committed + "): " + again);
            }
            connect.stop();
            ok = true;
        } finally {
            if (!ok) {
                pg.keep();
            }
        }
    }

    /**
     * One round of changes, each statement its own transaction, recorded in {@code table} and
     * {@code expected}: inserts ids first..first+n-1; updates the first half of those and the
     * lowest quarter of the live rows already there; deletes the next quarter of the old rows
     * and one of the new rows (inserted, updated, deleted: c, u, d, tombstone).
     */
    static void changes(PostgresServer pg, Map<Integer, String> table, Map<Integer, List<String>> expected,
            int first, int n) throws Exception {
        List<Integer> old = new ArrayList<>(table.keySet());
        int last = first + n - 1;
        pg.sql("INSERT INTO customers SELECT i, 'name-' || i FROM generate_series(" + first + ", " + last + ") i");
        for (int i = first; i <= last; i++) {
            table.put(i, "name-" + i);
            expected.computeIfAbsent(i, k -> new ArrayList<>()).add("c");
        }
        List<Integer> updated = new ArrayList<>(old.subList(0, old.size() / 4));
        for (int i = first; i < first + n / 2; i++) {
            updated.add(i);
        }
        for (int id : updated) {
            String name = table.get(id) + "-u";
            pg.sql("UPDATE customers SET name = '" + name + "' WHERE id = " + id);
            table.put(id, name);
            expected.get(id).add("u");
        }
        List<Integer> deleted = new ArrayList<>(old.subList(old.size() / 4, old.size() / 2));
        deleted.add(first);
        for (int id : deleted) {
            pg.sql("DELETE FROM customers WHERE id = " + id);
            table.remove(id);
            expected.get(id).add("d");
            expected.get(id).add("t");
        }
    }

    static void checkTableTopic(Admin admin, String topic) throws Exception {
        TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
        check(d.partitions().size() == 3, topic + " has " + d.partitions().size() + " partitions, not 3");
        d.partitions().forEach(p -> check(p.replicas().size() == 3,
                topic + "-" + p.partition() + " has " + p.replicas().size() + " replicas, not 3"));
        ConfigResource r = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        Config c = admin.describeConfigs(List.of(r)).all().get().get(r);
        String policy = c.get("cleanup.policy").value();
        check("compact".equals(policy), topic + " has cleanup.policy=" + policy + ", not compact");
    }

    static String connectorVersion(String base) throws Exception {
        for (JsonNode p : ConnectDistributedTest.get(base + "connector-plugins")) {
            if (p.path("class").asText().endsWith("PostgresConnector")) {
                return "Debezium " + p.path("version").asText();
            }
        }
        return "version unknown";
    }

    /**
     * Reads the offsets topic from the beginning until the connector's latest offset (key
     * ["pg-source",{"server":...}]) has an lsn of at least {@code lsn}; returns that lsn.
     */
    static long awaitCommittedLsn(String bootstrap, String topic, long lsn) throws Exception {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
            List<TopicPartition> parts = new ArrayList<>();
            c.partitionsFor(topic).forEach(i -> parts.add(new TopicPartition(topic, i.partition())));
            c.assign(parts);
            c.seekToBeginning(parts);
            long[] latest = {-1};
            Waits.until(CONNECTOR + "'s offset with lsn >= " + lsn + " in " + topic, STEP_TIMEOUT, () -> {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    if (r.key() != null && r.value() != null
                            && CONNECTOR.equals(JSON.readTree(r.key()).path(0).asText())) {
                        latest[0] = JSON.readTree(r.value()).path("lsn").asLong(-1);
                    }
                }
                return latest[0] >= lsn;
            });
            return latest[0];
        }
    }
}
