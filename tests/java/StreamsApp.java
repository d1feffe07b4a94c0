// The Kafka Streams (Java) reference app for the rolling-restart harness:
// the same topologies and command line as Rill's `rill-streams-app`, so both
// run through the same harness on the same broker.
//
//   java -cp '<kafka lib dir>/*' tests/java/StreamsApp.java \
//       --bootstrap B --application-id A --input I --output O \
//       --state-dir D [--topology passthrough|wordcount|windowed|join|poison|raw] \
//       [--table T] [--threads N] \
//       [--group-instance-id ID] [--session-ms MS] [--commit-ms MS]
//       [--processing-guarantee exactly_once_v2] [--config FILE]
//       [--print-lags-ms MS] [--print-commits-ms MS]
//
// `--config FILE` adds Java properties (the harness's app properties).
// `passthrough` copies input to output; `wordcount` splits values on
// whitespace, repartitions by word and counts in a RocksDB store with a
// changelog (Kafka Streams' defaults, including its 10 MiB record cache;
// `windowed` counts words per 10 s tumbling window (1 h grace); `join`
// joins each record with its key's value in the table read from --table;
// `table` reads the input as a table in the RocksDB store "table" and
// forwards every update (the large-state benchmark's store);
// `poison` upper-cases values and throws on "poison" (the error handlers'
// and dead-letter queue's reference, configured through --config);
// `enrich` replaces each value with what `GET <--service>/lookup/<value>`
// answers, a blocking call per record (the async benchmark's reference);
// `raw` is no Kafka Streams at all: the Java clients' consume → produce
// loop, one per --threads, the ceiling the benchmarks compare with;
// `--cache-bytes N` sets statestore.cache.max.bytes, 0 turns it off). With --group-instance-id each stream
// thread is the static member `<ID>-<n>` (Kafka Streams appends the thread
// index itself). Prints `RUNNING` when the app reaches RUNNING,
// `RESTORING <n>` when a store restoration starts and `RESTORED <n>` when
// it ends, and with --print-lags-ms `LAGS <store partitions> <sum of
// positions> <sum of lags>` over every local store partition (active or
// standby) at that period, with --print-commits-ms `COMMITS <ms> <ms>`:
// Kafka Streams' commit-latency-avg (mean over the stream threads) and
// commit-latency-max (the largest) at that period; SIGTERM closes it (static
// members stay in the group, Kafka's default) and prints `CLOSED true`.

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.LagInfo;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Joined;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.WindowedSerdes;
import org.apache.kafka.streams.processor.StateRestoreListener;

public class StreamsApp {
    static volatile boolean stopping = false;

