package quotaportal.kafka.quota;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * The protocol's compact JSON of flat string objects, written exactly as the engine's Python writes it
 * ({@code json.dumps(obj, sort_keys=True, separators=(",", ":"))}: keys sorted by code point, ASCII only with
 * {@code \\uXXXX} escapes in lower-case hex, UTF-16 surrogates for the rest), so that a budget id or a scope field
 * made here is byte for byte the one the portal made; and read back (the scope fields the engine returns).
 */
final class Json {
    private Json() {
    }

    /** {@code {"k":"v",...}} with the keys sorted as Python sorts str keys (by code point). */
    static String object(Map<String, String> fields) {
        TreeMap<String, String> sorted = new TreeMap<>(Json::compareCodePoints);
        sorted.putAll(fields);
        StringBuilder out = new StringBuilder(32);
        out.append('{');
        boolean first = true;
        for (Map.Entry<String, String> e : sorted.entrySet()) {
            if (!first) {
                out.append(',');
            }
            first = false;
            string(out, e.getKey());
            out.append(':');
            string(out, e.getValue());
        }
        return out.append('}').toString();
    }

    static int compareCodePoints(String a, String b) {
        int i = 0;
        int j = 0;
        while (i < a.length() && j < b.length()) {
            int ca = a.codePointAt(i);
            int cb = b.codePointAt(j);
            if (ca != cb) {
                return Integer.compare(ca, cb);
            }
            i += Character.charCount(ca);
            j += Character.charCount(cb);
        }
        return Integer.compare(a.length() - i, b.length() - j);
    }

    /** A JSON string as Python's json module writes it with ensure_ascii (its default). */
    static void string(StringBuilder out, String s) {
        out.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                case '\n' -> out.append("\\n");
                case '\r' -> out.append("\\r");
                case '\t' -> out.append("\\t");
                case '\b' -> out.append("\\b");
                case '\f' -> out.append("\\f");
                default -> {
                    if (c < 0x20 || c > 0x7e) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
                }
            }
        }
        out.append('"');
    }

    /**
     * A flat JSON object whose values are strings (or null), e.g. a scope field's entity
     * {@code {"client-id":"app","user":"<default>"}}; null when the text is not one.
     */
    static Map<String, String> parseFlatObject(String text) {
        Parser p = new Parser(text);
        try {
            Map<String, String> out = p.object();
            p.skipSpace();
            return p.pos == text.length() ? out : null;
        } catch (IllegalArgumentException | IndexOutOfBoundsException e) {
            return null;
        }
    }

    /**
     * Any JSON value (a scope's group definition): objects as maps (keys sorted by code point), arrays as lists,
     * numbers as {@link Double}, booleans, strings and null; throws {@link IllegalArgumentException} when the text
     * is not one JSON value.
     */
    static Object parse(String text) {
        Parser p = new Parser(text);
        try {
            Object out = p.value();
            p.skipSpace();
            if (p.pos != text.length()) {
                throw new IllegalArgumentException("text after the value at " + p.pos);
            }
            return out;
        } catch (IndexOutOfBoundsException | NumberFormatException e) {
            throw new IllegalArgumentException("not JSON: " + e.getMessage(), e);
        }
    }

    private static final class Parser {
        final String s;
        int pos;

        Parser(String s) {
            this.s = s;
        }

        void skipSpace() {
            while (pos < s.length() && Character.isWhitespace(s.charAt(pos))) {
                pos++;
            }
        }

        void expect(char c) {
            skipSpace();
            if (s.charAt(pos) != c) {
                throw new IllegalArgumentException("expected " + c + " at " + pos);
            }
            pos++;
        }

        Map<String, String> object() {
            Map<String, String> out = new TreeMap<>(Json::compareCodePoints);
            expect('{');
            skipSpace();
            if (s.charAt(pos) == '}') {
                pos++;
                return out;
            }
            while (true) {
                skipSpace();
                String key = string();
                expect(':');
                skipSpace();
                String value;
                if (s.startsWith("null", pos)) {
                    pos += 4;
                    value = null;
                } else {
                    value = string();
                }
                out.put(key, value);
                skipSpace();
                char c = s.charAt(pos++);
                if (c == '}') {
                    return out;
                }
                if (c != ',') {
                    throw new IllegalArgumentException("expected , or } at " + (pos - 1));
                }
            }
        }

        Object value() {
            skipSpace();
            char c = s.charAt(pos);
            if (c == '{') {
                Map<String, Object> out = new TreeMap<>(Json::compareCodePoints);
                pos++;
                skipSpace();
                if (s.charAt(pos) == '}') {
                    pos++;
                    return out;
                }
                while (true) {
                    skipSpace();
                    String key = string();
                    expect(':');
                    out.put(key, value());
                    if (!more('}')) {
                        return out;
                    }
                }
            }
            if (c == '[') {
                List<Object> out = new ArrayList<>();
                pos++;
                skipSpace();
                if (s.charAt(pos) == ']') {
                    pos++;
                    return out;
                }
                while (true) {
                    out.add(value());
                    if (!more(']')) {
                        return out;
                    }
                }
            }
            if (c == '"') {
                return string();
            }
            for (String word : new String[] {"true", "false", "null"}) {
                if (s.startsWith(word, pos)) {
                    pos += word.length();
                    return word.equals("null") ? null : Boolean.valueOf(word);
                }
            }
            int start = pos;
            while (pos < s.length() && "+-0123456789.eE".indexOf(s.charAt(pos)) >= 0) {
                pos++;
            }
            if (start == pos) {
                throw new IllegalArgumentException("expected a value at " + pos);
            }
            return Double.valueOf(s.substring(start, pos));
        }

        /** After a member: true at ',' (another follows), false at {@code close}. */
        private boolean more(char close) {
            skipSpace();
            char c = s.charAt(pos++);
            if (c == close) {
                return false;
            }
            if (c != ',') {
                throw new IllegalArgumentException("expected , or " + close + " at " + (pos - 1));
            }
            return true;
        }

        String string() {
            if (s.charAt(pos) != '"') {
                throw new IllegalArgumentException("expected a string at " + pos);
            }
            pos++;
            StringBuilder out = new StringBuilder();
            while (true) {
                char c = s.charAt(pos++);
                if (c == '"') {
                    return out.toString();
                }
                if (c != '\\') {
                    out.append(c);
                    continue;
                }
                char e = s.charAt(pos++);
                switch (e) {
                    case '"', '\\', '/' -> out.append(e);
                    case 'n' -> out.append('\n');
                    case 'r' -> out.append('\r');
                    case 't' -> out.append('\t');
                    case 'b' -> out.append('\b');
                    case 'f' -> out.append('\f');
                    case 'u' -> {
                        out.append((char) Integer.parseInt(s.substring(pos, pos + 4), 16));
                        pos += 4;
                    }
                    default -> throw new IllegalArgumentException("bad escape at " + pos);
                }
            }
        }
    }
}
