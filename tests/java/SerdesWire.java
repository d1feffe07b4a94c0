// Kafka's own serializers and deserializers (kafka-clients 4.4.0), for the
// byte-for-byte check of Rill's serdes from types
// (tests/tests/interop.rs `serdes_match_kafka_clients`).
//
//   encode                        one line per case: "<case> <hex>" or
//                                 "<case> null", written by Kafka's
//                                 serializer for the case's Java value
//   decode (<case> <hex|null>)... reads each with the case's Kafka
//                                 deserializer and prints "<case> <text>":
//                                 numbers in Java's decimal form, floats as
//                                 their raw bits in hex, strings as the hex
//                                 of their UTF-8, or "error: <message>"
import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.google.protobuf.Int64Value;
import com.google.protobuf.Timestamp;
import org.apache.kafka.common.serialization.*;
import org.apache.kafka.common.utils.Bytes;

public class SerdesWire {
    static final ObjectMapper JSON = new ObjectMapper();
    static final HexFormat HEX = HexFormat.of();

    interface Decoder { String decode(byte[] b) throws Exception; }

    static Map<String, byte[]> encoded() throws Exception {
        Map<String, byte[]> m = new LinkedHashMap<>();
        m.put("string", new StringSerializer().serialize("t", "rill"));
        m.put("string_utf8", new StringSerializer().serialize("t", "\u00e9\u20ac"));
        m.put("string_empty", new StringSerializer().serialize("t", ""));
        m.put("string_null", new StringSerializer().serialize("t", null));
        m.put("short", new ShortSerializer().serialize("t", (short) 258));
        m.put("short_neg", new ShortSerializer().serialize("t", (short) -2));
        m.put("short_min", new ShortSerializer().serialize("t", Short.MIN_VALUE));
        m.put("int", new IntegerSerializer().serialize("t", 1));
        m.put("int_neg", new IntegerSerializer().serialize("t", -1));
        m.put("int_max", new IntegerSerializer().serialize("t", Integer.MAX_VALUE));
        m.put("long", new LongSerializer().serialize("t", 1L));
        m.put("long_neg", new LongSerializer().serialize("t", -1L));
        m.put("long_min", new LongSerializer().serialize("t", Long.MIN_VALUE));
        m.put("float", new FloatSerializer().serialize("t", 1.5f));
        m.put("float_neg_zero", new FloatSerializer().serialize("t", -0.0f));
        m.put("float_nan_payload", new FloatSerializer().serialize("t", Float.intBitsToFloat(0x7fc00001)));
        m.put("double", new DoubleSerializer().serialize("t", 1.5));
        m.put("double_nan_payload", new DoubleSerializer().serialize("t", Double.longBitsToDouble(0x7ff8000000000001L)));
        m.put("bool_true", new BooleanSerializer().serialize("t", true));
        m.put("bool_false", new BooleanSerializer().serialize("t", false));
        m.put("uuid", new UUIDSerializer().serialize("t", UUID.fromString("123e4567-e89b-12d3-a456-426614174000")));
        m.put("byte_array", new ByteArraySerializer().serialize("t", new byte[] {1, 2, (byte) 0xff}));
        m.put("bytes", new BytesSerializer().serialize("t", Bytes.wrap(new byte[] {1, 2, (byte) 0xff})));
        m.put("byte_buffer", new ByteBufferSerializer().serialize("t", ByteBuffer.wrap(new byte[] {1, 2, (byte) 0xff})));
        m.put("void", new VoidSerializer().serialize("t", null));
        ObjectNode order = JSON.createObjectNode();
        order.put("id", 1);
        order.put("item", "pen");
        m.put("json", JSON.writeValueAsBytes(order));
        m.put("proto_int64", Int64Value.of(300).toByteArray());
        m.put("proto_timestamp", Timestamp.newBuilder().setSeconds(1).setNanos(2).build().toByteArray());
        // Serdes.ListSerde (KIP-466): constant-size entries for Integer, Long,
        // Double and UUID (nulls as an index list), variable-size for String
        // and lists of lists.
        m.put("list_int", new ListSerializer<>(new IntegerSerializer()).serialize("t", Arrays.asList(7, null, -2)));
        m.put("list_long", new ListSerializer<>(new LongSerializer()).serialize("t", List.of(1L, -1L)));
        m.put("list_double", new ListSerializer<>(new DoubleSerializer()).serialize("t", Arrays.asList(1.5, null)));
        m.put("list_uuid", new ListSerializer<>(new UUIDSerializer()).serialize("t", Arrays.asList(UUID.fromString("123e4567-e89b-12d3-a456-426614174000"), null)));
        m.put("list_string", new ListSerializer<>(new StringSerializer()).serialize("t", Arrays.asList("rill", null, "")));
        m.put("list_empty", new ListSerializer<>(new IntegerSerializer()).serialize("t", List.of()));
        m.put("list_nested", new ListSerializer<>(new ListSerializer<>(new IntegerSerializer())).serialize("t", List.of(List.of(1, 2), List.of())));
        return m;
    }