    // The ceiling with the Java clients: `--threads` consumer → producer
    // loops in one group, each committing after a producer flush every
    // `--commit-ms` (at-least-once, like the runtime; the same settings as
    // Rill's raw loop: max.poll.records 1000, linger.ms 100, 256 KiB batches).
    static void rawLoop(Map<String, String> a) throws Exception {
        int threads = Integer.parseInt(a.getOrDefault("--threads", "1"));
        long every = Long.parseLong(a.getOrDefault("--commit-ms", "200"));
        CountDownLatch done = new CountDownLatch(threads);
        CountDownLatch assigned = new CountDownLatch(threads);
        for (int i = 0; i < threads; i++) {
            new Thread(() -> {
                Properties c = new Properties();
                c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, a.get("--bootstrap"));
                c.put(ConsumerConfig.GROUP_ID_CONFIG, a.get("--application-id"));
                c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
                c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
                c.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "1000");
                Properties pr = new Properties();
                pr.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, a.get("--bootstrap"));
                pr.put(ProducerConfig.LINGER_MS_CONFIG, "100");
                pr.put(ProducerConfig.BATCH_SIZE_CONFIG, "262144");
                ByteArrayDeserializer d = new ByteArrayDeserializer();
                ByteArraySerializer s = new ByteArraySerializer();
                try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(c, d, d);
                     KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(pr, s, s)) {
                    consumer.subscribe(java.util.List.of(a.get("--input")));
                    long next = System.currentTimeMillis() + every;
                    boolean told = false;
                    while (!stopping) {
                        var records = consumer.poll(Duration.ofMillis(100));
                        if (!told && !consumer.assignment().isEmpty()) {
                            told = true;
                            assigned.countDown();
                        }
                        for (ConsumerRecord<byte[], byte[]> r : records) {
                            producer.send(new ProducerRecord<>(a.get("--output"), null,
                                r.timestamp(), r.key(), r.value()), (m, e) -> {
                                    if (e != null) {
                                        System.err.println("send failed: " + e);
                                        System.exit(1);
                                    }
                                });
                        }
                        if (System.currentTimeMillis() >= next) {
                            producer.flush();
                            consumer.commitSync();
                            next = System.currentTimeMillis() + every;
                        }
                    }
                    producer.flush();
                    consumer.commitSync();
                } finally {
                    done.countDown();
                }
            }).start();
        }
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            stopping = true;
            try {
                done.await();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            emit("CLOSED true");
        }));
        // RUNNING once every loop has partitions (a bench's clock starts here).
        assigned.await(300, java.util.concurrent.TimeUnit.SECONDS);
        emit("RUNNING");
        done.await();
    }

    static synchronized void emit(String line) {
        System.out.println(line);
        System.out.flush();
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = new HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) a.put(argv[i], argv[i + 1]);
        String input = a.get("--input"), output = a.get("--output");
        StreamsBuilder b = new StreamsBuilder();
        String topology = a.getOrDefault("--topology", "passthrough");
        if (topology.equals("passthrough")) {
            b.stream(input, Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()))
                .to(output, Produced.with(Serdes.ByteArray(), Serdes.ByteArray()));
        } else if (topology.equals("wordcount")) {
            b.stream(input, Consumed.with(Serdes.ByteArray(), Serdes.String()))
                .flatMapValues(v -> Arrays.asList(v.split("\\s+")))
                .groupBy((k, w) -> w, Grouped.with(Serdes.String(), Serdes.String()))
                .count(Materialized.as("counts"))
                .toStream()
                .to(output, Produced.with(Serdes.String(), Serdes.Long()));
        } else if (topology.equals("windowed")) {
            b.stream(input, Consumed.with(Serdes.ByteArray(), Serdes.String()))
                .flatMapValues(v -> Arrays.asList(v.split("\\s+")))
                .groupBy((k, w) -> w, Grouped.with(Serdes.String(), Serdes.String()))
                .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofSeconds(10), Duration.ofHours(1)))
                .count(Materialized.as("counts"))
                .toStream()
                .to(output, Produced.with(
                    WindowedSerdes.timeWindowedSerdeFrom(String.class, 10_000L), Serdes.Long()));
        } else if (topology.equals("join")) {
            KTable<String, String> table = b.table(a.get("--table"),
                Consumed.with(Serdes.String(), Serdes.String()), Materialized.as("table"));
            b.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
                .join(table, (v, t) -> t + ":" + v,
                      Joined.with(Serdes.String(), Serdes.String(), Serdes.String()))
                .to(output, Produced.with(Serdes.String(), Serdes.String()));
        } else if (topology.equals("table")) {
            // The large-state benchmark's store: the input as a table in
            // the RocksDB store "table" (changelog <app>-table-changelog),
            // every update forwarded to the output.
            b.table(input, Consumed.with(Serdes.String(), Serdes.String()), Materialized.as("table"))
                .toStream()
                .to(output, Produced.with(Serdes.String(), Serdes.String()));
        } else if (topology.equals("poison")) {
            // The error handlers' reference: upper-cases each value and
            // throws on "poison" (what the processing.exception.handler and
            // the dead-letter queue, set through --config, then do).
            b.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
                .mapValues(v -> {
                    if (v.equals("poison")) {
                        throw new IllegalStateException("cannot upper-case " + v);
                    }
                    return v.toUpperCase();
                })
                .to(output, Produced.with(Serdes.String(), Serdes.String()));
        } else if (topology.equals("enrich")) {
            // Each value looked up in the service at --service
            // (GET <service>/lookup/<value>, answered after 5 ms in the
            // async benchmark): the call blocks the stream thread, as a
            // Kafka Streams processor's I/O does.
            String service = a.get("--service");
            HttpClient http = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).build();
            b.stream(input, Consumed.with(Serdes.ByteArray(), Serdes.String()))
                .mapValues(v -> {
                    try {
                        HttpResponse<String> r = http.send(
                            HttpRequest.newBuilder(URI.create(service + "/lookup/" + v)).build(),
                            HttpResponse.BodyHandlers.ofString());
                        if (r.statusCode() != 200) {
                            throw new IllegalStateException("the service answered " + r.statusCode());
                        }
                        return r.body();
                    } catch (java.io.IOException | InterruptedException e) {
                        throw new RuntimeException(e);
                    }
                })
                .to(output, Produced.with(Serdes.ByteArray(), Serdes.String()));
        } else if (topology.equals("raw")) {
            rawLoop(a);
            return;
        } else {
            System.err.println("unknown --topology " + topology
                + " (passthrough, wordcount, windowed, join, table, poison, enrich, raw)");
            System.exit(2);
        }
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, a.get("--application-id"));
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, a.get("--bootstrap"));
        p.put(StreamsConfig.STATE_DIR_CONFIG, a.get("--state-dir"));
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, a.getOrDefault("--threads", "1"));
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, a.getOrDefault("--commit-ms", "200"));
        // Kafka's default record cache unless --cache-bytes says otherwise
        // (rill-streams-app takes the same flag).
        if (a.containsKey("--processing-guarantee")) {
            p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, a.get("--processing-guarantee"));
        }
        if (a.containsKey("--config")) {
            // Extra properties (the rolling harness's app properties).
            try (java.io.FileInputStream in = new java.io.FileInputStream(a.get("--config"))) {
                Properties extra = new Properties();
                extra.load(in);
                p.putAll(extra);
            }
        }
        if (a.containsKey("--cache-bytes")) {
            p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, a.get("--cache-bytes"));
        }
        // KIP-1071 streams groups take the session and heartbeat from the
        // broker's group configs; the consumer refuses its own.
        if (!"streams".equals(p.getProperty("group.protocol"))) {
            p.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG),
                  a.getOrDefault("--session-ms", "30000"));
            p.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), "500");
        }
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        if (a.containsKey("--group-instance-id")) {
            p.put(StreamsConfig.consumerPrefix(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG),
                  a.get("--group-instance-id"));
        }
        KafkaStreams streams = new KafkaStreams(b.build(), p);
        streams.setGlobalStateRestoreListener(new StateRestoreListener() {
            public void onRestoreStart(TopicPartition tp, String store, long start, long end) {
                emit("RESTORING " + (end - start));
            }
            public void onBatchRestored(TopicPartition tp, String store, long end, long n) {}
            public void onRestoreEnd(TopicPartition tp, String store, long total) {
                emit("RESTORED " + total);
            }
        });
        streams.setStateListener((now, before) -> {
            if (now == KafkaStreams.State.RUNNING) emit("RUNNING");
            if (now == KafkaStreams.State.ERROR) {
                emit("ERROR");
                System.exit(1);
            }
        });
        CountDownLatch done = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            boolean clean = streams.close(Duration.ofSeconds(30));
            emit("CLOSED " + clean);
            done.countDown();
        }));
        streams.start();
        if (a.containsKey("--print-lags-ms")) {
            // Every local store partition's changelog position and lag,
            // summed (the standby catch-up benchmark), as rill-streams-app.
            long every = Long.parseLong(a.get("--print-lags-ms"));
            Thread lags = new Thread(() -> {
                while (true) {
                    try {
                        Thread.sleep(every);
                        long n = 0, position = 0, lag = 0;
                        for (Map<Integer, LagInfo> parts : streams.allLocalStorePartitionLags().values()) {
                            for (LagInfo l : parts.values()) {
                                n++;
                                position += l.currentOffsetPosition();
                                lag += l.offsetLag();
                            }
                        }
                        emit("LAGS " + n + " " + position + " " + lag);
                    } catch (InterruptedException e) {
                        return;
                    } catch (RuntimeException e) {
                        // Not queryable in this state yet (CREATED, PENDING_*).
                    }
                }
            });
            lags.setDaemon(true);
            lags.start();
        }
        if (a.containsKey("--print-commits-ms")) {
            long every = Long.parseLong(a.get("--print-commits-ms"));
            Thread commits = new Thread(() -> {
                while (true) {
                    try {
                        Thread.sleep(every);
                    } catch (InterruptedException e) {
                        return;
                    }
                    double sum = 0, max = Double.NaN;
                    int n = 0;
                    for (var m : streams.metrics().entrySet()) {
                        if (!"stream-thread-metrics".equals(m.getKey().group())) continue;
                        Object v = m.getValue().metricValue();
                        if (!(v instanceof Double d) || d.isNaN()) continue;
                        if ("commit-latency-avg".equals(m.getKey().name())) {
                            sum += d;
                            n++;
                        } else if ("commit-latency-max".equals(m.getKey().name())) {
                            max = Double.isNaN(max) ? d : Math.max(max, d);
                        }
                    }
                    if (n > 0) emit("COMMITS " + (sum / n) + " " + max);
                }
            });
            commits.setDaemon(true);
            commits.start();
        }
        done.await();
    }
}
