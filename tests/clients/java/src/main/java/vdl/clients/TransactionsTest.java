package vdl.clients;

import static vdl.clients.ClientTest.check;
import static vdl.clients.ClientTest.step;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.UUID;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionListing;
import org.apache.kafka.clients.admin.TransactionState;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.common.utils.AppInfoParser;

/**
 * Transactions (issue 36) with Apache Kafka's Java client (3.9 or 4.x).
 *
 * <ol>
 *   <li>A transactional producer commits a transaction, aborts one, commits another.
 *   <li>A read_committed consumer reads the committed records only; a read_uncommitted one
 *       reads all of them.
 *   <li>Admin.listTransactions and describeTransactions show the transactional id.
 *   <li>A second producer with the same transactional.id fences the first: its commit fails
 *       with ProducerFencedException.
 *   <li>The transaction version in use (KIP-890): with the Kafka 4.x client, which reads the
 *       finalized feature {@code transaction.version} 2 from ApiVersions, every EndTxn bumps the
 *       producer epoch, so after the three transactions DescribeProducers shows epoch 3 on the
 *       partition (the markers carry the bumped epochs); with the 3.9 client (version 1) the
 *       epoch stays 0.
 * </ol>
 *
 * Runs with the Java client 3.9 (tests/clients/run-java.sh) and 4.x
 * (tests/clients/run-java.sh as {@code k4:vdl.clients.TransactionsTest}: the pom with
 * {@code -Dkafka.version=4.1.1}).
 *
 * Usage: TransactionsTest BOOTSTRAP TOPIC (creates TOPIC-txn). Exits 0 on success, 1 with a
 * message on failure. Every wait is bounded.
 */
public final class TransactionsTest {
    private static final Duration STEP_TIMEOUT = Duration.ofSeconds(30);

    public static void main(String[] args) {
        if (args.length < 2) {
            System.err.println("usage: TransactionsTest BOOTSTRAP TOPIC");
            System.exit(2);
        }
        try {
            run(args[0], args[1] + "-txn");
            System.out.println("java transactions test: OK (commit, abort, read_committed and"
                    + " read_uncommitted consumers, list/describe, fencing, transaction version)");
            System.exit(0);
        } catch (Throwable t) {
            System.err.println("java transactions test: FAILED: " + t);
            t.printStackTrace();
            System.exit(1);
        }
    }

    static Properties producerProps(String bootstrap, String txnId) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, 60000);
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, 30000);
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 30000);
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, 10000);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        return p;
    }

    static List<String> readAll(String bootstrap, String topic, String isolation, int want)
            throws InterruptedException {
        Properties cp = new Properties();
        cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        cp.put(ConsumerConfig.GROUP_ID_CONFIG, "txn-" + UUID.randomUUID());
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        cp.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 30000);
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        List<String> values = new ArrayList<>();
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(cp)) {
            TopicPartition tp = new TopicPartition(topic, 0);
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            long deadline = System.nanoTime() + STEP_TIMEOUT.toNanos();
            while (values.size() < want && System.nanoTime() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                    values.add(r.value());
                }
            }
            // Anything beyond what was wanted shows up within a few more polls.
            for (int i = 0; i < 4; i++) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                    values.add(r.value());
                }
            }
        }
        return values;
    }

    static void run(String bootstrap, String topic) throws Exception {
        Properties ap = new Properties();
        ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        String txnId = topic + "-producer";
        try (Admin admin = Admin.create(ap)) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 3))).all()
                    .get(30, TimeUnit.SECONDS);
            step("topic " + topic + " created");

            try (KafkaProducer<String, String> p =
                    new KafkaProducer<>(producerProps(bootstrap, txnId))) {
                p.initTransactions();
                p.beginTransaction();
                p.send(new ProducerRecord<>(topic, 0, "k", "a1"));
                p.send(new ProducerRecord<>(topic, 0, "k", "a2"));
                p.commitTransaction();
                p.beginTransaction();
                // Sent before the abort (the client drops records still unsent at an abort).
                p.send(new ProducerRecord<>(topic, 0, "k", "b1")).get(30, TimeUnit.SECONDS);
                p.abortTransaction();
                p.beginTransaction();
                p.send(new ProducerRecord<>(topic, 0, "k", "c1"));
                p.commitTransaction();
                step("committed, aborted, committed");
            }

            // Transaction version 2 (Kafka 4.x client): each EndTxn bumped the epoch.
            int expectedEpoch = AppInfoParser.getVersion().startsWith("3.") ? 0 : 3;
            TopicPartition tp = new TopicPartition(topic, 0);
            List<ProducerState> producers = admin.describeProducers(List.of(tp)).all()
                    .get(30, TimeUnit.SECONDS).get(tp).activeProducers();
            check(producers.size() == 1, "one producer: " + producers);
            check(producers.get(0).producerEpoch() == expectedEpoch,
                    "client " + AppInfoParser.getVersion() + ": producer epoch "
                    + producers.get(0).producerEpoch() + ", expected " + expectedEpoch);
            step("transaction version " + (expectedEpoch == 0 ? 1 : 2) + " in use (client "
                    + AppInfoParser.getVersion() + "): the partition's producer epoch is "
                    + expectedEpoch);

            List<String> committed = readAll(bootstrap, topic, "read_committed", 3);
            check(committed.equals(List.of("a1", "a2", "c1")), "read_committed: " + committed);
            List<String> all = readAll(bootstrap, topic, "read_uncommitted", 4);
            check(all.equals(List.of("a1", "a2", "b1", "c1")), "read_uncommitted: " + all);
            step("read_committed " + committed + ", read_uncommitted " + all);

            Collection<TransactionListing> listed =
                    admin.listTransactions().all().get(30, TimeUnit.SECONDS);
            long found = listed.stream().filter(t -> t.transactionalId().equals(txnId)).count();
            check(found == 1, "listed once: " + listed);
            Map<String, TransactionDescription> described =
                    admin.describeTransactions(List.of(txnId)).all().get(30, TimeUnit.SECONDS);
            TransactionState state = described.get(txnId).state();
            check(state == TransactionState.COMPLETE_COMMIT, "described: " + described);
            step("listed and described: " + state);
        }

        // Fencing: a second producer of the id; the first one's commit fails.
        KafkaProducer<String, String> old = new KafkaProducer<>(producerProps(bootstrap, txnId));
        try {
            old.initTransactions();
            old.beginTransaction();
            old.send(new ProducerRecord<>(topic, 0, "k", "old")).get(30, TimeUnit.SECONDS);
            try (KafkaProducer<String, String> fresh =
                    new KafkaProducer<>(producerProps(bootstrap, txnId))) {
                fresh.initTransactions();
                boolean fenced = false;
                try {
                    old.commitTransaction();
                } catch (ProducerFencedException e) {
                    fenced = true;
                } catch (KafkaException e) {
                    fenced = e.getCause() instanceof ProducerFencedException;
                    if (!fenced) {
                        throw e;
                    }
                }
                check(fenced, "the old producer's commit was not fenced");
                fresh.beginTransaction();
                fresh.send(new ProducerRecord<>(topic, 0, "k", "new"));
                fresh.commitTransaction();
            }
        } finally {
            old.close(Duration.ofSeconds(5));
        }
        List<String> after = readAll(bootstrap, topic, "read_committed", 4);
        check(after.equals(List.of("a1", "a2", "c1", "new")), "after fencing: " + after);
        step("fenced the old producer; read_committed " + after);
    }
}
