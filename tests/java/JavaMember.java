// A Java KafkaConsumer group member for rebalance scenarios.
//
// What it is for: the interop suite starts several of these as separate
// processes to watch group membership from the stock Java client, e.g. to
// prove that a static member restarting within its session timeout causes
// no rebalance (KIP-345): the other members see no revocation or assignment.
//
// How it is run (single-file source program, Kafka jars on the class path):
//
//   java -cp '<kafka lib dir>/*' tests/java/JavaMember.java \
//       <bootstrap> <group> <topic> <group.instance.id or -> <classic|consumer>
//
// It subscribes to <topic> (static when an instance id is given; for the
// classic protocol session.timeout.ms=30000 and the range assignor) and
// prints one line per event on stdout:
//   ASSIGN <p,p,...>  / REVOKE <p,...> / LOST <p,...> / ERROR <text> / CLOSED
// It runs until "exit" (or end of input) on stdin, then closes the consumer
// (a static member sends no LeaveGroup on close) and exits 0.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.stream.Collectors;

import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class JavaMember {
    static synchronized void emit(String line) {
        System.out.println(line);
        System.out.flush();
    }

    static String parts(Collection<TopicPartition> ps) {
        List<Integer> l = new ArrayList<>();
        for (TopicPartition p : ps) l.add(p.partition());
        return l.stream().sorted().map(String::valueOf).collect(Collectors.joining(","));
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 5) {
            System.err.println("usage: JavaMember <bootstrap> <group> <topic> <instance|-> <classic|consumer>");
            System.exit(2);
        }
        Properties p = new Properties();
        p.put("bootstrap.servers", args[0]);
        p.put("group.id", args[1]);
        p.put("enable.auto.commit", "false");
        p.put("auto.offset.reset", "earliest");
        p.put("group.protocol", args[4]);
        if (args[4].equals("classic")) {
            p.put("session.timeout.ms", "30000");
            p.put("heartbeat.interval.ms", "1000");
            p.put("partition.assignment.strategy", "org.apache.kafka.clients.consumer.RangeAssignor");
        }
        if (!args[3].equals("-")) p.put("group.instance.id", args[3]);
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());

        AtomicBoolean stop = new AtomicBoolean(false);
        Thread watcher = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in))) {
                String line;
                while ((line = in.readLine()) != null) {
                    if (line.trim().equals("exit")) break;
                }
            } catch (Exception e) {
                // end of input
            }
            stop.set(true);
        });
        watcher.setDaemon(true);
        watcher.start();

        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
            consumer.subscribe(List.of(args[2]), new ConsumerRebalanceListener() {
                public void onPartitionsAssigned(Collection<TopicPartition> ps) { emit("ASSIGN " + parts(ps)); }
                public void onPartitionsRevoked(Collection<TopicPartition> ps) { emit("REVOKE " + parts(ps)); }
                public void onPartitionsLost(Collection<TopicPartition> ps) { emit("LOST " + parts(ps)); }
            });
            while (!stop.get()) {
                try {
                    consumer.poll(Duration.ofMillis(200));
                } catch (Exception e) {
                    emit("ERROR " + e);
                    Thread.sleep(200);
                }
            }
        }
        emit("CLOSED");
    }
}
