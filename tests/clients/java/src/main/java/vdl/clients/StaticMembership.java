package vdl.clients;

import static vdl.clients.ClientTest.check;
import static vdl.clients.ClientTest.step;

import java.time.Duration;
import java.util.Collections;
import java.util.List;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.BooleanSupplier;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.MemberToRemove;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.RemoveMembersFromConsumerGroupOptions;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.FencedInstanceIdException;

/**
 * Static membership (KIP-345, issue 20 item 2) with Apache Kafka's Java client 3.9.
 *
 * <ol>
 *   <li>Two static members (group.instance.id, session.timeout.ms=45000) split a 2-partition
 *       topic.
 *   <li>One closes (a static member sends no LeaveGroup) and a new process with the same instance
 *       id starts: within 10 s it owns the same partition again, and the other member sees no
 *       revocation (no rebalance: the group's generation stays).
 *   <li>A second live process with the same instance id takes the membership over; the first
 *       gets FencedInstanceIdException.
 *   <li>Admin.removeMembersFromConsumerGroup by instance id succeeds.
 * </ol>
 *
 * Usage: StaticMembership BOOTSTRAP TOPIC (creates TOPIC-static). Exits 0 on success, 1 with a
 * message on failure. Every wait is bounded.
 */
public final class StaticMembership {
    private static final Duration STEP_TIMEOUT = Duration.ofSeconds(30);

    public static void main(String[] args) {
        if (args.length < 2) {
            System.err.println("usage: StaticMembership BOOTSTRAP TOPIC");
            System.exit(2);
        }
        try {
            run(args[0], args[1] + "-static");
            System.out.println("java static membership test: OK (restart keeps the partition"
                    + " without a rebalance, a duplicate instance is fenced, removal by"
                    + " instance id)");
            System.exit(0);
        } catch (Throwable t) {
            System.err.println("java static membership test: FAILED: " + t);
            t.printStackTrace();
            System.exit(1);
        }
    }

    /** A static member and what its rebalance listener saw. */
    static final class Member {
        final KafkaConsumer<String, String> consumer;
        final AtomicInteger revocations = new AtomicInteger();

