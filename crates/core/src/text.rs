//! User text in messages: one line of terminal output whatever the text holds
//! ([`one_line`]: control characters as escapes, NUL as `\0`), and a long value cut to its
//! start with its size in bytes ([`shorten`]), so an error about a 3 000-byte name or a
//! name holding a NUL stays one readable line. The one implementation of each: the CLI
//! (through `tensorforge_ops::markup::one_line`), the record format and the store use it.

/// How many characters of a value [`shorten`] keeps when a caller has no reason to choose.
pub const SHORT_VALUE_CHARS: usize = 40;

/// User text on one line of terminal output: control characters are shown as escapes
/// (`\0`, `\n`, `\r`, `\t`, `\u{1b}`), so a value cannot forge another line (say
/// `gate: PASS`) or move the cursor.
///
/// ```
/// use tensorforge_core::text::one_line;
/// assert_eq!(one_line("a\nb\0c\u{1b}"), "a\\nb\\0c\\u{1b}");
/// ```
pub fn one_line(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '\0' => out.push_str("\\0"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// `s` for a message: its first `max_chars` characters through [`one_line`], followed by
/// `… (N bytes)` (N = the whole value's length in UTF-8 bytes) when anything was cut.
///
/// ```
/// use tensorforge_core::text::shorten;
/// assert_eq!(shorten("abc", 40), "abc");
/// // 50 × "x" cut to 4 characters; the size is the whole value's.
/// assert_eq!(shorten(&"x".repeat(50), 4), "xxxx… (50 bytes)");
/// assert_eq!(shorten("a\0b", 40), "a\\0b");
/// ```
pub fn shorten(s: &str, max_chars: usize) -> String {
    match s.char_indices().nth(max_chars) {
        None => one_line(s),
        Some((cut, _)) => format!("{}… ({} bytes)", one_line(&s[..cut]), s.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shorten_counts_characters_and_reports_bytes() {
        // "é" is 2 bytes: 41 of them are 82 bytes; 40 characters are kept.
        let s = "é".repeat(41);
        assert_eq!(shorten(&s, 40), format!("{}… (82 bytes)", "é".repeat(40)));
        // Exactly 40 characters: nothing cut, no size.
        assert_eq!(shorten(&"é".repeat(40), 40), "é".repeat(40));
        // The NUL is escaped inside the kept part.
        assert_eq!(shorten("\0\0\0", 2), "\\0\\0… (3 bytes)");
    }
}
