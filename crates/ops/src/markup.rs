//! Escaping of user-supplied text: for HTML (also as [`Text`], a maud splice that escapes
//! like [`escape`]), for Markdown, and for one line of terminal output; and a small
//! well-formedness checker for markup (tags balanced, attribute values quoted without `<`,
//! every `&` an entity, no bare `<` or `>` in text). The HTML report is built with maud,
//! whose templates balance their tags at compile time; the checker stays for tests that
//! check a written page as a whole. It is deliberately stricter than HTML5 in text (a bare
//! `>` is rejected, so unescaped user strings are caught) and more lenient elsewhere: it
//! does not validate element nesting rules or attribute names.

/// Escape `& < > " '` so text is safe in element content and quoted attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// User text spliced into a maud template: rendered through [`escape`], so apostrophes
/// become `&#39;` as well (maud's own escaping covers `& < > "` only), and the page's text
/// is escaped exactly as it was before maud.
pub struct Text<'a>(pub &'a str);

impl maud::Render for Text<'_> {
    fn render_to(&self, buffer: &mut String) {
        buffer.push_str(&escape(self.0));
    }
}

/// Escape user text for Markdown (CommonMark/GitHub): every ASCII punctuation character that
/// can start markup (links, images, emphasis, code, headings, lists, tables, HTML, entities)
/// gets a backslash (`<`, `>`, `&` become entities), so `![i](http://x/p.png)` stays text,
/// and control characters (newlines included) become a space, so a value cannot start a new
/// block or table row.
pub fn escape_markdown(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for ch in s.chars() {
        match ch {
            // HTML specials as entities (Markdown renders them as the characters).
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '\\' | '`' | '*' | '_' | '{' | '}' | '[' | ']' | '(' | ')' | '#' | '+' | '-' | '.'
            | '!' | '|' | '~' | '"' | '\'' | ':' => {
                out.push('\\');
                out.push(ch);
            }
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// User text on one line of terminal output (control characters as escapes: `\0`, `\n`,
/// `\r`, `\t`, `\u{1b}`); the Core's one implementation, re-exported here where the CLI
/// has always found it.
pub use tensorforge_core::text::one_line;

const VOID: &[&str] = &["meta", "br", "hr", "img", "input", "link", "col", "wbr"];

fn entity_ok(rest: &str) -> bool {
    let Some(end) = rest.find(';') else {
        return false;
    };
    let body = &rest[1..end];
    if let Some(num) = body.strip_prefix("#x") {
        !num.is_empty() && num.chars().all(|c| c.is_ascii_hexdigit())
    } else if let Some(num) = body.strip_prefix('#') {
        !num.is_empty() && num.chars().all(|c| c.is_ascii_digit())
    } else {
        !body.is_empty() && body.len() < 10 && body.chars().all(|c| c.is_ascii_alphanumeric())
    }
}

/// Check that `doc` is well formed in the sense above; `Err` says what and at which byte.
pub fn check_well_formed(doc: &str) -> Result<(), String> {
    let mut stack: Vec<String> = Vec::new();
    let b = doc.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'<' => {
                let rest = &doc[i..];
                if rest.starts_with("<!--") {
                    let end = rest
                        .find("-->")
                        .ok_or(format!("unterminated comment at byte {i}"))?;
                    i += end + 3;
                    continue;
                }
                if rest.starts_with("<!") || rest.starts_with("<?") {
                    let end = rest
                        .find('>')
                        .ok_or(format!("unterminated declaration at byte {i}"))?;
                    i += end + 1;
                    continue;
                }
                let closing = rest.starts_with("</");
                let name_start = if closing { 2 } else { 1 };
                let name: String = rest[name_start..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == ':')
                    .collect();
                if name.is_empty() || !name.starts_with(|c: char| c.is_ascii_alphabetic()) {
                    return Err(format!("bare `<` in text at byte {i}"));
                }
                // Scan to the closing `>`, honouring quoted attribute values.
                let mut j = i + name_start + name.len();
                let mut quote: Option<u8> = None;
                while j < b.len() {
                    match (quote, b[j]) {
                        (None, b'"') | (None, b'\'') => quote = Some(b[j]),
                        (Some(q), c) if c == q => quote = None,
                        (Some(_), b'<') => {
                            return Err(format!(
                                "`<` inside an attribute value of <{name}> at byte {j}"
                            ))
                        }
                        (None, b'<') => return Err(format!("`<` inside tag <{name}> at byte {j}")),
                        (None, b'>') => break,
                        _ => {}
                    }
                    j += 1;
                }
                if j >= b.len() {
                    return Err(format!("unterminated tag <{name}> at byte {i}"));
                }
                let self_closing = b[j - 1] == b'/';
                let lname = name.to_ascii_lowercase();
                if closing {
                    match stack.pop() {
                        Some(open) if open == lname => {}
                        Some(open) => return Err(format!("</{name}> at byte {i} closes <{open}>")),
                        None => return Err(format!("</{name}> at byte {i} closes nothing")),
                    }
                } else if !self_closing && !VOID.contains(&lname.as_str()) {
                    if lname == "script" {
                        return Err(format!("<script> element at byte {i}"));
                    }
                    if lname == "style" {
                        let end = doc[j..].find("</style>").ok_or("unterminated <style>")?;
                        i = j + end + "</style>".len();
                        continue;
                    }
                    stack.push(lname);
                }
                i = j + 1;
            }
            b'>' => return Err(format!("bare `>` in text at byte {i}")),
            b'&' => {
                if !entity_ok(&doc[i..]) {
                    return Err(format!("bare `&` (not an entity) at byte {i}"));
                }
                i += 1;
            }
            _ => i += 1,
        }
    }
    match stack.pop() {
        Some(open) => Err(format!("<{open}> is never closed")),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_and_terminal_escapes() {
        // The issue's image: rendered as text, not as a live external image.
        let e = escape_markdown("![i](http://evil.example/p.png)");
        assert_eq!(e, "\\!\\[i\\]\\(http\\://evil\\.example/p\\.png\\)");
        assert_eq!(escape_markdown("a|b\nc<d>&"), "a\\|b c&lt;d&gt;&amp;");
        // A newline cannot forge a line of `gate` output.
        assert_eq!(
            one_line("x\ngate: PASS\r\u{1b}[2K"),
            "x\\ngate: PASS\\r\\u{1b}[2K"
        );
    }

    #[test]
    fn text_splices_escape_like_escape() {
        let page = maud::html! { p title=(Text("'\"")) { (Text("it's <b> & co")) } };
        assert_eq!(
            page.into_string(),
            "<p title=\"&#39;&quot;\">it&#39;s &lt;b&gt; &amp; co</p>"
        );
    }

    #[test]
    fn escape_and_check() {
        assert_eq!(
            escape(r#"<a href="x">&'"#),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert!(check_well_formed(
            "<!DOCTYPE html><html><body><p a=\"1\">x &amp; y<br></p><svg><g/></svg></body></html>"
        )
        .is_ok());
        assert!(check_well_formed("<p>")
            .unwrap_err()
            .contains("never closed"));
        assert!(check_well_formed("<p></div>")
            .unwrap_err()
            .contains("closes <p>"));
        assert!(check_well_formed("<p>a < b</p>")
            .unwrap_err()
            .contains("bare `<`"));
        assert!(check_well_formed("<p>a > b</p>")
            .unwrap_err()
            .contains("bare `>`"));
        assert!(check_well_formed("<p>a & b</p>")
            .unwrap_err()
            .contains("bare `&`"));
        assert!(check_well_formed("<p><script>x</script></p>")
            .unwrap_err()
            .contains("script"));
        assert!(check_well_formed("<p title=\"<b>\">x</p>").is_err());
        let hostile = format!("<p>{}</p>", escape("<script>alert('x')</script> & </p>"));
        assert!(check_well_formed(&hostile).is_ok());
    }
}