        Member(String bootstrap, String group, String instance, String topic) {
            Properties p = ClientTest.consumerProps(bootstrap, group);
            p.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, instance);
            p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, 45000);
            p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, 1000);
            consumer = new KafkaConsumer<>(p);
            consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsRevoked(java.util.Collection<TopicPartition> parts) {
                    if (!parts.isEmpty()) {
                        revocations.incrementAndGet();
                    }
                }

                @Override
                public void onPartitionsAssigned(java.util.Collection<TopicPartition> parts) {}

                @Override
                public void onPartitionsLost(java.util.Collection<TopicPartition> parts) {
                    revocations.incrementAndGet();
                }
            });
        }

        Set<TopicPartition> assignment() {
            Set<TopicPartition> out = new TreeSet<>(Comparator.BY_PARTITION);
            out.addAll(consumer.assignment());
            return out;
        }
    }

    /** Orders partitions by topic then index. */
    enum Comparator implements java.util.Comparator<TopicPartition> {
        BY_PARTITION;

        @Override
        public int compare(TopicPartition a, TopicPartition b) {
            int c = a.topic().compareTo(b.topic());
            return c != 0 ? c : Integer.compare(a.partition(), b.partition());
        }
    }

    /** Polls every member in turn until `done` holds or `timeout` passes. */
    static void pollUntil(List<Member> members, Duration timeout, BooleanSupplier done, String what) {
        long deadline = System.nanoTime() + timeout.toNanos();
        while (!done.getAsBoolean()) {
            check(System.nanoTime() < deadline, "timed out: " + what);
            for (Member m : members) {
                m.consumer.poll(Duration.ofMillis(100));
            }
        }
    }

    static void run(String bootstrap, String topic) throws Exception {
        String group = topic + "-group";
        Properties ap = new Properties();
        ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(ap)) {
            admin.createTopics(List.of(new NewTopic(topic, 2, (short) 3))).all()
                    .get(STEP_TIMEOUT.toSeconds(), TimeUnit.SECONDS);
            step("created " + topic + " (2 partitions)");

            Member a = new Member(bootstrap, group, "static-a", topic);
            Member b = new Member(bootstrap, group, "static-b", topic);
            pollUntil(List.of(a, b), STEP_TIMEOUT,
                    () -> a.assignment().size() == 1 && b.assignment().size() == 1,
                    "both static members own one partition");
            Set<TopicPartition> aOwned = a.assignment();
            step("static-a owns " + aOwned + ", static-b owns " + b.assignment());

            // 2. static-a's process restarts.
            a.consumer.close(Duration.ofSeconds(5));
            long restarted = System.nanoTime();
            Member a2 = new Member(bootstrap, group, "static-a", topic);
            pollUntil(List.of(a2, b), Duration.ofSeconds(10),
                    () -> a2.assignment().equals(aOwned),
                    "the restarted static member owns its partition again within 10 s");
            step(String.format("restarted static-a owns %s again after %.1f s", a2.assignment(),
                    (System.nanoTime() - restarted) / 1e9));
            // b keeps polling a while: no rebalance reaches it.
            long settle = System.nanoTime() + Duration.ofSeconds(3).toNanos();
            while (System.nanoTime() < settle) {
                a2.consumer.poll(Duration.ofMillis(100));
                b.consumer.poll(Duration.ofMillis(100));
            }
            check(b.revocations.get() == 0, "static-b saw " + b.revocations.get()
                    + " revocations during static-a's restart");
            check(b.assignment().size() == 1, "static-b lost its partition");
            ConsumerGroupDescription d = describe(admin, group);
            check(d.members().size() == 2, "two members after the restart: " + d);
            step("static-b saw no rebalance; the group has 2 members");

            // 3. A second live process with static-a's instance id: the first is fenced.
            Member a3 = new Member(bootstrap, group, "static-a", topic);
            pollUntil(List.of(a3), STEP_TIMEOUT, () -> a3.assignment().equals(aOwned),
                    "the duplicate static-a takes the partition over");
            long deadline = System.nanoTime() + STEP_TIMEOUT.toNanos();
            boolean fenced = false;
            while (!fenced) {
                check(System.nanoTime() < deadline, "the first static-a was never fenced");
                try {
                    a2.consumer.poll(Duration.ofMillis(200));
                    a3.consumer.poll(Duration.ofMillis(100));
                } catch (FencedInstanceIdException e) {
                    fenced = true;
                }
            }
            step("the older process with static-a's instance id got FencedInstanceIdException");
            a2.consumer.close(Duration.ofSeconds(1));

            // 4. Removal by instance id.
            admin.removeMembersFromConsumerGroup(group, new RemoveMembersFromConsumerGroupOptions(
                    Collections.singleton(new MemberToRemove("static-b"))))
                    .all().get(STEP_TIMEOUT.toSeconds(), TimeUnit.SECONDS);
            step("Admin.removeMembersFromConsumerGroup(static-b) succeeded");
            // static-b's process learns it is gone; a3 takes both partitions after rejoining.
            b.consumer.close(Duration.ofSeconds(1));
            pollUntil(List.of(a3), STEP_TIMEOUT, () -> a3.assignment().size() == 2,
                    "the remaining member owns both partitions");
            step("the remaining member owns " + a3.assignment());
            a3.consumer.close(Duration.ofSeconds(5));
        }
    }

    static ConsumerGroupDescription describe(Admin admin, String group) throws Exception {
        return admin.describeConsumerGroups(List.of(group)).all()
                .get(STEP_TIMEOUT.toSeconds(), TimeUnit.SECONDS).get(group);
    }
}
