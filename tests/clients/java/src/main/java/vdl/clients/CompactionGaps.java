package vdl.clients;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * Apache Kafka's Java client against a compacted partition with offset gaps (issue 35): fetch
 * from the beginning across the gaps, a consumer group committing an offset inside a gap and
 * resuming there, ListOffsets (earliest, latest, by time) and DeleteRecords to an offset inside a
 * gap. The topic and what a client must see come from the line file that
 * tests/clients/compacted.py writes (test_compaction_gaps.py runs this class).
 *
 * <p>Usage: CompactionGaps BOOTSTRAP EXPECTATION_FILE. Prints a line per check and "all checks
 * passed"; exits 1 with "FAIL ..." at the first failure. Every wait is bounded.
 */
public final class CompactionGaps {
    private static final Duration STEP_TIMEOUT = Duration.ofSeconds(30);

    /** One record: offset, key, value (null for a tombstone), timestamp. */
    record Rec(long offset, String key, String value, long timestamp) {}

    private final String bootstrap;
    private String topic;
    private long end;
    private long commitAt;
    private long deleteTo;
    private final List<Rec> survivors = new ArrayList<>();
    private final List<long[]> byTime = new ArrayList<>();
    private final List<long[]> byTimeAfterDelete = new ArrayList<>();

    private CompactionGaps(String bootstrap, Path expectation) throws IOException {
        this.bootstrap = bootstrap;
        for (String line : Files.readAllLines(expectation)) {
            String[] f = line.split(" ");
            switch (f[0]) {
                case "topic" -> topic = f[1];
                case "end" -> end = Long.parseLong(f[1]);
                case "commit_at" -> commitAt = Long.parseLong(f[1]);
                case "delete_to" -> deleteTo = Long.parseLong(f[1]);
                case "survivor" -> survivors.add(new Rec(Long.parseLong(f[1]), f[3],
                        f[4].equals("\\N") ? null : f[4], Long.parseLong(f[2])));
                case "by_time" -> byTime.add(new long[] {Long.parseLong(f[1]), Long.parseLong(f[2])});
                case "by_time_after_delete" ->
                    byTimeAfterDelete.add(new long[] {Long.parseLong(f[1]), Long.parseLong(f[2])});
                default -> throw new IllegalArgumentException("unknown line: " + line);
            }
        }
    }

    public static void main(String[] args) {
        if (args.length != 2) {
            System.err.println("usage: CompactionGaps BOOTSTRAP EXPECTATION_FILE");
            System.exit(2);
        }
        try {
            new CompactionGaps(args[0], Path.of(args[1])).run();
            System.out.println("all checks passed");
            System.exit(0);
        } catch (Throwable t) {
            System.out.println("FAIL " + t);
            t.printStackTrace();
            System.exit(1);
        }
    }

    private static void check(boolean ok, String what) {
        if (!ok) {
            throw new AssertionError(what);
        }
    }

    private static void ok(String name, String detail) {
        System.out.println("ok   " + name + ": " + detail);
    }

    private KafkaConsumer<String, String> consumer(String group) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        return new KafkaConsumer<>(p);
    }

    /** Polls until `want` records arrived (at most STEP_TIMEOUT: a stall at a gap fails). */
    private static List<Rec> poll(KafkaConsumer<String, String> c, int want, String what) {
        List<Rec> got = new ArrayList<>();
        long deadline = System.nanoTime() + STEP_TIMEOUT.toNanos();
        while (got.size() < want && System.nanoTime() < deadline) {
            for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                got.add(new Rec(r.offset(), r.key(), r.value(), r.timestamp()));
            }
        }
        check(got.size() >= want, what + ": " + got.size() + " of " + want + " records: " + got);
        return got.subList(0, want);
    }

    private static List<Rec> from(List<Rec> rs, long offset) {
        return rs.stream().filter(r -> r.offset() >= offset).toList();
    }

    private static void same(String what, List<Rec> got, List<Rec> want) {
        check(Objects.equals(got, want), what + ":\n got  " + got + "\n want " + want);
        ok(what, got.size() + " records at offsets "
                + got.stream().map(Rec::offset).toList());
    }

    private List<Rec> readFromBeginning(int want) {
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaConsumer<String, String> c = consumer("reader-" + topic)) {
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            return poll(c, want, "fetch from the beginning");
        }
    }

    private void run() throws Exception {
        TopicPartition tp = new TopicPartition(topic, 0);
        same("fetch from the beginning", readFromBeginning(survivors.size()), survivors);

        // A group member reads the first part, commits an offset inside a gap and leaves; a new
        // member finds it committed and resumes with the next survivor.
        String group = "g-" + topic;
        List<Rec> before = survivors.stream().filter(r -> r.offset() < commitAt).toList();
        try (KafkaConsumer<String, String> c = consumer(group)) {
            c.subscribe(List.of(topic));
            same("group first part", poll(c, before.size(), "group first part"), before);
            c.commitSync(Map.of(tp, new OffsetAndMetadata(commitAt)));
        }
        ok("group commit", commitAt + " (inside a gap)");
        try (KafkaConsumer<String, String> c = consumer(group)) {
            OffsetAndMetadata committed = c.committed(Set.of(tp), STEP_TIMEOUT).get(tp);
            check(committed != null && committed.offset() == commitAt,
                    "committed " + committed + ", want " + commitAt);
            c.subscribe(List.of(topic));
            List<Rec> after = from(survivors, commitAt);
            same("group resume", poll(c, after.size(), "group resume"), after);
        }

        Properties ap = new Properties();
        ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(ap)) {
            listOffsets(admin, tp, 0, byTime);
            long low = admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(deleteTo)))
                    .lowWatermarks().get(tp).get(30, TimeUnit.SECONDS).lowWatermark();
            check(low == deleteTo, "DeleteRecords low watermark " + low + ", want " + deleteTo);
            ok("DeleteRecords", "to " + deleteTo + " (inside a gap): low watermark " + low);
            listOffsets(admin, tp, deleteTo, byTimeAfterDelete);
        }
        List<Rec> afterDelete = from(survivors, deleteTo);
        same("fetch after DeleteRecords", readFromBeginning(afterDelete.size()), afterDelete);
    }

    private long offset(Admin admin, TopicPartition tp, OffsetSpec spec) throws Exception {
        return admin.listOffsets(Map.of(tp, spec)).partitionResult(tp)
                .get(30, TimeUnit.SECONDS).offset();
    }

    /** Earliest (`start`), latest (the end), and each lookup by time (-1: no record). */
    private void listOffsets(Admin admin, TopicPartition tp, long start, List<long[]> lookups)
            throws Exception {
        long earliest = offset(admin, tp, OffsetSpec.earliest());
        check(earliest == start, "earliest " + earliest + ", want " + start);
        long latest = offset(admin, tp, OffsetSpec.latest());
        check(latest == end, "latest " + latest + ", want " + end);
        for (long[] l : lookups) {
            long got = offset(admin, tp, OffsetSpec.forTimestamp(l[0]));
            check(got == l[1], "by time " + l[0] + ": " + got + ", want " + l[1]);
        }
        ok("ListOffsets", "earliest " + earliest + ", latest " + latest + ", "
                + lookups.size() + " lookups by time");
    }
}
