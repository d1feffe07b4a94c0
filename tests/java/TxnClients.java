// Interop check of transactions with the Apache Kafka Java clients (4.x).
//
// What it proves: a broker serves the stock transactional KafkaProducer and
// a read_committed KafkaConsumer (KIP-98/447). On a fresh topic it runs,
// with one transactional producer: a committed transaction of `count`
// records (c-<i>), an aborted one (a-<i>, flushed before the abort so the
// records are in the log), a committed one (d-<i>) that also commits a
// group's offsets with sendOffsetsToTransaction(offsets, groupMetadata())
// from a subscribed read_committed consumer, and finally a zombie: the
// producer writes z-<i> in an open transaction, a second producer with the
// same transactional.id calls initTransactions, and the first producer's
// commitTransaction must throw ProducerFencedException (or
// InvalidProducerEpochException, as Kafka reports a fenced epoch on
// produce). A read_committed consumer must then see exactly the c- and d-
// records, a read_uncommitted one all 4*count, and the group's committed
// offsets must equal the consumed ones.
//
//   java -cp '<kafka lib dir>/*' tests/java/TxnClients.java <bootstrap> <topic> <count> <partitions>
//
// Prints one JSON line {"committed_seen":N,"uncommitted_seen":N,
// "aborted_visible":A,"zombie_visible":Z,"fenced":true,"offsets_ok":true,
// "duplicates":D} and exits 0 only if everything matched.

import java.io.OutputStream;
import java.io.PrintStream;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.UUID;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InvalidProducerEpochException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class TxnClients {
    static final List<String> problems = new ArrayList<>();

    static void problem(String msg) {
        problems.add(msg);
        System.err.println("TxnClients: " + msg);
    }

    static KafkaProducer<String, String> producer(String bs, String txnId) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bs);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "30000");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        return new KafkaProducer<>(p, new StringSerializer(), new StringSerializer());
    }

    static KafkaConsumer<String, String> consumer(String bs, String group, String isolation) {
        Properties c = new Properties();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bs);
        c.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        return new KafkaConsumer<>(c, new StringDeserializer(), new StringDeserializer());
    }

    static List<String> readAll(String bs, String topic, int partitions, String isolation, int want) {
        List<String> vals = new ArrayList<>();
        try (KafkaConsumer<String, String> c = consumer(bs, "reader-" + UUID.randomUUID(), isolation)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int q = 0; q < partitions; q++) tps.add(new TopicPartition(topic, q));
            c.assign(tps);
            c.seekToBeginning(tps);
            long deadline = System.currentTimeMillis() + 30_000;
            long idleSince = -1;
            while (System.currentTimeMillis() < deadline) {
                var recs = c.poll(Duration.ofMillis(500));
                if (recs.isEmpty()) {
                    if (vals.size() >= want) {
                        if (idleSince < 0) idleSince = System.currentTimeMillis();
                        if (System.currentTimeMillis() - idleSince > 2000) break;
                    }
                    continue;
                }
                idleSince = -1;
                for (ConsumerRecord<String, String> r : recs) vals.add(r.value());
            }
        }
        return vals;
    }

    public static void main(String[] args) throws Exception {
        System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        PrintStream err = System.err;
        System.setErr(new PrintStream(OutputStream.nullOutputStream()));
        org.slf4j.LoggerFactory.getLogger(TxnClients.class);
        System.setErr(err);

        String bs = args[0], topic = args[1];
        int count = Integer.parseInt(args[2]), partitions = Integer.parseInt(args[3]);
        Properties ap = new Properties();
        ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bs);
        try (Admin admin = Admin.create(ap)) {
            admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all().get();
        }
        String txnId = "java-txn-" + topic;
        KafkaProducer<String, String> p = producer(bs, txnId);
        p.initTransactions();
        p.beginTransaction();
        for (int i = 0; i < count; i++) p.send(new ProducerRecord<>(topic, "k" + i, "c-" + i));
        p.commitTransaction();
        p.beginTransaction();
        for (int i = 0; i < count; i++) p.send(new ProducerRecord<>(topic, "k" + i, "a-" + i));
        p.flush();
        p.abortTransaction();

        String group = "g-" + topic;
        Map<TopicPartition, OffsetAndMetadata> consumed = new HashMap<>();
        Map<TopicPartition, Long> committed = new HashMap<>();
        try (KafkaConsumer<String, String> c = consumer(bs, group, "read_committed")) {
            c.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 30_000;
            int seen = 0;
            while (System.currentTimeMillis() < deadline && seen < count) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                    seen++;
                    consumed.put(new TopicPartition(topic, r.partition()), new OffsetAndMetadata(r.offset() + 1));
                }
            }
            p.beginTransaction();
            for (int i = 0; i < count; i++) p.send(new ProducerRecord<>(topic, "k" + i, "d-" + i));
            p.sendOffsetsToTransaction(consumed, c.groupMetadata());
            p.commitTransaction();
            Set<TopicPartition> tps = new HashSet<>();
            for (int q = 0; q < partitions; q++) tps.add(new TopicPartition(topic, q));
            for (var e : c.committed(tps).entrySet()) {
                if (e.getValue() != null) committed.put(e.getKey(), e.getValue().offset());
            }
        }
        Map<TopicPartition, Long> consumedOffsets = new HashMap<>();
        consumed.forEach((k, v) -> consumedOffsets.put(k, v.offset()));
        boolean offsetsOk = committed.equals(consumedOffsets);
        if (!offsetsOk) problem("committed offsets " + committed + " differ from consumed " + consumedOffsets);

        p.beginTransaction();
        for (int i = 0; i < count; i++) p.send(new ProducerRecord<>(topic, "k" + i, "z-" + i));
        p.flush();
        KafkaProducer<String, String> p2 = producer(bs, txnId);
        p2.initTransactions();
        boolean fenced = false;
        try {
            p.commitTransaction();
            problem("the zombie producer committed after being fenced");
        } catch (ProducerFencedException | InvalidProducerEpochException e) {
            fenced = true;
        } catch (KafkaException e) {
            problem("zombie commit failed with " + e + ", not ProducerFencedException");
        }
        p.close(Duration.ZERO);
        p2.close();

        List<String> rc = readAll(bs, topic, partitions, "read_committed", 2 * count);
        List<String> ru = readAll(bs, topic, partitions, "read_uncommitted", 4 * count);
        Set<String> expected = new HashSet<>();
        for (int i = 0; i < count; i++) { expected.add("c-" + i); expected.add("d-" + i); }
        int duplicates = rc.size() - new HashSet<>(rc).size();
        if (!new HashSet<>(rc).equals(expected) || duplicates != 0) {
            problem("read_committed saw " + rc.size() + " records (" + duplicates + " duplicates), expected the " + expected.size() + " committed ones");
        }
        long abortedVisible = rc.stream().filter(v -> v.startsWith("a-")).count();
        long zombieVisible = rc.stream().filter(v -> v.startsWith("z-")).count();
        if (ru.size() != 4 * count) problem("read_uncommitted saw " + ru.size() + " records, expected " + 4 * count);
        System.out.println("{\"committed_seen\":" + rc.size() + ",\"uncommitted_seen\":" + ru.size()
                + ",\"aborted_visible\":" + abortedVisible + ",\"zombie_visible\":" + zombieVisible
                + ",\"fenced\":" + fenced + ",\"offsets_ok\":" + offsetsOk + ",\"duplicates\":" + duplicates + "}");
        System.exit(problems.isEmpty() ? 0 : 1);
    }
}
