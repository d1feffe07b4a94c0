// Interop check with the Apache Kafka Java clients (kafka-clients 4.x).
//
// What it proves: a broker serves the stock Java AdminClient, KafkaProducer
// and KafkaConsumer end to end. It creates a topic with the AdminClient,
// produces `count` keyed records with a KafkaProducer left at its DEFAULT
// settings (so idempotence is on and acks=all), consumes them back with a
// group-less KafkaConsumer (assign() + seekToBeginning(), no group.id, so no
// group membership protocol is needed), and checks that every key arrived
// exactly once with its value, that offsets within each partition are
// strictly increasing starting at 0, and that the partition end offsets
// reported by AdminClient.listOffsets(latest) sum to `count` (each one past
// the last offset consumed from its partition).
//
// How it is run (single-file source program, no build step; Java 17+):
//
//   java -cp '<kafka lib dir>/*' tests/java/JavaClients.java \
//       <bootstrap> <topic> <count> <partitions> [client.properties]
//
// The optional Java properties file is applied to all three clients (e.g.
// security.protocol=SASL_SSL with sasl.* and ssl.truststore.*).
//
// It prints one JSON line to stdout:
//   {"produced":N,"consumed":N,"duplicates":D,"missing":M,"partitions":P,"end_offsets_sum":S}
// and exits 0 only if everything matched; otherwise it prints the reason(s)
// to stderr and exits 1.

