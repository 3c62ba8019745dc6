package vdl.clients;

import static vdl.clients.ClientTest.check;
import static vdl.clients.ClientTest.step;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.BooleanSupplier;
import java.util.function.Supplier;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The multi-partition part of {@link ClientTest}: what users of a partitioned topic rely on.
 *
 * <ol>
 *   <li>Admin: CreateTopics of a 6-partition topic (replication factor 3); DescribeTopics shows
 *       6 partitions, each with a leader and 3 replicas. A 2-partition topic grown to 4 with
 *       CreatePartitions; DescribeTopics shows 4, and each of the 4 takes a record at offset 0.
 *   <li>An idempotent acks=all producer with the default partitioner writes 60 keys x 10 records:
 *       a key always lands in the same partition, keys spread over at least 4 partitions, per key
 *       the offsets grow in produce order, and every partition's offsets are dense from 0.
 *   <li>A group of two consumers, each in its own thread (subscribe, poll, commitSync after every
 *       poll). Partitions stay paused until both members hold an assignment: the assignments are
 *       disjoint and cover all 6, and together the members consume every record exactly once.
 *       Then one member closes (LeaveGroup); the other is assigned all 6, consumes 60 x 2 more
 *       records (also exactly once, none of the earlier ones again), and finally the group's
 *       committed offsets (Admin listConsumerGroupOffsets) equal the log end offsets
 *       (consumer.endOffsets) and the number of records acknowledged per partition.
 * </ol>
 *
 * Every wait has a deadline; a failure says what was seen.
 */
final class MultiPartition {
    static final int PARTITIONS = 6;
    static final int KEYS = 60;
    /** Records per key before the group starts, and after one member left. */
    static final int PER_KEY_1 = 10;
    static final int PER_KEY_2 = 2;
    static final Duration WAIT = Duration.ofSeconds(30);

    /** An acknowledged record. */
    record Sent(String key, String value, int partition, long offset) {}

    /** A consumed record, and by which member. */
    record Got(String member, int partition, long offset, String key, String value) {}

    private MultiPartition() {}

