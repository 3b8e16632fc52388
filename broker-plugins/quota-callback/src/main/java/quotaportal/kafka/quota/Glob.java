package quotaportal.kafka.quota;

import java.util.regex.Pattern;

/**
 * A shell glob with Python's {@code fnmatch.fnmatchcase} semantics (the portal writes group patterns for it): case
 * sensitive, {@code *} any run of characters (also none, also '/'), {@code ?} one character, {@code [seq]} one
 * character of the set (ranges {@code a-z}), {@code [!seq]} one character not in it; an unclosed {@code [} is a
 * literal '['. Compiled once, to a {@link Pattern} matched against the whole name.
 */
final class Glob {
    private final String glob;
    private final Pattern pattern;

    Glob(String glob) {
        this.glob = glob;
        this.pattern = Pattern.compile(translate(glob), Pattern.DOTALL);
    }

    boolean matches(String name) {
        return pattern.matcher(name).matches();
    }

    @Override
    public String toString() {
        return glob;
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof Glob g && g.glob.equals(glob);
    }

    @Override
    public int hashCode() {
        return glob.hashCode();
    }

    /** The regular expression of a glob, as Python's fnmatch.translate builds it. */
    static String translate(String glob) {
        StringBuilder out = new StringBuilder();
        int i = 0;
        int n = glob.length();
        while (i < n) {
            char c = glob.charAt(i++);
            if (c == '*') {
                while (i < n && glob.charAt(i) == '*') {
                    i++;
                }
                out.append(".*");
            } else if (c == '?') {
                out.append('.');
            } else if (c == '[') {
                int j = i;
                if (j < n && glob.charAt(j) == '!') {
                    j++;
                }
                if (j < n && glob.charAt(j) == ']') {
                    j++; // a ']' first in the set is a member, not its end
                }
                while (j < n && glob.charAt(j) != ']') {
                    j++;
                }
                if (j >= n) {
                    out.append("\\[");
                } else {
                    out.append(set(glob.substring(i, j)));
                    i = j + 1;
                }
            } else {
                out.append(Pattern.quote(String.valueOf(c)));
            }
        }
        return out.toString();
    }

    /** A character class of a set's body (without its brackets): '!' first negates, {@code a-z} is a range. */
    private static String set(String body) {
        boolean negated = body.startsWith("!");
        if (negated) {
            body = body.substring(1);
        }
        StringBuilder cls = new StringBuilder();
        int k = 0;
        while (k < body.length()) {
            char lo = body.charAt(k);
            if (k + 2 < body.length() && body.charAt(k + 1) == '-') {
                char hi = body.charAt(k + 2);
                if (lo > hi) {
                    k += 3; // Python drops an empty range
                    continue;
                }
                cls.append(escape(lo)).append('-').append(escape(hi));
                k += 3;
            } else {
                cls.append(escape(lo));
                k++;
            }
        }
        if (cls.length() == 0) {
            return negated ? "." : "(?!)"; // [!] matches any one character, an empty set none
        }
        return "[" + (negated ? "^" : "") + cls + "]";
    }

    private static String escape(char c) {
        return Character.isLetterOrDigit(c) ? String.valueOf(c) : "\\" + c;
    }
}
