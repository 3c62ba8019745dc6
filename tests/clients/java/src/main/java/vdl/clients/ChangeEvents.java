package vdl.clients;

import static vdl.clients.ClientTest.check;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * The Debezium change events of one table topic (schemaless JSON: key {"id":N}, value with
 * op, before, after, source.lsn; a tombstone is a null value), read from the beginning of every
 * partition and kept per key in the order of their partition, which is the order a consumer
 * sees them in.
 */
final class ChangeEvents implements AutoCloseable {
    private static final ObjectMapper JSON = new ObjectMapper();

    /** One record: op is r, c, u, d or t (tombstone, with the lsn of the delete before it). */
    record Event(String op, long lsn, JsonNode value) {
        String id() {
            return op + ":" + lsn;
        }
    }

    private final KafkaConsumer<String, String> consumer;
    private final Map<Integer, List<Event>> byKey = new TreeMap<>();
    private int total;

    /** Waits (60 s at most) until the topic exists, then assigns all its partitions from offset 0. */
    ChangeEvents(String bootstrap, String topic, Admin admin) throws Exception {
        Waits.until(topic + " exists", Duration.ofSeconds(60),
                () -> admin.listTopics().names().get().contains(topic));
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        consumer = new KafkaConsumer<>(p);
        List<TopicPartition> parts = new ArrayList<>();
        consumer.partitionsFor(topic).forEach(i -> parts.add(new TopicPartition(topic, i.partition())));
        consumer.assign(parts);
        consumer.seekToBeginning(parts);
    }

    /** Polls until every key of {@code expected} has at least its expected number of distinct events. */
    void await(Map<Integer, List<String>> expected, String what) throws Exception {
        Waits.until(what, Duration.ofSeconds(60), () -> {
            poll();
            for (Map.Entry<Integer, List<String>> e : expected.entrySet()) {
                if (distinct(byKey.getOrDefault(e.getKey(), List.of())).size() < e.getValue().size()) {
                    return false;
                }
            }
            return true;
        });
        poll();
    }

    /**
     * Checks that each key's distinct events are exactly its expected ops, in order, and that no
     * key has events it should not; an event seen again counts as a re-delivery, allowed only
     * when its lsn is above {@code committedLsn}. Returns the number of re-deliveries.
     */
    int checkSequences(Map<Integer, List<String>> expected, long committedLsn) {
        check(expected.keySet().containsAll(byKey.keySet()), "events for keys that were never written: "
                + byKey.keySet().stream().filter(k -> !expected.containsKey(k)).toList());
        int again = 0;
        for (Map.Entry<Integer, List<String>> e : expected.entrySet()) {
            List<Event> all = byKey.getOrDefault(e.getKey(), List.of());
            List<Event> d = distinct(all);
            List<String> ops = d.stream().map(Event::op).toList();
            check(ops.equals(e.getValue()), "key " + e.getKey() + ": events " + ops + ", expected "
                    + e.getValue() + " (all records: " + all.stream().map(Event::id).toList() + ")");
            for (Event r : repeats(all)) {
                check(r.lsn() > committedLsn, "key " + e.getKey() + ": event " + r.id()
                        + " delivered again although the committed offset (lsn " + committedLsn + ") covers it");
                again++;
            }
        }
        return again;
    }

    /**
     * Checks the rows' values: a live row's last event carries after.id and after.name as in
     * {@code table}; a deleted row's last events are a delete whose before.id is the key and a
     * tombstone.
     */
    void checkValues(Map<Integer, String> table) {
        for (Map.Entry<Integer, List<Event>> e : byKey.entrySet()) {
            List<Event> d = distinct(e.getValue());
            Event last = d.get(d.size() - 1);
            int id = e.getKey();
            if (table.containsKey(id)) {
                JsonNode after = last.value().path("after");
                check(after.path("id").asInt() == id && table.get(id).equals(after.path("name").asText()),
                        "key " + id + ": last event " + last.value() + ", expected name " + table.get(id));
            } else {
                check("t".equals(last.op()) && d.size() >= 2, "key " + id + ": deleted, but its last event is " + last.op());
                JsonNode del = d.get(d.size() - 2).value();
                check(del.path("before").path("id").asInt() == id && del.path("after").isNull(),
                        "key " + id + ": the delete event is " + del);
            }
        }
    }

    /** The number of distinct events with {@code op} over all keys. */
    long count(String op) {
        return byKey.values().stream().flatMap(l -> distinct(l).stream()).filter(e -> e.op().equals(op)).count();
    }

    /** The largest source.lsn of any event read. */
    long maxLsn() {
        return byKey.values().stream().flatMap(List::stream).mapToLong(Event::lsn).max().orElse(-1);
    }

    /** The number of records read, re-deliveries included. */
    int total() {
        return total;
    }

    private void poll() throws Exception {
        for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
            total++;
            check(r.key() != null, "a record without a key at " + r.topic() + "-" + r.partition() + "@" + r.offset());
            int id = JSON.readTree(r.key()).path("id").asInt(Integer.MIN_VALUE);
            check(id != Integer.MIN_VALUE, "a key without an id: " + r.key());
            List<Event> events = byKey.computeIfAbsent(id, k -> new ArrayList<>());
            if (r.value() == null) {
                Event prev = events.isEmpty() ? null : events.get(events.size() - 1);
                check(prev != null && "d".equals(prev.op()), "key " + id + ": a tombstone not right after a delete");
                events.add(new Event("t", prev.lsn(), null));
                continue;
            }
            JsonNode v = JSON.readTree(r.value());
            String op = v.path("op").asText();
            check(Set.of("r", "c", "u", "d").contains(op), "key " + id + ": unexpected op in " + r.value());
            long lsn = v.path("source").path("lsn").asLong(-1);
            check(lsn > 0, "key " + id + ": no source.lsn in " + r.value());
            events.add(new Event(op, lsn, v));
        }
    }

    private static List<Event> distinct(List<Event> events) {
        Set<String> seen = new HashSet<>();
        return events.stream().filter(e -> seen.add(e.id())).toList();
    }

    private static List<Event> repeats(List<Event> events) {
        Set<String> seen = new HashSet<>();
        return events.stream().filter(e -> !seen.add(e.id())).toList();
    }

    @Override
    public void close() {
        consumer.close();
    }
}
