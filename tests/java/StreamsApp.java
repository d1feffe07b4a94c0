// The Kafka Streams (Java) reference app for the rolling-restart harness:
// the same topologies and command line as Rill's `rill-streams-app`, so both
// run through the same harness on the same broker.
//
//   java -cp '<kafka lib dir>/*' tests/java/StreamsApp.java \
//       --bootstrap B --application-id A --input I --output O \
//       --state-dir D [--topology passthrough|wordcount] [--threads N] \
//       [--group-instance-id ID] [--session-ms MS] [--commit-ms MS]
//       [--processing-guarantee exactly_once_v2] [--config FILE]
//
// `--config FILE` adds Java properties (the harness's app properties).
// `passthrough` copies input to output; `wordcount` splits values on
// whitespace, repartitions by word and counts in a RocksDB store with a
// changelog (Kafka Streams' defaults, including its 10 MiB record cache;
// `--cache-bytes N` sets statestore.cache.max.bytes, 0 turns it off). With --group-instance-id each stream
// thread is the static member `<ID>-<n>` (Kafka Streams appends the thread
// index itself). Prints `RUNNING` when the app reaches RUNNING,
// `RESTORING <n>` when a store restoration starts and `RESTORED <n>` when
// it ends; SIGTERM closes it (static
// members stay in the group, Kafka's default) and prints `CLOSED true`.

import java.time.Duration;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.processor.StateRestoreListener;

public class StreamsApp {
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
        } else {
            System.err.println("unknown --topology " + topology);
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
        done.await();
    }
}