    static void run(String bootstrap, String base) throws Exception {
        String topic = base + "-p6";
        String grow = base + "-grow";
        String group = "java-group-" + topic;
        Set<TopicPartition> six = new TreeSet<>(
                (x, y) -> Integer.compare(x.partition(), y.partition()));
        for (int p = 0; p < PARTITIONS; p++) {
            six.add(new TopicPartition(topic, p));
        }
        Set<TopicPartition> all = Collections.unmodifiableSet(six);

        Properties ap = new Properties();
        ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        ap.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 30000);
        Properties pp = new Properties();
        pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        pp.put(ProducerConfig.ACKS_CONFIG, "all");
        pp.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true);
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());

        Admin admin = Admin.create(ap);
        KafkaProducer<String, String> producer = new KafkaProducer<>(pp);
        try {
            // 1. Topics: create, describe, grow.
            admin.createTopics(List.of(new NewTopic(topic, PARTITIONS, (short) 3), new NewTopic(grow, 2, (short) 3)))
                    .all().get(WAIT.toSeconds(), TimeUnit.SECONDS);
            TopicDescription d = describeUntilLed(admin, topic, PARTITIONS);
            step("created " + topic + ": " + describe(d));
            describeUntilLed(admin, grow, 2);
            admin.createPartitions(Map.of(grow, NewPartitions.increaseTo(4)))
                    .all().get(WAIT.toSeconds(), TimeUnit.SECONDS);
            d = describeUntilLed(admin, grow, 4);
            List<Future<RecordMetadata>> growAcks = new ArrayList<>();
            for (int p = 0; p < 4; p++) {
                growAcks.add(producer.send(new ProducerRecord<>(grow, p, "g" + p, "grow-" + p)));
            }
            for (int p = 0; p < 4; p++) {
                RecordMetadata md = growAcks.get(p).get(WAIT.toSeconds(), TimeUnit.SECONDS);
                check(md.partition() == p && md.offset() == 0,
                        "record for " + grow + "-" + p + " acknowledged at " + md.partition() + "@" + md.offset());
            }
            step("grew " + grow + " from 2 to 4 partitions: " + describe(d) + "; one record in each at offset 0");

            // 2. Keyed records through the default partitioner.
            List<Sent> sent = new ArrayList<>(produce(producer, topic, 1, PER_KEY_1));
            checkKeyed(sent);
            step("produced " + KEYS + " keys x " + PER_KEY_1 + " records to " + topic + ": per partition "
                    + perPartition(sent));

            // 3. A group of two members shares the six partitions.
            AtomicBoolean go = new AtomicBoolean(false);
            ConcurrentLinkedQueue<Got> got = new ConcurrentLinkedQueue<>();
            Member a = new Member("A", bootstrap, group, topic, all, go, got);
            Member b = new Member("B", bootstrap, group, topic, all, go, got);
            List<Member> members = List.of(a, b);
            try {
                a.start();
                b.start();
                waitFor("both members to hold disjoint assignments covering all " + PARTITIONS + " partitions",
                        members, () -> {
                            Set<TopicPartition> sa = a.assignment, sb = b.assignment;
                            Set<TopicPartition> union = new HashSet<>(sa);
                            union.addAll(sb);
                            return !sa.isEmpty() && !sb.isEmpty() && sa.size() + sb.size() == PARTITIONS
                                    && union.equals(all);
                        }, () -> "");
                Set<TopicPartition> sa = a.assignment, sb = b.assignment;
                go.set(true);
                step("group " + group + ": A has " + parts(sa) + ", B has " + parts(sb));

                int n1 = sent.size();
                waitFor("the group to consume " + n1 + " records", members, () -> got.size() >= n1,
                        () -> "consumed " + got.size() + "; " + consumedSummary(got));
                checkExactlyOnce(sent, new ArrayList<>(got), members);
                for (Got g : got) {
                    Set<TopicPartition> owner = g.member().equals("A") ? sa : sb;
                    check(owner.contains(new TopicPartition(topic, g.partition())),
                            "member " + g.member() + " consumed " + g + " outside its assignment " + parts(owner)
                                    + "; assignments: " + histories(members));
                }
                step("the two members consumed all " + n1 + " records exactly once ("
                        + consumedSummary(got) + ")");

                // One member leaves; the other takes over everything.
                b.stopAndJoin();
                check(b.error == null, "member B failed: " + b.error);
                waitFor("member A to be assigned all " + PARTITIONS + " partitions after B left", members,
                        () -> a.assignment.equals(all), () -> "");
                step("B closed; A now has " + parts(a.assignment));

                int before = got.size();
                List<Sent> sent2 = produce(producer, topic, 2, PER_KEY_2);
                sent.addAll(sent2);
                checkKeyed(sent);
                int n2 = sent.size();
                waitFor("member A to consume " + sent2.size() + " more records", members, () -> got.size() >= n2,
                        () -> "consumed " + got.size() + " of " + n2 + "; " + consumedSummary(got));
                a.stopAndJoin();
                check(a.error == null, "member A failed: " + a.error);
                List<Got> gotAll = new ArrayList<>(got);
                checkExactlyOnce(sent, gotAll, members);
                for (Got g : gotAll.subList(before, gotAll.size())) {
                    check(g.member().equals("A"), "record consumed by " + g.member() + " after it closed: " + g);
                }
                step("A consumed the " + sent2.size() + " further records, exactly once over all " + n2);

                // Committed offsets = log end offsets = acknowledged records per partition.
                Map<TopicPartition, OffsetAndMetadata> committed = admin.listConsumerGroupOffsets(group)
                        .partitionsToOffsetAndMetadata().get(WAIT.toSeconds(), TimeUnit.SECONDS);
                Map<Integer, Integer> acked = perPartition(sent);
                StringBuilder table = new StringBuilder();
                boolean ok = a.endOffsets != null;
                for (TopicPartition tp : all) {
                    OffsetAndMetadata c = committed.get(tp);
                    Long end = a.endOffsets == null ? null : a.endOffsets.get(tp);
                    long n = acked.getOrDefault(tp.partition(), 0);
                    table.append(String.format("%n    p%d: committed %s, end offset %s, acknowledged %d",
                            tp.partition(), c == null ? "none" : c.offset(), end, n));
                    ok &= c != null && end != null && c.offset() == end && end == n;
                }
                check(ok && committed.keySet().equals(all), "committed offsets vs log end offsets (all "
                        + committed.size() + " committed: " + committed + "):" + table);
                step("committed offsets of " + group + " equal the log end offsets " + offsets(a.endOffsets));
            } finally {
                // Bounded, and never masking the failure that got us here.
                for (Member m : members) {
                    m.stop = true;
                }
                for (Member m : members) {
                    m.thread.join(WAIT.toMillis());
                }
            }
        } finally {
            producer.close(Duration.ofSeconds(10));
            admin.close(Duration.ofSeconds(10));
        }
    }

    /** Describes the topic until it has {@code want} partitions, each with a leader and 3 replicas. */
    static TopicDescription describeUntilLed(Admin admin, String topic, int want) throws Exception {
        long deadline = System.nanoTime() + WAIT.toNanos();
        String seen = "nothing";
        while (true) {
            try {
                TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames()
                        .get(10, TimeUnit.SECONDS).get(topic);
                seen = describe(d);
                boolean ok = d.partitions().size() == want;
                for (int i = 0; ok && i < want; i++) {
                    TopicPartitionInfo p = d.partitions().get(i);
                    ok = p.partition() == i && p.leader() != null && !p.leader().isEmpty()
                            && p.replicas().size() == 3;
                }
                if (ok) {
                    return d;
                }
            } catch (ExecutionException e) {
                seen = "error " + e.getCause();
            }
            if (System.nanoTime() > deadline) {
                throw new AssertionError("describeTopics(" + topic + ") never showed " + want
                        + " partitions, each with a leader and 3 replicas, within " + WAIT.toSeconds()
                        + " s; last seen: " + seen);
            }
            Thread.sleep(200);
        }
    }

    static String describe(TopicDescription d) {
        return d.partitions().size() + " partitions " + d.partitions().stream()
                .map(p -> "p" + p.partition() + " leader " + (p.leader() == null ? "none" : p.leader().idString())
                        + " replicas " + p.replicas().stream().map(n -> n.idString()).collect(Collectors.joining(","))
                        + " isr " + p.isr().stream().map(n -> n.idString()).collect(Collectors.joining(",")))
                .collect(Collectors.joining("; ", "[", "]"));
    }

    /** PER_KEY rounds of one record per key, in key order; returns them acknowledged, in produce order. */
    static List<Sent> produce(KafkaProducer<String, String> producer, String topic, int round, int perKey)
            throws Exception {
        List<String[]> kv = new ArrayList<>();
        List<Future<RecordMetadata>> acks = new ArrayList<>();
        for (int i = 0; i < perKey; i++) {
            for (int k = 0; k < KEYS; k++) {
                String key = "key-" + k;
                String value = key + "/round" + round + "/" + i;
                kv.add(new String[] {key, value});
                acks.add(producer.send(new ProducerRecord<>(topic, key, value)));
            }
        }
        producer.flush();
        List<Sent> out = new ArrayList<>();
        for (int i = 0; i < acks.size(); i++) {
            RecordMetadata md;
            try {
                md = acks.get(i).get(WAIT.toSeconds(), TimeUnit.SECONDS);
            } catch (ExecutionException e) {
                throw new AssertionError("record " + kv.get(i)[1] + " failed: " + e.getCause()
                        + " (" + out.size() + " acknowledged before it: " + perPartition(out) + ")", e);
            }
            out.add(new Sent(kv.get(i)[0], kv.get(i)[1], md.partition(), md.offset()));
        }
        return out;
    }

    /** Same key, same partition; per key offsets increasing; spread; dense offsets per partition. */
    static void checkKeyed(List<Sent> sent) {
        Map<String, List<Sent>> byKey = new TreeMap<>();
        for (Sent s : sent) {
            byKey.computeIfAbsent(s.key(), k -> new ArrayList<>()).add(s);
        }
        for (Map.Entry<String, List<Sent>> e : byKey.entrySet()) {
            List<Sent> l = e.getValue();
            Set<Integer> ps = l.stream().map(Sent::partition).collect(Collectors.toSet());
            check(ps.size() == 1, "key " + e.getKey() + " went to partitions " + ps + ": " + l);
            for (int i = 1; i < l.size(); i++) {
                check(l.get(i).offset() > l.get(i - 1).offset(),
                        "key " + e.getKey() + ": offsets not increasing in produce order: " + l);
            }
        }
        Map<Integer, Integer> pp = perPartition(sent);
        check(pp.size() >= 4, KEYS + " keys reached only partitions " + pp + " (at least 4 of " + PARTITIONS
                + " expected)");
        Map<Integer, List<Long>> offs = new TreeMap<>();
        for (Sent s : sent) {
            offs.computeIfAbsent(s.partition(), p -> new ArrayList<>()).add(s.offset());
        }
        for (Map.Entry<Integer, List<Long>> e : offs.entrySet()) {
            List<Long> o = new ArrayList<>(e.getValue());
            Collections.sort(o);
            for (int i = 0; i < o.size(); i++) {
                check(o.get(i) == i, "partition " + e.getKey() + ": acknowledged offsets are not 0.."
                        + (o.size() - 1) + ": " + o);
            }
        }
    }

    /** Every acknowledged record consumed exactly once, with its key and value; nothing else. */
    static void checkExactlyOnce(List<Sent> sent, List<Got> got, List<Member> members) {
        Map<String, Sent> want = new HashMap<>();
        for (Sent s : sent) {
            want.put(s.partition() + "@" + s.offset(), s);
        }
        Map<String, List<Got>> seen = new HashMap<>();
        for (Got g : got) {
            seen.computeIfAbsent(g.partition() + "@" + g.offset(), k -> new ArrayList<>()).add(g);
        }
        List<String> missing = new ArrayList<>(), dup = new ArrayList<>(), unknown = new ArrayList<>(),
                wrong = new ArrayList<>();
        for (Map.Entry<String, Sent> e : want.entrySet()) {
            List<Got> l = seen.get(e.getKey());
            if (l == null) {
                missing.add(e.getKey());
            } else {
                if (l.size() > 1) {
                    dup.add(l.toString());
                }
                Got g = l.get(0);
                if (!e.getValue().key().equals(g.key()) || !e.getValue().value().equals(g.value())) {
                    wrong.add("sent " + e.getValue() + ", consumed " + g);
                }
            }
        }
        for (String k : seen.keySet()) {
            if (!want.containsKey(k)) {
                unknown.add(seen.get(k).toString());
            }
        }
        if (missing.isEmpty() && dup.isEmpty() && unknown.isEmpty() && wrong.isEmpty()) {
            return;
        }
        Collections.sort(missing);
        throw new AssertionError("not exactly once: " + sent.size() + " acknowledged, " + got.size()
                + " consumed (" + consumedSummary(got) + "); missing " + missing.size() + " " + first(missing)
                + "; duplicated " + dup.size() + " " + first(dup) + "; never produced " + unknown.size() + " "
                + first(unknown) + "; different content " + wrong.size() + " " + first(wrong)
                + "; acknowledged per partition " + perPartition(sent) + "; assignments: " + histories(members));
    }

    static String first(List<String> l) {
        return l.size() <= 10 ? l.toString() : l.subList(0, 10) + "...";
    }

    static Map<Integer, Integer> perPartition(List<Sent> sent) {
        Map<Integer, Integer> m = new TreeMap<>();
        for (Sent s : sent) {
            m.merge(s.partition(), 1, Integer::sum);
        }
        return m;
    }

    static String consumedSummary(Collection<Got> got) {
        Map<String, Map<Integer, Integer>> m = new TreeMap<>();
        for (Got g : got) {
            m.computeIfAbsent(g.member(), k -> new TreeMap<>()).merge(g.partition(), 1, Integer::sum);
        }
        return m.entrySet().stream().map(e -> e.getKey() + " per partition " + e.getValue())
                .collect(Collectors.joining(", "));
    }

    static String parts(Set<TopicPartition> s) {
        return s.stream().map(TopicPartition::partition).sorted().map(String::valueOf)
                .collect(Collectors.joining(",", "[", "]"));
    }

    static String offsets(Map<TopicPartition, Long> m) {
        Map<Integer, Long> t = new TreeMap<>();
        m.forEach((tp, o) -> t.put(tp.partition(), o));
        return t.toString();
    }

    static String histories(List<Member> members) {
        return members.stream().map(m -> m.name + " " + m.history).collect(Collectors.joining("; "));
    }

    /** Waits (bounded) for {@code done}; fails early when a member thread failed. */
    static void waitFor(String what, List<Member> members, BooleanSupplier done, Supplier<String> detail)
            throws InterruptedException {
        long deadline = System.nanoTime() + WAIT.toNanos();
        while (!done.getAsBoolean()) {
            for (Member m : members) {
                if (m.error != null) {
                    throw new AssertionError("member " + m.name + " failed while waiting for " + what + ": "
                            + m.error + "; " + detail.get() + "; assignments: " + histories(members), m.error);
                }
            }
            if (System.nanoTime() > deadline) {
                throw new AssertionError("timed out after " + WAIT.toSeconds() + " s waiting for " + what + "; "
                        + detail.get() + "; assignments: " + histories(members) + "; commit errors: "
                        + members.stream().map(m -> m.name + " " + m.commitErrors).collect(Collectors.joining(", ")));
            }
            Thread.sleep(50);
        }
    }

    /**
     * One group member on its own thread: the KafkaConsumer is created, polled, committed and
     * closed there only. Until {@code go}, every assigned partition is paused (so nothing is
     * consumed before both members are in); after, poll + commitSync.
     */
    static final class Member implements Runnable {
        final String name;
        final String bootstrap, group, topic;
        final Set<TopicPartition> all;
        final AtomicBoolean go;
        final ConcurrentLinkedQueue<Got> got;
        final Thread thread;
        final List<String> history = Collections.synchronizedList(new ArrayList<>());
        final List<String> commitErrors = Collections.synchronizedList(new ArrayList<>());
        volatile Set<TopicPartition> assignment = Set.of();
        volatile boolean stop;
        volatile Throwable error;
        volatile Map<TopicPartition, Long> endOffsets;

        Member(String name, String bootstrap, String group, String topic, Set<TopicPartition> all,
                AtomicBoolean go, ConcurrentLinkedQueue<Got> got) {
            this.name = name;
            this.bootstrap = bootstrap;
            this.group = group;
            this.topic = topic;
            this.all = all;
            this.go = go;
            this.got = got;
            this.thread = new Thread(this, "member-" + name);
            this.thread.setDaemon(true);
        }

        void start() {
            thread.start();
        }

        void stopAndJoin() throws InterruptedException {
            stop = true;
            thread.join(WAIT.toMillis());
            check(!thread.isAlive(), "member " + name + " did not stop within " + WAIT.toSeconds() + " s");
        }

        private void note(String what, Set<TopicPartition> now) {
            assignment = Set.copyOf(now);
            history.add(String.format("%.1fs %s -> %s", (System.nanoTime() - ClientTest.START) / 1e9, what,
                    parts(now)));
        }

        @Override
        public void run() {
            KafkaConsumer<String, String> c = null;
            try {
                c = new KafkaConsumer<>(ClientTest.consumerProps(bootstrap, group));
                KafkaConsumer<String, String> consumer = c;
                consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                    @Override
                    public void onPartitionsRevoked(Collection<TopicPartition> ps) {
                        Set<TopicPartition> now = new HashSet<>(consumer.assignment());
                        now.removeAll(ps);
                        note("revoked " + parts(new HashSet<>(ps)), now);
                    }

                    @Override
                    public void onPartitionsAssigned(Collection<TopicPartition> ps) {
                        if (!go.get()) {
                            consumer.pause(ps);
                        }
                        note("generation " + consumer.groupMetadata().generationId() + " assigned "
                                + parts(new HashSet<>(ps)), consumer.assignment());
                    }

                    @Override
                    public void onPartitionsLost(Collection<TopicPartition> ps) {
                        Set<TopicPartition> now = new HashSet<>(consumer.assignment());
                        now.removeAll(ps);
                        note("lost " + parts(new HashSet<>(ps)), now);
                    }
                });
                while (!stop) {
                    if (go.get() && !consumer.paused().isEmpty()) {
                        consumer.resume(consumer.paused());
                    }
                    ConsumerRecords<String, String> recs = consumer.poll(Duration.ofMillis(200));
                    for (ConsumerRecord<String, String> r : recs) {
                        got.add(new Got(name, r.partition(), r.offset(), r.key(), r.value()));
                    }
                    if (!recs.isEmpty()) {
                        try {
                            consumer.commitSync(Duration.ofSeconds(10));
                        } catch (KafkaException e) {
                            commitErrors.add(e.toString());
                        }
                    }
                }
                endOffsets = consumer.endOffsets(all, Duration.ofSeconds(10));
            } catch (Throwable t) {
                error = t;
            } finally {
                if (c != null) {
                    try {
                        c.close(Duration.ofSeconds(10));
                    } catch (Throwable t) {
                        if (error == null) {
                            error = t;
                        }
                    }
                }
            }
        }
    }
}