import java.io.OutputStream;
import java.io.PrintStream;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class JavaClients {
    static final long CONSUME_LIMIT_MS = 60_000;
    static final List<String> problems = new ArrayList<>();

    static void problem(String msg) {
        problems.add(msg);
        if (problems.size() <= 20) {
            System.err.println("JavaClients: " + msg);
        } else if (problems.size() == 21) {
            System.err.println("JavaClients: (further problems not shown)");
        }
    }

    /**
     * The Kafka lib dir ships slf4j-api 1.7 next to an slf4j *2* binding, so
     * slf4j falls back to its no-op logger (the clients log nothing) and
     * prints a three-line "Failed to load class StaticLoggerBinder" notice to
     * stderr. Initialise slf4j once with stderr muted so runs stay quiet.
     * Should a working binding be present (log4j2), cap it at WARN.
     */
    static void quietLogging() {
        System.setProperty("log4j2.level", "WARN");
        System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        PrintStream err = System.err;
        System.setErr(new PrintStream(OutputStream.nullOutputStream()));
        try {
            org.slf4j.LoggerFactory.getILoggerFactory();
        } catch (Throwable ignored) {
            // no slf4j at all: nothing to quiet
        } finally {
            System.setErr(err);
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 4 && args.length != 5) {
            System.err.println("usage: JavaClients <bootstrap> <topic> <count> <partitions> [client.properties]");
            System.exit(2);
        }
        // Optional client properties for all three clients (e.g. security.protocol=SASL_SSL).
        Properties clientProps = new Properties();
        if (args.length == 5) {
            try (java.io.FileReader r = new java.io.FileReader(args[4])) {
                clientProps.load(r);
            }
        }
        String bootstrap = args[0];
        String topic = args[1];
        int count = Integer.parseInt(args[2]);
        int partitions = Integer.parseInt(args[3]);
        quietLogging();

        Properties adminProps = new Properties();
        adminProps.putAll(clientProps);
        adminProps.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        long endOffsetsSum = -1;
        int produced = 0;
        int consumed = 0;
        int duplicates = 0;
        int missing = count;

        try (Admin admin = Admin.create(adminProps)) {
            // 1. Create the topic. TopicExistsException (or any other error)
            //    is a failure: the run must start from an empty topic.
            try {
                admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1)))
                        .all().get(30, TimeUnit.SECONDS);
            } catch (ExecutionException e) {
                fail("creating topic " + topic + " failed: " + e.getCause(), count, partitions);
            }

            // 2. Produce. Only bootstrap.servers and the serializers are set:
            //    the defaults of kafka-clients 3.0+ give enable.idempotence=true
            //    and acks=all (-1), so this exercises InitProducerId and
            //    idempotent Produce with producer id / epoch / sequences.
            Properties pp = new Properties();
            pp.putAll(clientProps);
            pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
            pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
            List<Future<RecordMetadata>> futures = new ArrayList<>(count);
            List<Exception> callbackErrors = java.util.Collections.synchronizedList(new ArrayList<>());
            try (KafkaProducer<String, String> producer = new KafkaProducer<>(pp)) {
                for (int i = 0; i < count; i++) {
                    futures.add(producer.send(
                            new ProducerRecord<>(topic, "key-" + i, "value-" + i),
                            (md, ex) -> {
                                if (ex != null) {
                                    callbackErrors.add(ex);
                                }
                            }));
                }
                producer.flush();
                for (int i = 0; i < futures.size(); i++) {
                    try {
                        RecordMetadata md = futures.get(i).get(60, TimeUnit.SECONDS);
                        if (md.offset() < 0) {
                            problem("record key-" + i + " acknowledged without an offset");
                        } else {
                            produced++;
                        }
                    } catch (ExecutionException e) {
                        problem("send of key-" + i + " failed: " + e.getCause());
                    }
                }
            }
            if (!callbackErrors.isEmpty()) {
                problem(callbackErrors.size() + " send callbacks reported errors, first: "
                        + callbackErrors.get(0));
            }

            // 3. Consume everything back without a consumer group.
            Properties cp = new Properties();
            cp.putAll(clientProps);
            cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
            cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
            cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
            Map<String, Integer> seen = new HashMap<>();
            Map<Integer, Long> lastOffset = new HashMap<>();
            List<TopicPartition> tps = new ArrayList<>();
            for (int p = 0; p < partitions; p++) {
                tps.add(new TopicPartition(topic, p));
            }
            try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp)) {
                consumer.assign(tps);
                consumer.seekToBeginning(tps);
                long deadline = System.currentTimeMillis() + CONSUME_LIMIT_MS;
                while (consumed < count && System.currentTimeMillis() < deadline) {
                    ConsumerRecords<String, String> recs = consumer.poll(Duration.ofMillis(500));
                    for (ConsumerRecord<String, String> r : recs) {
                        consumed++;
                        long prev = lastOffset.getOrDefault(r.partition(), -1L);
                        if (prev == -1L && r.offset() != 0) {
                            problem("partition " + r.partition() + " starts at offset " + r.offset() + ", not 0");
                        } else if (prev != -1L && r.offset() <= prev) {
                            problem("partition " + r.partition() + " offset " + r.offset()
                                    + " does not increase (previous " + prev + ")");
                        }
                        lastOffset.put(r.partition(), r.offset());
                        String key = r.key();
                        String expect = key != null && key.startsWith("key-")
                                ? "value-" + key.substring(4) : null;
                        if (expect == null || !expect.equals(r.value())) {
                            problem("record " + r.topic() + "-" + r.partition() + "@" + r.offset()
                                    + " has key " + key + " value " + r.value());
                        }
                        seen.merge(String.valueOf(key), 1, Integer::sum);
                    }
                }
                if (consumed < count) {
                    problem("consumed only " + consumed + " of " + count + " records within "
                            + CONSUME_LIMIT_MS / 1000 + " s; positions: " + positions(consumer, tps));
                }
                // A short extra poll: nothing beyond `count` may be there.
                ConsumerRecords<String, String> extra = consumer.poll(Duration.ofMillis(500));
                if (!extra.isEmpty()) {
                    consumed += extra.count();
                    problem(extra.count() + " records beyond the expected " + count);
                    for (ConsumerRecord<String, String> r : extra) {
                        seen.merge(String.valueOf(r.key()), 1, Integer::sum);
                    }
                }
            }
            missing = 0;
            for (int i = 0; i < count; i++) {
                if (!seen.containsKey("key-" + i)) {
                    missing++;
                }
            }
            duplicates = 0;
            for (Map.Entry<String, Integer> e : seen.entrySet()) {
                if (e.getValue() > 1) {
                    duplicates += e.getValue() - 1;
                }
            }
            if (missing > 0) {
                problem(missing + " keys never consumed");
            }
            if (duplicates > 0) {
                problem(duplicates + " duplicate deliveries");
            }
            if (seen.size() > count - missing) {
                problem((seen.size() - (count - missing)) + " unexpected keys consumed");
            }

            // 4. End offsets from the AdminClient (ListOffsets, latest).
            Map<TopicPartition, OffsetSpec> specs = new HashMap<>();
            for (TopicPartition tp : tps) {
                specs.put(tp, OffsetSpec.latest());
            }
            try {
                Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> ends =
                        admin.listOffsets(specs).all().get(30, TimeUnit.SECONDS);
                endOffsetsSum = 0;
                for (TopicPartition tp : tps) {
                    ListOffsetsResult.ListOffsetsResultInfo info = ends.get(tp);
                    if (info == null) {
                        problem("listOffsets returned nothing for " + tp);
                        continue;
                    }
                    endOffsetsSum += info.offset();
                    long last = lastOffset.getOrDefault(tp.partition(), -1L);
                    if (info.offset() != last + 1) {
                        problem("end offset of " + tp + " is " + info.offset()
                                + " but the last consumed offset was " + last);
                    }
                }
                if (endOffsetsSum != count) {
                    problem("end offsets sum to " + endOffsetsSum + ", expected " + count);
                }
            } catch (ExecutionException e) {
                problem("listOffsets failed: " + e.getCause());
            }
        }

        System.out.printf("{\"produced\":%d,\"consumed\":%d,\"duplicates\":%d,\"missing\":%d,"
                        + "\"partitions\":%d,\"end_offsets_sum\":%d}%n",
                produced, consumed, duplicates, missing, partitions, endOffsetsSum);
        System.out.flush();
        if (produced != count) {
            problem("produced " + produced + " of " + count);
        }
        if (!problems.isEmpty()) {
            System.err.println("JavaClients: FAILED (" + problems.size() + " problem(s))");
            System.exit(1);
        }
        System.exit(0);
    }

    static String positions(KafkaConsumer<?, ?> consumer, List<TopicPartition> tps) {
        StringBuilder sb = new StringBuilder();
        for (TopicPartition tp : tps) {
            try {
                sb.append(tp).append('=').append(consumer.position(tp, Duration.ofSeconds(5))).append(' ');
            } catch (Exception e) {
                sb.append(tp).append("=? (").append(e).append(") ");
            }
        }
        return sb.toString().trim();
    }

    static void fail(String msg, int count, int partitions) {
        System.err.println("JavaClients: " + msg);
        System.out.printf("{\"produced\":0,\"consumed\":0,\"duplicates\":0,\"missing\":%d,"
                + "\"partitions\":%d,\"end_offsets_sum\":-1}%n", count, partitions);
        System.exit(1);
    }
}
