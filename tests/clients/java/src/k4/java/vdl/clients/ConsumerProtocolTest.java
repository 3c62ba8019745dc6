package vdl.clients;

import static vdl.clients.ClientTest.check;
import static vdl.clients.ClientTest.step;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.CommitFailedException;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The consumer group protocol of Kafka 4 (KIP-848, issue 37) with Apache Kafka's Java client
 * 4.1.1 and {@code group.protocol=consumer}: the coordinator assigns, members converge by
 * heartbeating, and a member joining or leaving moves only the partitions that change owner.
 *
 * <ol>
 *   <li>A 6-partition topic (RF 3) and a producer writing numbered records (one partition per
 *       number mod 6) at a steady pace for the whole test.
 *   <li>Members join and leave while the records flow: A; B joins; C joins; B closes; D joins.
 *       Each member commits what it processed every 500 ms (a commit refused because the member
 *       epoch just moved is retried in the next round) and, as users do, on revocation (retried
 *       while the answer is STALE_MEMBER_EPOCH).
 *       After each step the group converges (every partition owned once, the sizes differ by at
 *       most one, the description's assignments equal their targets); the rebalance listeners
 *       show that a member revoked only partitions it lost and was assigned only partitions it
 *       gained: a member that keeps its partitions sees no callback (no stop-the-world), and a
 *       clean leave revokes nothing from anyone else.
 *   <li>Admin.describeConsumerGroups: type CONSUMER, state STABLE, assignor "uniform" (the
 *       default), the members with their assignments; Admin.listGroups with the type filter
 *       CONSUMER lists the group, with CLASSIC does not.
 *   <li>Coordinator failover, when the runner says how to kill a node (system property
 *       {@code vdl.failover.kill}: a shell command, {@code {id}} replaced by the coordinator's
 *       node id; {@code vdl.failover.restart}, optional, run afterwards): the coordinator is
 *       SIGKILLed while records flow; the members keep their partitions (no callback, their
 *       member epochs unchanged or higher) and the next coordinator describes the same
 *       members and assignments.
 *   <li>Every record produced is processed exactly once (no loss, no duplicate across the clean
 *       handovers and the failover).
 *   <li>A second group with {@code group.remote.assignor=range}: described with assignor
 *       "range", two members with three consecutive partitions each.
 * </ol>
 *
 * Usage: ConsumerProtocolTest BOOTSTRAP TOPIC [N] (creates TOPIC-cgp; N is the least number of
 * records produced, default 500). Exits 0 on success, 1 with a message on failure. Every wait is
 * bounded.
 */
public final class ConsumerProtocolTest {
    private static final Duration STEP_TIMEOUT = Duration.ofSeconds(45);
    private static final int PARTITIONS = 6;
    /** The producer's pace: one record every this many milliseconds. */
    private static final long PRODUCE_EVERY_MS = 10;
    /** The producer stops at this many records, whatever happens (a bound on the stream). */
    private static final int MAX_RECORDS = 30000;

    public static void main(String[] args) {
        if (args.length < 2) {
            System.err.println("usage: ConsumerProtocolTest BOOTSTRAP TOPIC [N]");
            System.exit(2);
        }
        int n = args.length > 2 ? Integer.parseInt(args[2]) : 500;
        // The failover part makes every client warn about the dead node on each reconnect.
        System.setProperty("org.slf4j.simpleLogger.log.org.apache.kafka.clients.NetworkClient",
                System.getProperty("org.slf4j.simpleLogger.log.org.apache.kafka.clients.NetworkClient",
                        "error"));
        try {
            String summary = run(args[0], args[1] + "-cgp", n);
            System.out.println("java consumer protocol test: OK (" + summary + ")");
            System.exit(0);
        } catch (Throwable t) {
            System.err.println("java consumer protocol test: FAILED: " + t);
            t.printStackTrace();
            System.exit(1);
        }
    }

    /** What a member's rebalance listener saw, in order. */
    record Event(String kind, Set<Integer> partitions) {}

    /** A group member: a KafkaConsumer polled by its own thread, and what it saw. */
    static final class Member {
        final String name;
        final List<Event> events = new ArrayList<>();
        final AtomicBoolean stop = new AtomicBoolean();
        final AtomicReference<Throwable> error = new AtomicReference<>();
        volatile Set<Integer> owned = Set.of();
        volatile String memberId = "";
        volatile int memberEpoch = -1;
        /** Periodic commits refused as stale (retried in the next round). */
        final AtomicLong staleCommits = new AtomicLong();
        final Thread thread;

        Member(String name, String bootstrap, String group, String topic, String assignor,
               Map<Integer, Integer> processed) {
            this.name = name;
            Properties p = ClientTest.consumerProps(bootstrap, group);
            p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
            p.put(ConsumerConfig.CLIENT_ID_CONFIG, name);
            if (assignor != null) {
                p.put(ConsumerConfig.GROUP_REMOTE_ASSIGNOR_CONFIG, assignor);
            }
            thread = new Thread(() -> loop(p, topic, processed), "member-" + name);
            thread.setDaemon(true);
            thread.start();
        }

        private void loop(Properties p, String topic, Map<Integer, Integer> processed) {
            Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
            try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
                c.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                    @Override
                    public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                        note("revoked", parts);
                        // Commit what was processed of the partitions going away, so their next
                        // owner starts right after it: the handover loses and repeats nothing.
                        Map<TopicPartition, OffsetAndMetadata> done = new HashMap<>();
                        for (TopicPartition tp : parts) {
                            OffsetAndMetadata o = next.remove(tp);
                            if (o != null) {
                                done.put(tp, o);
                            }
                        }
                        if (!done.isEmpty()) {
                            commitRetryingStale(c, done);
                        }
                    }

                    @Override
                    public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                        note("assigned", parts);
                    }

                    @Override
                    public void onPartitionsLost(Collection<TopicPartition> parts) {
                        note("lost", parts);
                        parts.forEach(next::remove);
                    }
                });
                long lastCommit = System.nanoTime();
                while (!stop.get()) {
                    for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100))) {
                        processed.merge(Integer.parseInt(r.value()), 1, Integer::sum);
                        next.put(new TopicPartition(r.topic(), r.partition()),
                                new OffsetAndMetadata(r.offset() + 1));
                    }
                    owned = c.assignment().stream().map(TopicPartition::partition)
                            .collect(Collectors.toCollection(TreeSet::new));
                    memberId = c.groupMetadata().memberId();
                    memberEpoch = c.groupMetadata().generationId();
                    if (System.nanoTime() - lastCommit > 500_000_000L && !next.isEmpty()) {
                        try {
                            c.commitSync(new HashMap<>(next));
                        } catch (CommitFailedException e) {
                            // Kafka 4.1 answers STALE_MEMBER_EPOCH to a commit sent with the
                            // epoch the member had just before the coordinator bumped it; the
                            // next round commits again with the new epoch.
                            staleCommits.incrementAndGet();
                        }
                        lastCommit = System.nanoTime();
                    }
                }
                // close() revokes (the listener commits) and leaves the group.
                c.close(Duration.ofSeconds(20));
            } catch (Throwable t) {
                error.set(t);
            }
            owned = Set.of();
        }

        /**
         * commitSync, again while Kafka answers STALE_MEMBER_EPOCH (at most 10 s): the commit
         * went out with the epoch the member had just before a heartbeat response moved it (Kafka
         * 4.1 takes commits at the current member epoch only); the retry carries the new one.
         */
        private void commitRetryingStale(KafkaConsumer<String, String> c,
                                         Map<TopicPartition, OffsetAndMetadata> offsets) {
            long deadline = System.nanoTime() + 10_000_000_000L;
            while (true) {
                try {
                    c.commitSync(offsets);
                    return;
                } catch (CommitFailedException e) {
                    staleCommits.incrementAndGet();
                    if (System.nanoTime() > deadline) {
                        throw e;
                    }
                    try {
                        Thread.sleep(100);
                    } catch (InterruptedException ie) {
                        Thread.currentThread().interrupt();
                        throw e;
                    }
                }
            }
        }

        private void note(String kind, Collection<TopicPartition> parts) {
            if (parts.isEmpty()) {
                return;
            }
            Set<Integer> ps = parts.stream().map(TopicPartition::partition)
                    .collect(Collectors.toCollection(TreeSet::new));
            synchronized (events) {
                events.add(new Event(kind, ps));
            }
        }

        int eventCount() {
            synchronized (events) {
                return events.size();
            }
        }

        List<Event> eventsSince(int index) {
            synchronized (events) {
                return new ArrayList<>(events.subList(index, events.size()));
            }
        }

        void checkAlive() {
            Throwable t = error.get();
            if (t != null) {
                throw new AssertionError("member " + name + " failed: " + t, t);
            }
            check(thread.isAlive(), "member " + name + " stopped polling");
        }

        /** Closes the consumer cleanly (on its own thread) and waits for it. */
        void close() throws InterruptedException {
            stop.set(true);
            thread.join(30_000);
            check(!thread.isAlive(), "member " + name + " did not close within 30 s");
            Throwable t = error.get();
            if (t != null) {
                throw new AssertionError("member " + name + " failed: " + t, t);
            }
        }
    }

    /** The numbered records, written at a steady pace by a thread of their own. */
    static final class Producer implements AutoCloseable {
        final AtomicLong sent = new AtomicLong();
        final AtomicReference<Exception> error = new AtomicReference<>();
        final AtomicBoolean stop = new AtomicBoolean();
        final KafkaProducer<String, String> producer;
        final Thread thread;

        Producer(String bootstrap, String topic) {
            Properties p = new Properties();
            p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            p.put(ProducerConfig.ACKS_CONFIG, "all");
            p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true);
            p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 120000);
            p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
            p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
            producer = new KafkaProducer<>(p);
            thread = new Thread(() -> {
                try {
                    for (int i = 0; i < MAX_RECORDS && !stop.get(); i++) {
                        producer.send(new ProducerRecord<>(topic, i % PARTITIONS, null,
                                Integer.toString(i)), (md, e) -> {
                                    if (e != null) {
                                        error.compareAndSet(null, e);
                                    }
                                });
                        sent.set(i + 1);
                        Thread.sleep(PRODUCE_EVERY_MS);
                    }
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }, "producer");
            thread.setDaemon(true);
            thread.start();
        }

        /** Stops producing once at least `atLeast` records are out; returns how many were sent. */
        long finish(long atLeast) throws InterruptedException {
            long deadline = System.nanoTime() + STEP_TIMEOUT.toNanos();
            while (sent.get() < atLeast && thread.isAlive()) {
                check(System.nanoTime() < deadline, "the producer did not reach " + atLeast);
                Thread.sleep(50);
            }
            stop.set(true);
            thread.join(10_000);
            producer.flush();
            if (error.get() != null) {
                throw new AssertionError("a produce failed: " + error.get(), error.get());
            }
            return sent.get();
        }

        @Override
        public void close() {
            stop.set(true);
            producer.close(Duration.ofSeconds(10));
        }
    }

    static String run(String bootstrap, String topic, int n) throws Exception {
        String group = topic + "-group";
        Properties ap = new Properties();
        ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        ap.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 30000);
        Map<Integer, Integer> processed = new ConcurrentHashMap<>();
        List<Member> all = new ArrayList<>();
        Admin admin = Admin.create(ap);
        try {
            admin.createTopics(List.of(new NewTopic(topic, PARTITIONS, (short) 3))).all()
                    .get(STEP_TIMEOUT.toSeconds(), TimeUnit.SECONDS);
            step("created " + topic + " (" + PARTITIONS + " partitions, RF 3)");
            try (Producer producer = new Producer(bootstrap, topic)) {
                Map<String, Member> live = new LinkedHashMap<>();
                String[] plan = {"+A", "+B", "+C", "-B", "+D"};
                for (String change : plan) {
                    String name = change.substring(1);
                    Map<String, Set<Integer>> before = owners(live);
                    Map<String, Integer> marks = marks(live);
                    if (change.startsWith("+")) {
                        Member m = new Member(name, bootstrap, group, topic, null, processed);
                        all.add(m);
                        live.put(name, m);
                    } else {
                        live.remove(name).close();
                    }
                    long t0 = System.nanoTime();
                    Map<String, Set<Integer>> after = converge(admin, group, live, "uniform");
                    checkOnlyMovedPartitions(change, live, before, after, marks);
                    step(String.format("%s: converged in %.1f s to %s (only moved partitions"
                            + " revoked/assigned)", change, (System.nanoTime() - t0) / 1e9, after));
                }

                ConsumerGroupDescription d = describe(admin, group);
                check(d.type() == GroupType.CONSUMER, "type " + d.type() + ", not CONSUMER");
                check(d.groupState() == GroupState.STABLE, "state " + d.groupState());
                check("uniform".equals(d.partitionAssignor()),
                        "assignor " + d.partitionAssignor() + ", not uniform (the default)");
                checkListed(admin, group);
                step("describe: type CONSUMER, STABLE, assignor uniform, members " + live.keySet()
                        + "; listGroups(type CONSUMER) lists it, listGroups(type CLASSIC) does not");

                String failover = failover(admin, group, live, producer, processed);

                long total = producer.finish(n);
                waitProcessed(processed, total, live.values());
                for (Member m : live.values()) {
                    m.close();
                }
                checkExactlyOnce(processed, total);
                step(total + " records produced, each processed exactly once");
                rangeGroup(admin, bootstrap, topic);
                return total + " records each processed once across 5 joins/leaves"
                        + failover + ", only moved partitions revoked, uniform and range";
            }
        } finally {
            for (Member m : all) {
                m.stop.set(true);
            }
            for (Member m : all) {
                m.thread.join(25_000);
            }
            admin.close(Duration.ofSeconds(5));
        }
    }

    static Map<String, Set<Integer>> owners(Map<String, Member> live) {
        Map<String, Set<Integer>> out = new TreeMap<>();
        live.forEach((k, m) -> out.put(k, m.owned));
        return out;
    }

    static Map<String, Integer> marks(Map<String, Member> live) {
        Map<String, Integer> out = new HashMap<>();
        live.forEach((k, m) -> out.put(k, m.eventCount()));
        return out;
    }

    /**
     * Waits until the live members own every partition once, evenly, and the group's
     * description (by the coordinator) agrees: the same members, each at its target assignment.
     */
    static Map<String, Set<Integer>> converge(Admin admin, String group, Map<String, Member> live,
                                              String assignor) throws Exception {
        long deadline = System.nanoTime() + STEP_TIMEOUT.toNanos();
        String last = "";
        while (true) {
            for (Member m : live.values()) {
                m.checkAlive();
            }
            Map<String, Set<Integer>> now = owners(live);
            last = "owned " + now;
            if (coversEvenly(now.values())) {
                ConsumerGroupDescription d = describeQuietly(admin, group);
                last += "; described " + d;
                if (d != null && agrees(d, live, assignor)) {
                    return now;
                }
            }
            check(System.nanoTime() < deadline, "the group did not converge in "
                    + STEP_TIMEOUT.toSeconds() + " s: " + last);
            Thread.sleep(200);
        }
    }

    static boolean coversEvenly(Collection<Set<Integer>> owned) {
        Set<Integer> union = new HashSet<>();
        int total = 0;
        int min = Integer.MAX_VALUE;
        int max = 0;
        for (Set<Integer> s : owned) {
            union.addAll(s);
            total += s.size();
            min = Math.min(min, s.size());
            max = Math.max(max, s.size());
        }
        return total == PARTITIONS && union.size() == PARTITIONS && max - min <= 1;
    }

    static boolean agrees(ConsumerGroupDescription d, Map<String, Member> live, String assignor) {
        if (d.groupState() != GroupState.STABLE || !assignor.equals(d.partitionAssignor())
                || d.members().size() != live.size()) {
            return false;
        }
        Map<String, Set<Integer>> byId = new HashMap<>();
        for (Member m : live.values()) {
            byId.put(m.memberId, m.owned);
        }
        for (MemberDescription md : d.members()) {
            Set<Integer> assigned = partitions(md.assignment().topicPartitions());
            Set<Integer> target = md.targetAssignment()
                    .map(t -> partitions(t.topicPartitions())).orElse(null);
            if (!assigned.equals(target) || !assigned.equals(byId.get(md.consumerId()))) {
                return false;
            }
        }
        return true;
    }

    static Set<Integer> partitions(Collection<TopicPartition> tps) {
        return tps.stream().map(TopicPartition::partition)
                .collect(Collectors.toCollection(TreeSet::new));
    }

    /**
     * The heart of KIP-848 for users: in a step, a member revoked only partitions it owned before
     * and not after, and was assigned only partitions it owns after and not before; nothing was
     * lost.
     */
    static void checkOnlyMovedPartitions(String change, Map<String, Member> live,
                                         Map<String, Set<Integer>> before,
                                         Map<String, Set<Integer>> after,
                                         Map<String, Integer> marks) {
        for (Map.Entry<String, Member> e : live.entrySet()) {
            String name = e.getKey();
            Set<Integer> was = before.getOrDefault(name, Set.of());
            Set<Integer> is = after.get(name);
            for (Event ev : e.getValue().eventsSince(marks.getOrDefault(name, 0))) {
                for (int p : ev.partitions()) {
                    boolean ok = switch (ev.kind()) {
                        case "revoked" -> was.contains(p) && !is.contains(p);
                        case "assigned" -> is.contains(p) && !was.contains(p);
                        default -> false;
                    };
                    check(ok, change + ": member " + name + " had " + ev + " (owned " + was
                            + " before, " + is + " after): only moved partitions may be"
                            + " revoked or assigned");
                }
            }
        }
        check(!before.equals(after), change + ": no partition moved: " + before + " -> " + after);
    }

    static void checkListed(Admin admin, String group) throws Exception {
        Collection<GroupListing> consumer = admin.listGroups(
                new ListGroupsOptions().withTypes(Set.of(GroupType.CONSUMER))).all()
                .get(STEP_TIMEOUT.toSeconds(), TimeUnit.SECONDS);
        GroupListing l = consumer.stream().filter(g -> g.groupId().equals(group)).findFirst()
                .orElseThrow(() -> new AssertionError(
                        "listGroups(type CONSUMER) does not list " + group + ": " + consumer));
        check(l.type().equals(java.util.Optional.of(GroupType.CONSUMER)), "listed as " + l);
        check("consumer".equals(l.protocol()), "protocol type " + l.protocol() + " in " + l);
        Collection<GroupListing> classic = admin.listGroups(
                new ListGroupsOptions().withTypes(Set.of(GroupType.CLASSIC))).all()
                .get(STEP_TIMEOUT.toSeconds(), TimeUnit.SECONDS);
        check(classic.stream().noneMatch(g -> g.groupId().equals(group)),
                "listGroups(type CLASSIC) lists the consumer group " + group + ": " + classic);
    }

    /** The coordinator-failover part; "" when the runner gave no way to kill a node. */
    static String failover(Admin admin, String group, Map<String, Member> live, Producer producer,
                           Map<Integer, Integer> processed) throws Exception {
        String kill = System.getProperty("vdl.failover.kill", "");
        if (kill.isBlank()) {
            step("coordinator failover: not run (no vdl.failover.kill command)");
            return "";
        }
        ConsumerGroupDescription d = describe(admin, group);
        int coordinator = d.coordinator().id();
        Map<String, Set<Integer>> before = owners(live);
        Map<String, Integer> marks = marks(live);
        Map<String, Integer> epochs = new HashMap<>();
        live.forEach((k, m) -> epochs.put(k, m.memberEpoch));
        shell(kill.replace("{id}", Integer.toString(coordinator)));
        long killedAt = System.nanoTime();
        step("killed the coordinator, node " + coordinator + " (member epochs " + epochs + ")");
        try {
            // Records keep flowing; they are all processed by the same owners, and several
            // heartbeats go to the next coordinator.
            long target = producer.sent.get() + 300;
            long deadline = System.nanoTime() + STEP_TIMEOUT.toNanos();
            while (countProcessed(processed) < target
                    || System.nanoTime() - killedAt < 8_000_000_000L) {
                for (Member m : live.values()) {
                    m.checkAlive();
                }
                check(System.nanoTime() < deadline, "after the coordinator kill only "
                        + countProcessed(processed) + " of " + target + " records processed");
                Thread.sleep(200);
            }
            Map<String, Set<Integer>> after = owners(live);
            for (Map.Entry<String, Member> e : live.entrySet()) {
                List<Event> seen = e.getValue().eventsSince(marks.get(e.getKey()));
                check(seen.isEmpty(), "member " + e.getKey() + " saw " + seen
                        + " across the coordinator failover (a reassignment)");
                check(e.getValue().memberEpoch >= epochs.get(e.getKey()), "member "
                        + e.getKey() + "'s epoch went from " + epochs.get(e.getKey()) + " to "
                        + e.getValue().memberEpoch);
            }
            check(before.equals(after), "assignments moved across the failover: " + before
                    + " -> " + after);
            Map<String, Set<Integer>> described = converge(admin, group, live, "uniform");
            check(before.equals(described), "the next coordinator describes " + described
                    + ", not " + before);
            int next = describe(admin, group).coordinator().id();
            step(String.format("coordinator failover (node %d -> %d): %.1f s later the members"
                    + " keep %s, no callback, epochs %s", coordinator, next,
                    (System.nanoTime() - killedAt) / 1e9, after, epochsOf(live)));
            return ", a coordinator kill without reassignment";
        } finally {
            String restart = System.getProperty("vdl.failover.restart", "");
            if (!restart.isBlank()) {
                shell(restart);
                step("restarted the killed node");
            }
        }
    }

    static Map<String, Integer> epochsOf(Map<String, Member> live) {
        Map<String, Integer> out = new TreeMap<>();
        live.forEach((k, m) -> out.put(k, m.memberEpoch));
        return out;
    }

    static void shell(String command) throws Exception {
        Process p = new ProcessBuilder("bash", "-c", command).inheritIO().start();
        check(p.waitFor(120, TimeUnit.SECONDS), "command timed out: " + command);
        check(p.exitValue() == 0, "command failed (" + p.exitValue() + "): " + command);
    }

    static long countProcessed(Map<Integer, Integer> processed) {
        return processed.size();
    }

    static void waitProcessed(Map<Integer, Integer> processed, long total,
                              Collection<Member> live) throws Exception {
        long deadline = System.nanoTime() + STEP_TIMEOUT.toNanos();
        while (processed.size() < total) {
            for (Member m : live) {
                m.checkAlive();
            }
            check(System.nanoTime() < deadline, "only " + processed.size() + " of " + total
                    + " records processed");
            Thread.sleep(100);
        }
    }

    static void checkExactlyOnce(Map<Integer, Integer> processed, long total) {
        List<Integer> missing = new ArrayList<>();
        List<Integer> twice = new ArrayList<>();
        for (int i = 0; i < total; i++) {
            int c = processed.getOrDefault(i, 0);
            if (c == 0 && missing.size() < 20) {
                missing.add(i);
            } else if (c > 1 && twice.size() < 20) {
                twice.add(i);
            }
        }
        check(processed.size() == total && missing.isEmpty(), "records never processed: "
                + missing + " (" + processed.size() + " of " + total + ")");
        check(twice.isEmpty(), "records processed more than once across clean handovers: "
                + twice);
    }

    /** A second group with the range assignor: two members, three consecutive partitions each. */
    static void rangeGroup(Admin admin, String bootstrap, String topic) throws Exception {
        String group = topic + "-range";
        Map<Integer, Integer> ignored = new ConcurrentHashMap<>();
        Map<String, Member> live = new LinkedHashMap<>();
        try {
            live.put("R1", new Member("R1", bootstrap, group, topic, "range", ignored));
            live.put("R2", new Member("R2", bootstrap, group, topic, "range", ignored));
            Map<String, Set<Integer>> owned = converge(admin, group, live, "range");
            for (Set<Integer> s : owned.values()) {
                List<Integer> ps = new ArrayList<>(s);
                check(ps.size() == 3 && ps.get(2) - ps.get(0) == 2,
                        "range gives each of 2 members 3 consecutive partitions: " + owned);
            }
            step("group.remote.assignor=range: described with assignor range, " + owned);
        } finally {
            for (Member m : live.values()) {
                m.close();
            }
        }
    }

    static ConsumerGroupDescription describe(Admin admin, String group) throws Exception {
        return admin.describeConsumerGroups(List.of(group)).all()
                .get(STEP_TIMEOUT.toSeconds(), TimeUnit.SECONDS).get(group);
    }

    static ConsumerGroupDescription describeQuietly(Admin admin, String group) {
        try {
            return describe(admin, group);
        } catch (Exception e) {
            return null;
        }
    }
}