    @SuppressWarnings({"unchecked", "rawtypes"})
    static Deserializer<?> listOf(String inner) {
        Deserializer<?> d = switch (inner) {
            case "int", "empty" -> new IntegerDeserializer();
            case "long" -> new LongDeserializer();
            case "double" -> new DoubleDeserializer();
            case "uuid" -> new UUIDDeserializer();
            case "string" -> new StringDeserializer();
            case "nested" -> new ListDeserializer(ArrayList.class, new IntegerDeserializer());
            default -> throw new IllegalArgumentException("no list of " + inner);
        };
        return new ListDeserializer(ArrayList.class, d);
    }

    static Decoder decoder(String c) {
        String kind = c.contains("_") ? c.substring(0, c.indexOf('_')) : c;
        if (c.equals("byte_array") || c.equals("byte_buffer")) kind = "bytes";
        switch (kind) {
            case "string": return b -> { String s = new StringDeserializer().deserialize("t", b); return s == null ? "null" : HEX.formatHex(s.getBytes(StandardCharsets.UTF_8)); };
            case "short": return b -> String.valueOf(new ShortDeserializer().deserialize("t", b));
            case "int": return b -> String.valueOf(new IntegerDeserializer().deserialize("t", b));
            case "long": return b -> String.valueOf(new LongDeserializer().deserialize("t", b));
            case "float": return b -> String.format("%08x", Float.floatToRawIntBits(new FloatDeserializer().deserialize("t", b)));
            case "double": return b -> String.format("%016x", Double.doubleToRawLongBits(new DoubleDeserializer().deserialize("t", b)));
            case "bool": return b -> String.valueOf(new BooleanDeserializer().deserialize("t", b));
            case "uuid": return b -> String.valueOf(new UUIDDeserializer().deserialize("t", b));
            case "bytes": return b -> HEX.formatHex(new BytesDeserializer().deserialize("t", b).get());
            case "void": return b -> String.valueOf(new VoidDeserializer().deserialize("t", b));
            case "json": return b -> JSON.readTree(b).toString();
            case "list": return b -> String.valueOf(listOf(c.split("_")[1]).deserialize("t", b));
            case "proto": return c.equals("proto_int64")
                ? b -> String.valueOf(Int64Value.parseFrom(b).getValue())
                : b -> { Timestamp t = Timestamp.parseFrom(b); return t.getSeconds() + "/" + t.getNanos(); };
            default: throw new IllegalArgumentException("no case " + c);
        }
    }

    public static void main(String[] args) throws Exception {
        PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
        if (args.length == 1 && args[0].equals("encode")) {
            for (var e : encoded().entrySet()) {
                out.println(e.getKey() + " " + (e.getValue() == null ? "null" : HEX.formatHex(e.getValue())));
            }
        } else if (args.length >= 1 && args[0].equals("decode")) {
            for (int i = 1; i + 1 < args.length; i += 2) {
                byte[] b = args[i + 1].equals("null") ? null : HEX.parseHex(args[i + 1]);
                String text;
                try {
                    text = decoder(args[i]).decode(b);
                } catch (Exception e) {
                    text = "error: " + e.getMessage();
                }
                out.println(args[i] + " " + text);
            }
        } else {
            throw new IllegalArgumentException("usage: SerdesWire encode | decode (<case> <hex|null>)...");
        }
    }
}
