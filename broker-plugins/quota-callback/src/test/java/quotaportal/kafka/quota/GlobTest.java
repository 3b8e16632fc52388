package quotaportal.kafka.quota;

import static org.junit.jupiter.api.Assertions.assertEquals;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * Group patterns match as Python's {@code fnmatch.fnmatchcase} matches them (the portal's side; every expectation
 * here is what Python 3.12 answers for the same pattern and name).
 */
class GlobTest {

    @ParameterizedTest(name = "{0} ~ {1}: {2}")
    @CsvSource(delimiter = '|', quoteCharacter = '\'', value = {
        "*|''|true", "*|a/b|true", "a*|abc|true", "a*|bac|false",
        "A*|abc|false", // case-sensitive
        "?|a|true", "?|''|false", "?|ab|false", "a?c|abc|true",
        "[abc]x|bx|true", "[abc]x|dx|false", "[!abc]x|dx|true", "[!abc]x|ax|false",
        "[a-c]|b|true", "[a-c]|d|false", "[z-a]|z|false", // an empty range matches nothing
        "[]]|]|true", "[]]|'] '|false", "[!]]|a|true", "[!]]|]|false",
        "[-a]|-|true", "[a-]|-|true",
        "[|[|true", "a[|a[|true", "[a|[a|true", "[!]|a|false", // an unclosed '[' is a literal
        "a.b|a.b|true", "a.b|axb|false", "(x)+|(x)+|true", "\\d|\\d|true", "\\d|1|false", "[\\]|\\|true",
        "user$|user$|true", "svc-*.prod|svc-web.prod|true", "svc-*.prod|svc-web.prodx|false",
        "*@example.com|bob@example.com|true", "*@example.com|bob@example.org|false",
    })
    void matchesAsPythonsFnmatchcase(String glob, String name, boolean expected) {
        assertEquals(expected, new Glob(glob).matches(name));
    }
}
